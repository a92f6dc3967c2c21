#pragma once
// GalaxyData: the project's RubixData. A galaxy record plus structure-of-arrays particle sets.
// Each particle set declares its input fields once, in for_each_field beside the members: name,
// unit, components, sharding and where its values come from (FieldOrigin). What stages derive
// for the particles (a star's spaxel, its A_V) is kept by name in `derived`
// (data/derived_fields.h), declared by the stages that make it.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/cosmology.h"
#include "data/derived_fields.h"
#include "data/sharded_array.h"

namespace ifusim {

// Where a field's values come from: the input file or arrays, or the readers, from other input
// fields (a gas cell's temperature from u and x_e).
enum class FieldOrigin { input, reader };

struct FieldSpec {
  const char* name;
  const char* unit;  // "" for dimensionless
  int components;
  Sharding::Kind sharding;
  FieldOrigin origin;
  bool derived() const { return origin != FieldOrigin::input; }  // by the readers
};

struct Galaxy {
  std::string simulation;  // e.g. "L75n1820TNG"
  int snapshot = -1;
  long long subhalo_id = -1;
  double redshift = 0.0;                      // of the snapshot
  double scale_factor = 1.0;                  // of the snapshot
  Cosmology cosmology;                        // the snapshot's own
  std::array<double, 3> center_kpc{0, 0, 0};  // physical, in the box frame
  double halfmass_radius_stars_kpc = 0.0;
};

struct Stars {
  ShardedArray<float> position_kpc;       // (N, 3) physical, relative to the centre
  ShardedArray<float> velocity_kms;       // (N, 3) peculiar, relative to the galaxy
  ShardedArray<float> initial_mass_msun;  // what SSP spectra are normalised to
  ShardedArray<float> mass_msun;          // current mass
  ShardedArray<float> metallicity;        // mass fraction Z
  ShardedArray<float> age_gyr;            // at the snapshot's own epoch
  // Physical kpc, the support radius of the star's SPH kernel: TNG's StellarHsml where the input
  // has it (optional), otherwise set by a spaxel stage with smoothing "kernel" (the distance to
  // the k-th nearest star, stages/spaxel_grid/smoothing.h). Empty when neither applies.
  ShardedArray<float> smoothing_length_kpc;
  DerivedFields derived;  // by the run's stages, for these stars

  std::size_t count() const { return mass_msun.rows(); }

  template <class Self, class F>
  static void for_each_field(Self& s, F&& f) {
    using K = Sharding::Kind;
    f(FieldSpec{"position_kpc", "kpc", 3, K::sharded, FieldOrigin::input}, s.position_kpc);
    f(FieldSpec{"velocity_kms", "km/s", 3, K::sharded, FieldOrigin::input}, s.velocity_kms);
    f(FieldSpec{"initial_mass_msun", "Msun", 1, K::sharded, FieldOrigin::input},
      s.initial_mass_msun);
    f(FieldSpec{"mass_msun", "Msun", 1, K::sharded, FieldOrigin::input}, s.mass_msun);
    f(FieldSpec{"metallicity", "", 1, K::sharded, FieldOrigin::input}, s.metallicity);
    f(FieldSpec{"age_gyr", "Gyr", 1, K::sharded, FieldOrigin::input}, s.age_gyr);
    f(FieldSpec{"smoothing_length_kpc", "kpc", 1, K::sharded, FieldOrigin::input},
      s.smoothing_length_kpc);
  }
};

struct Gas {
  ShardedArray<float> position_kpc;  // (N, 3)
  ShardedArray<float> velocity_kms;  // (N, 3)
  ShardedArray<float> mass_msun;
  ShardedArray<float> density_msun_per_kpc3;
  ShardedArray<float> internal_energy_km2_s2;  // specific, (km/s)^2
  ShardedArray<float> electron_abundance;      // n_e / n_H
  ShardedArray<float> metallicity;             // mass fraction Z
  ShardedArray<float> metals;                  // (N, 10) GFM_Metals mass fractions
  ShardedArray<float> sfr_msun_per_yr;
  ShardedArray<float> temperature_k;  // derived by the readers from u and x_e
  DerivedFields derived;              // by the run's stages, for these cells

  std::size_t count() const { return mass_msun.rows(); }

