#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/config_error.h"
#include "io/tng/synthetic_files.h"

namespace ifusim::cli {
namespace {

// Particle counts are read as numbers so that "1e8" works, then checked to be whole.
std::size_t particle_count(double value, const std::string& option) {
  if (!(value >= 0) || value != std::floor(value) || value > 1e12)
    throw ConfigError(option + ": expected a whole number of particles in [0, 1e12], got " +
                      std::to_string(value));
  return static_cast<std::size_t>(value);
}

}  // namespace

void add_make_galaxy_command(CLI::App& app, int& exit_code) {
  struct Options {
    std::string out;
    double stars = -1, gas = -1;
    std::string layout = "cutout";
    int chunks = 3, subhalos = 1, groups = 1;
    double fuzz_fraction = 0.05;
    tng::SyntheticGalaxySpec galaxy;
    std::vector<double> center, bulk_velocity;
    double block_rows = 1 << 20;
  };
  auto o = std::make_shared<Options>();
  auto& g = o->galaxy;
  auto* cmd = app.add_subcommand(
      "make-galaxy",
      "Write a synthetic disc galaxy in IllustrisTNG format: a subhalo cutout (one HDF5 file) or "
      "a multi-chunk snapshot with its group catalog and offsets");
  cmd->add_option("OUT", o->out,
                  "Output: the cutout's .hdf5 file, or the folder that receives snapdir_NNN/, "
                  "groups_NNN/ and offsets_NNN.hdf5")
      ->required();
  cmd->add_option("--stars", o->stars, "Number of PartType4 entries (stars and wind cells)")
      ->required();
  cmd->add_option("--gas", o->gas, "Number of gas cells (default: stars / 10)");
  cmd->add_option("--seed", g.seed, "Random seed (the output is a pure function of it)");
  cmd->add_option("--layout", o->layout, "cutout or snapshot")
      ->check(CLI::IsMember({"cutout", "snapshot"}));
  cmd->add_option("--chunks", o->chunks, "Snapshot and group catalog files (snapshot layout)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--subhalos", o->subhalos,
                  "Subhalos: the galaxy plus smaller companions (snapshot layout)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--groups", o->groups, "FoF groups the subhalos are dealt to (snapshot layout)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--fuzz-fraction", o->fuzz_fraction,
                  "Snapshot layout: particles of each group in no subhalo, and particles in no "
                  "group, as a fraction of the group central's (0: none)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--snapshot", g.snapshot, "Snapshot number")->check(CLI::Range(0, 999));
  cmd->add_option("--redshift", g.redshift, "Redshift of the snapshot");
  cmd->add_option("--hubble-param", g.cosmology.hubble_param, "h");
  cmd->add_option("--omega-matter", g.cosmology.omega_matter, "Omega0");
  cmd->add_option("--omega-lambda", g.cosmology.omega_lambda, "OmegaLambda");
  cmd->add_option("--box-size", g.box_size_ckpc_h, "Box size in ckpc/h");
  cmd->add_option("--center", o->center, "Galaxy centre x y z in ckpc/h (default: box centre)")
      ->expected(3);
  cmd->add_option("--bulk-velocity", o->bulk_velocity, "Peculiar velocity x y z in km/s")
      ->expected(3);
  cmd->add_option("--stellar-mass", g.stellar_mass_msun, "Stellar mass in Msun");
  cmd->add_option("--gas-mass", g.gas_mass_msun, "Gas mass in Msun");
  cmd->add_option("--bulge-fraction", g.bulge_fraction, "Bulge-to-total stellar mass ratio");
  cmd->add_option("--disc-scale-length", g.disc_scale_length_kpc, "Stellar disc scale length, kpc");
  cmd->add_option("--disc-scale-height", g.disc_scale_height_kpc, "Stellar disc scale height, kpc");
  cmd->add_option("--bulge-scale-radius", g.bulge_scale_radius_kpc, "Hernquist bulge radius, kpc");
  cmd->add_option("--gas-scale-length", g.gas_scale_length_kpc, "Gas disc scale length, kpc");
  cmd->add_option("--v-flat", g.v_flat_kms, "Flat rotation speed, km/s");
  cmd->add_option("--wind-fraction", g.wind_fraction, "Fraction of PartType4 that are wind cells");
  cmd->add_option("--inclination", g.inclination_deg, "Disc inclination, degrees (0: normal +z)");
  cmd->add_option("--position-angle", g.position_angle_deg, "Disc position angle, degrees");
  cmd->add_option("--block-rows", o->block_rows, "Rows generated and written at a time");
  cmd->callback([o, &exit_code] {
    auto& galaxy = o->galaxy;
    galaxy.n_stars = particle_count(o->stars, "--stars");
    galaxy.n_gas = o->gas < 0 ? galaxy.n_stars / 10 : particle_count(o->gas, "--gas");
    galaxy.block_rows = particle_count(o->block_rows, "--block-rows");
    if (o->center.empty())
      galaxy.center_ckpc_h.fill(0.5 * galaxy.box_size_ckpc_h);
    else
      for (int k = 0; k < 3; ++k) galaxy.center_ckpc_h[k] = o->center[k];
    if (!o->bulk_velocity.empty())
      for (int k = 0; k < 3; ++k) galaxy.bulk_velocity_kms[k] = o->bulk_velocity[k];
    const bool snapshot = o->layout == "snapshot";
    if (!snapshot && (o->subhalos != 1 || o->groups != 1))
      throw ConfigError(
          "--subhalos/--groups: only with --layout snapshot (a cutout holds one "
          "subhalo)");
    if (o->groups > o->subhalos)
      throw ConfigError("--groups: expected at most --subhalos (" + std::to_string(o->subhalos) +
                        ") groups, got " + std::to_string(o->groups));
    const auto start = std::chrono::steady_clock::now();
    if (snapshot) {
      const auto spec =
          tng::make_snapshot_spec(galaxy, o->subhalos, o->groups, o->chunks, o->fuzz_fraction);
      tng::write_tng_snapshot(o->out, spec);
      std::cout << "wrote snapshot " << spec.snapshot << " (" << spec.n_chunks << " chunks, "
                << spec.subhalos.size() << " subhalos in " << o->groups << " groups) under "
                << o->out << "\n";
    } else {
      tng::write_tng_cutout(o->out, galaxy);
      std::cout << "wrote cutout " << o->out << "\n";
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "central galaxy: " << galaxy.n_stars << " star entries, " << galaxy.n_gas
              << " gas cells, seed " << galaxy.seed << ", z = " << galaxy.redshift << " ("
              << seconds << " s)\n";
    exit_code = 0;
  });
}

}  // namespace ifusim::cli
