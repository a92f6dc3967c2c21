#pragma once
// Synthetic disc galaxies: the physical model that makes a galaxy's particles from a spec and a
// seed, as rows in IllustrisTNG's on-disk units (tng_rows.h). tng_writer.h writes them as TNG
// files (synthetic_files.h: a spec straight to a cutout or a snapshot); synthetic_source.h makes
// them in memory for a run.
//
// Every particle value is a pure function of (spec, particle type, particle index): a
// counter-based hash (counter_rng.h) gives each particle its own random numbers. Generation
// therefore runs in blocks of any size with bounded memory, and a subhalo's particles are
// bitwise identical whether written as a cutout, spread over snapshot chunks or made in memory.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/cosmology.h"
#include "io/tng/tng_rows.h"

namespace ifusim::tng {

// One galaxy (one subhalo): an exponential stellar disc (sech^2 vertical profile) plus a
// Hernquist bulge, an exponential gas disc, an arctan rotation curve with velocity dispersion,
// radial age and metallicity gradients (older, more metal-rich centre) and wind cells.
// Lengths in physical kpc, velocities in physical km/s, masses in Msun unless named otherwise.
struct SyntheticGalaxySpec {
  std::size_t n_stars = 10000;  // PartType4 entries, wind cells included
  std::size_t n_gas = 1000;     // PartType0 cells
  double wind_fraction = 0.02;  // expected fraction of PartType4 entries that are wind cells
  std::uint64_t seed = 1;

  double stellar_mass_msun = 5e10;  // total current mass of the stars (wind cells excluded), +-1%
  double gas_mass_msun = 1e10;      // total gas mass
  double bulge_fraction = 0.2;      // bulge-to-total stellar mass ratio
  double disc_scale_length_kpc = 3.0;
  double disc_scale_height_kpc = 0.3;   // sech^2(z / h_z) profile
  double bulge_scale_radius_kpc = 0.6;  // Hernquist (1990) scale radius a
  double gas_scale_length_kpc = 5.0;
  double gas_scale_height_kpc = 0.15;

  // Rotation curve v_c(R) = v_flat (2/pi) arctan(R / r_t) (Courteau 1997, AJ 114, 2402).
  double v_flat_kms = 220.0;
  double rotation_turnover_kpc = 1.5;
  double disc_dispersion_kms = 50.0;    // stellar radial dispersion at R = 0, falls as exp(-R/2R_d)
  double bulge_dispersion_kms = 120.0;  // isotropic
  double gas_dispersion_kms = 10.0;
  double wind_speed_kms = 300.0;  // vertical outflow speed of wind cells (up to this value)

  // Metallicity: log10(Z / Z_sun) = central + gradient * r, plus 0.15 dex scatter (stars) or
  // 0.1 dex (gas); Z_sun = 0.0127 (TNG's solar metallicity, Asplund et al. 2009).
  double central_metallicity_dex = 0.2;
  double metallicity_gradient_dex_per_kpc = -0.04;

  // Orientation: the disc's normal is +z rotated by the inclination about x, then by the
  // position angle about z.
  double inclination_deg = 0.0;
  double position_angle_deg = 0.0;

  // Snapshot epoch, cosmology (TNG's Planck 2015 defaults) and placement in the periodic box.
  double redshift = 0.0;
  Cosmology cosmology;
  double omega_baryon = 0.0486;
  double box_size_ckpc_h = 75000.0;
  std::array<double, 3> center_ckpc_h = {37500.0, 37500.0, 37500.0};
  std::array<double, 3> bulk_velocity_kms = {0.0, 0.0, 0.0};  // physical peculiar velocity

  // Stars get ParticleIDs first_particle_id .. + n_stars - 1, gas cells the next n_gas IDs.
  std::uint64_t first_particle_id = 1;
  int snapshot = 99;            // SnapshotNumber in the cutout header
  std::int64_t subhalo_id = 0;  // CutoutID in the cutout header
  std::string simulation_name = "ifusim-synthetic";
  std::size_t block_rows = 1 << 20;  // rows generated and written at a time (bounded memory)