  template <class Self, class F>
  static void for_each_field(Self& s, F&& f) {
    using K = Sharding::Kind;
    f(FieldSpec{"position_kpc", "kpc", 3, K::sharded, FieldOrigin::input}, s.position_kpc);
    f(FieldSpec{"velocity_kms", "km/s", 3, K::sharded, FieldOrigin::input}, s.velocity_kms);
    f(FieldSpec{"mass_msun", "Msun", 1, K::sharded, FieldOrigin::input}, s.mass_msun);
    f(FieldSpec{"density_msun_per_kpc3", "Msun/kpc^3", 1, K::sharded, FieldOrigin::input},
      s.density_msun_per_kpc3);
    f(FieldSpec{"internal_energy_km2_s2", "km^2/s^2", 1, K::sharded, FieldOrigin::input},
      s.internal_energy_km2_s2);
    f(FieldSpec{"electron_abundance", "", 1, K::sharded, FieldOrigin::input}, s.electron_abundance);
    f(FieldSpec{"metallicity", "", 1, K::sharded, FieldOrigin::input}, s.metallicity);
    f(FieldSpec{"metals", "", 10, K::sharded, FieldOrigin::input}, s.metals);
    f(FieldSpec{"sfr_msun_per_yr", "Msun/yr", 1, K::sharded, FieldOrigin::input},
      s.sfr_msun_per_yr);
    f(FieldSpec{"temperature_k", "K", 1, K::sharded, FieldOrigin::reader}, s.temperature_k);
  }
};

// Star fields on the host, row-major (as read from a file or generated), and their placement on
// a mesh, every field Sharded(particles) (jax.device_put of a whole particle set).
struct HostStars {
  std::vector<float> position_kpc;  // (N, 3)
  std::vector<float> velocity_kms;  // (N, 3)
  std::vector<float> mass_msun;
  std::vector<float> initial_mass_msun;
  std::vector<float> metallicity;
  std::vector<float> age_gyr;
  std::vector<float> smoothing_length_kpc;  // optional: empty, or one per star
  std::size_t size() const { return mass_msun.size(); }
  std::vector<float> velocity_los_kms() const {  // v_z
    std::vector<float> v(size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = velocity_kms[3 * i + 2];
    return v;
  }
};

inline Stars put_stars(const Mesh& mesh, const HostStars& h) {
  Stars s;
  const auto sharded = Sharding::sharded();
  s.position_kpc = device_put(mesh, h.position_kpc, 3, sharded);
  s.velocity_kms = device_put(mesh, h.velocity_kms, 3, sharded);
  s.mass_msun = device_put(mesh, h.mass_msun, 1, sharded);
  s.initial_mass_msun = device_put(mesh, h.initial_mass_msun, 1, sharded);
  s.metallicity = device_put(mesh, h.metallicity, 1, sharded);
  s.age_gyr = device_put(mesh, h.age_gyr, 1, sharded);
  if (!h.smoothing_length_kpc.empty())
    s.smoothing_length_kpc = device_put(mesh, h.smoothing_length_kpc, 1, sharded);
  return s;
}

// Bounds over all the galaxy's stars as the input gives them, before any stage: the stages take
// their fixed-point scales (and the binned method its velocity range) from these, so that a
// galaxy streamed block by block gets the same scales, hence the same bits, as one held at once.
// A rotation keeps them valid: every star's |v| stays below speed_bound_kms().
struct StarBounds {
  std::size_t count = 0;
  double max_initial_mass_msun = 0.0;
  double max_mass_msun = 0.0;
  std::array<double, 3> max_abs_velocity_kms{0, 0, 0};  // per component, as given
  double speed_bound_kms() const {
    const auto& v = max_abs_velocity_kms;
    return std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
  }
  // The bounds of two disjoint sets of stars together (maxima: exact in any order).
  void merge(const StarBounds& other) {
    count += other.count;
    max_initial_mass_msun = std::max(max_initial_mass_msun, other.max_initial_mass_msun);
    max_mass_msun = std::max(max_mass_msun, other.max_mass_msun);
    for (int c = 0; c < 3; ++c)
      max_abs_velocity_kms[c] = std::max(max_abs_velocity_kms[c], other.max_abs_velocity_kms[c]);
  }
};

struct GalaxyData {
  Galaxy galaxy;
  Stars stars;
  Gas gas;
  // Set by the pipeline (from the stars held, or by a streamed source's first pass).
  std::optional<StarBounds> star_bounds;
};

}  // namespace ifusim
