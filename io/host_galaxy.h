#pragma once
// A galaxy held in host memory, field by field, as another program hands it over (the Python
// package's Galaxy.from_arrays, a galaxy read once and run many times): the input of a run that
// reads no file. Fields are named as in data/galaxy_data.h's tables (Stars/Gas::for_each_field)
// and are row-major (rows x components), as numpy and HDF5 hold them.
//
// Conventions are those of the readers' output: positions in physical kpc relative to the
// galaxy's centre, peculiar velocities in km/s relative to the galaxy's bulk motion, masses in
// Msun, metallicities as mass fractions, ages in Gyr at the galaxy's own epoch (`galaxy.redshift`).
#include <map>
#include <string>
#include <vector>

#include "data/galaxy_data.h"
#include "data/mesh.h"

namespace ifusim {

struct HostField {
  std::vector<float> values;  // rows x components, row-major
  std::size_t rows = 0;
  int components = 1;
};

struct HostGalaxy {
  Galaxy galaxy;
  std::string source;  // where it came from, for the cube's provenance
  std::map<std::string, HostField> stars, gas;
  std::size_t n_stars() const;  // 0 without stars
  std::size_t n_gas() const;
};

// Checks a galaxy against the particle sets' tables: every field known and an input (not
// derived), of (rows, components) with one row count per set, finite and in its range (masses
// > 0, ages >= 0, metallicities in [0, 1), ...), and the required fields present: stars need
// position_kpc, velocity_kms, initial_mass_msun, age_gyr and metallicity; gas, when it has rows,
// position_kpc, velocity_kms, mass_msun, density_msun_per_kpc3, metallicity and sfr_msun_per_yr.
// Throws InputError naming the field ("stars.age_gyr") and what was expected. Then completes
// what arrays do not say, as the TNG reader would find it: the scale factor 1 / (1 + z), and the
// stellar half-mass radius (current masses, around the centre) where the record has none.
// Ages far beyond the Universe's (above 100 Gyr: years or Myr given as Gyr) are refused. Returns
// warnings, with numbers, for what is legal but likely a mistake: stars older than the Universe
// at the galaxy's redshift (lookback times from today?), a centre of mass far from the origin for
// the stars' size (positions not centred?), a bulk velocity over 100 km/s (not subtracted?); the
// last two from 100 stars on.
std::vector<std::string> validate_and_complete(HostGalaxy& galaxy);

// The galaxy on the mesh, every field Sharded(particles) (jax.device_put), as a reader would
// give it; stars without mass_msun take their initial mass. The gas only when with_gas.
GalaxyData put_host_galaxy(const Mesh& mesh, const HostGalaxy& galaxy, bool with_gas);

// The input fields of a galaxy on a mesh, gathered to the host (the reverse of put_host_galaxy).
HostGalaxy host_galaxy_of(const GalaxyData& data, std::string source);

}  // namespace ifusim