  double scale_factor() const { return 1.0 / (1.0 + redshift); }
  // Throws ConfigError naming the field (after key_prefix) and what was expected.
  void validate(const std::string& key_prefix = "synthetic galaxy: ") const;
};

// A galaxy's particles on demand: what the spec fixes (orientation, mass units, random streams)
// is derived once, then any rows are generated in TNG's on-disk units, exactly as the writer
// stores them. Generating is const and thread-safe: devices may generate their rows concurrently.
class SyntheticGalaxyGenerator final : public TngGalaxySource {
 public:
  explicit SyntheticGalaxyGenerator(SyntheticGalaxySpec spec);  // validates the spec
  ~SyntheticGalaxyGenerator() override;
  SyntheticGalaxyGenerator(const SyntheticGalaxyGenerator&) = delete;
  SyntheticGalaxyGenerator& operator=(const SyntheticGalaxyGenerator&) = delete;

  const SyntheticGalaxySpec& spec() const;
  const TngGalaxyRecord& record() const override;
  // Rows [begin, end) of the stars / gas cells (resizes `out`).
  void star_rows(std::size_t begin, std::size_t end, TngStarRows& out) const override;
  void gas_rows(std::size_t begin, std::size_t end, TngGasRows& out) const override;
  std::size_t block_rows() const override;  // spec().block_rows

 private:
  struct Model;
  std::unique_ptr<const Model> model_;
};

// Rows [begin, end) of the galaxy's stars / gas cells (resizes `out`); one generator per call.
void generate_star_rows(const SyntheticGalaxySpec& galaxy, std::size_t begin, std::size_t end,
                        TngStarRows& out);
void generate_gas_rows(const SyntheticGalaxySpec& galaxy, std::size_t begin, std::size_t end,
                       TngGasRows& out);

// A snapshot made of several synthetic galaxies, laid out as TngSnapshotLayout (tng_writer.h)
// describes: subhalos in FoF groups, each group's particles in none of its subhalos ("inner
// fuzz"), and particles in no group ("outer fuzz"). Every part is a SyntheticGalaxySpec (a fuzz
// is typically a diffuse spheroid: bulge_fraction = 1, a large bulge radius); all must share
// redshift, cosmology and box size, and their ParticleIDs ranges must not overlap.
struct SyntheticSnapshotSpec {
  int snapshot = 99;
  int n_chunks = 3;  // snapshot and group catalog files
  std::vector<SyntheticGalaxySpec> subhalos;
  // group_of_subhalo[s] = FoF group of subhalo s: empty means all in group 0; otherwise
  // non-decreasing from 0 without gaps (the first subhalo of a group is its central).
  std::vector<int> group_of_subhalo;
  // Empty, or one per group: its particles in no subhalo (n_stars = n_gas = 0 for none).
  std::vector<SyntheticGalaxySpec> group_fuzz;
  // Particles in no group (n_stars = n_gas = 0 for none), at the end of each type's array.
  SyntheticGalaxySpec unassociated = none();
  std::string simulation_name = "ifusim-synthetic";
  // Each part with particles a valid galaxy (ConfigError naming the part), ParticleIDs ranges
  // disjoint. The writer checks the layout itself.
  void validate() const;
  int n_groups() const { return group_of_subhalo.empty() ? 1 : group_of_subhalo.back() + 1; }
  static SyntheticGalaxySpec none() {
    SyntheticGalaxySpec g;
    g.n_stars = g.n_gas = 0;
    return g;
  }
};

// A central galaxy and n_subhalos - 1 smaller satellites (stellar and gas mass and particle
// counts falling as 1 / (4 s), placed 60-200 kpc away with their own seeds and particle-ID
// ranges), spread over n_groups FoF groups (the first n_subhalos % n_groups groups one more).
// fuzz_fraction > 0 adds to each group a diffuse stellar/gas halo of that fraction of its
// central's particles (at least 10 of each type the central has), and as many unassociated
// particles as the first group's fuzz, 1.5-3 Mpc away from the central.
SyntheticSnapshotSpec make_snapshot_spec(const SyntheticGalaxySpec& central, int n_subhalos,
                                         int n_groups, int n_chunks, double fuzz_fraction = 0.05);

}  // namespace ifusim::tng
