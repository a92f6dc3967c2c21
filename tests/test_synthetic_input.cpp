// input.synthetic: the make-galaxy galaxy built in memory (io/tng/synthetic_source.h). Bitwise
// independent of the block size and the device count; the same particles, converted the same
// way, as writing the galaxy to a TNG cutout and reading it back; config errors that name the
// key and leave nothing behind; an end-to-end run of the example config.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "io/run_config.h"
#include "io/tng/synthetic_files.h"
#include "io/tng/synthetic_source.h"
#include "io/tng/tng_convert.h"
#include "io/tng/tng_reader.h"
#include "pipeline/devices.h"
#include "pipeline/runner.h"
#include "tng_test_util.h"

using namespace ifusim;
namespace fs = std::filesystem;
using test::host;

namespace {

// A tilted, moving disc near a corner of the box, so that positions wrap across the periodic
// boundary and the bulk velocity matters.
tng::SyntheticGalaxySpec tilted_galaxy() {
  tng::SyntheticGalaxySpec g;
  g.n_stars = 20000;
  g.n_gas = 3000;
  g.wind_fraction = 0.0;
  g.seed = 7;
  g.redshift = 0.3;
  g.inclination_deg = 50.0;
  g.position_angle_deg = 20.0;
  g.center_ckpc_h = {2.0, 37500.0, 74995.0};
  g.bulk_velocity_kms = {120.0, -40.0, 15.0};
  return g;
}

// Every input field of the galaxy (and the derived gas temperature), row-major on the host.
std::map<std::string, std::vector<float>> fields(const GalaxyData& d) {
  std::map<std::string, std::vector<float>> out;
  Stars::for_each_field(d.stars, [&](const FieldSpec& spec, const auto& field) {
    if constexpr (std::is_same_v<std::decay_t<decltype(field)>, ShardedArray<float>>)
      if (!spec.derived() && !field.empty()) out[std::string("stars.") + spec.name] = host(field);
  });
  Gas::for_each_field(d.gas, [&](const FieldSpec& spec, const auto& field) {
    if constexpr (std::is_same_v<std::decay_t<decltype(field)>, ShardedArray<float>>)
      if (!field.empty()) out[std::string("gas.") + spec.name] = host(field);
  });
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string example(const std::string& name) {
  return std::string(IFUSIM_SOURCE_DIR) + "/configs/examples/" + name + ".json";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("synthetic input: bitwise the same galaxy for any block size and device count",
          "[synthetic]") {
  auto spec = tilted_galaxy();
  spec.block_rows = std::size_t{1} << 20;
  const auto mesh1 = make_mesh(Backend::cpu, 1);
  const GalaxyData ref = tng::make_synthetic_galaxy(*mesh1, spec);
  const auto want = fields(ref);
  REQUIRE(want.size() == 6 + 10);  // 6 star fields (no StellarHsml); 9 gas fields, temperature
  REQUIRE(want.at("stars.mass_msun").size() == spec.n_stars);
  REQUIRE(want.at("gas.metals").size() == 10 * spec.n_gas);
  REQUIRE(ref.galaxy.halfmass_radius_stars_kpc > 0);

  for (const std::size_t block_rows : {std::size_t{1000}, std::size_t{7777}, std::size_t{1} << 20})
    for (const int n_devices : {1, 2, 3, 5}) {
      INFO("block_rows " << block_rows << ", " << n_devices << " devices");
      spec.block_rows = block_rows;
      const auto mesh = make_mesh(Backend::cpu, n_devices);
      const GalaxyData d = tng::make_synthetic_galaxy(*mesh, spec);
      CHECK(d.stars.mass_msun.shards().size() == static_cast<std::size_t>(n_devices));
      const auto got = fields(d);
      REQUIRE(got.size() == want.size());
      for (const auto& [name, values] : want) {
        INFO(name);
        CHECK(bitwise_equal(got.at(name), values));
      }
      // The half-mass radius too, bit for bit: its radius bins are summed in fixed point.
      CHECK(std::memcmp(&d.galaxy.halfmass_radius_stars_kpc, &ref.galaxy.halfmass_radius_stars_kpc,
                        sizeof(double)) == 0);
    }
}

TEST_CASE("synthetic input: the galaxy read back from a written cutout, up to its found centre",
          "[synthetic]") {
  const auto spec = tilted_galaxy();
  test::ScratchDir dir("synthetic_input");
  const std::string path = dir.file("galaxy.hdf5");
  tng::write_tng_cutout(path, spec);
  const auto mesh = make_mesh(Backend::cpu, 2);
  TngReadOptions options;
  options.path = path;
  TngIngestReport report;
  const GalaxyData read = read_tng(*mesh, options, &report);
  const GalaxyData made = tng::make_synthetic_galaxy(*mesh, spec);
  REQUIRE(report.n_wind_dropped == 0);
  REQUIRE(read.stars.count() == spec.n_stars);
  REQUIRE(made.stars.count() == spec.n_stars);
  REQUIRE(read.gas.count() == spec.n_gas);
  REQUIRE(made.gas.count() == spec.n_gas);

  // The galaxy record: the header's values, as the reader takes them.
  const Galaxy &r = read.galaxy, &m = made.galaxy;
  CHECK(m.simulation == r.simulation);
  CHECK(m.snapshot == r.snapshot);
  CHECK(m.subhalo_id == r.subhalo_id);
  CHECK(m.redshift == r.redshift);
  CHECK(m.scale_factor == r.scale_factor);
  CHECK(m.cosmology.name == r.cosmology.name);
  CHECK(m.cosmology.hubble_param == r.cosmology.hubble_param);
  CHECK(m.cosmology.omega_matter == r.cosmology.omega_matter);
  CHECK(m.cosmology.omega_lambda == r.cosmology.omega_lambda);

  // Fields that do not depend on the centre go through the same conversion from the same
  // stored values: bit for bit.
  const auto got = fields(made), want = fields(read);
  for (const char* name :
       {"stars.initial_mass_msun", "stars.mass_msun", "stars.metallicity", "stars.age_gyr",
        "gas.mass_msun", "gas.density_msun_per_kpc3", "gas.internal_energy_km2_s2",
        "gas.electron_abundance", "gas.metallicity", "gas.metals", "gas.sfr_msun_per_yr",
        "gas.temperature_k"}) {
    INFO(name);
    CHECK(bitwise_equal(got.at(name), want.at(name)));
  }

  // Positions and velocities: the reader must find the centre of a cutout (shrinking spheres)
  // and its bulk velocity (stars inside the half-mass radius); the in-memory source knows the
  // true ones. Both convert the same stored values in double and round once to float32, so
  // made = read + (found - true) up to one rounding of each: 2^-24 (|made| + |read|), plus
  // 1e-9 for the double arithmetic. The found centre is within 0.05 kpc of the truth and the
  // bulk velocity within 5 km/s (sampling noise of ~20000 stars).
  const double kpc_per_code = spec.scale_factor() / spec.cosmology.hubble_param;
  const double box_kpc = spec.box_size_ckpc_h * kpc_per_code;
  std::array<double, 3> dx{}, dv{};
  for (int c = 0; c < 3; ++c) {
    dx[c] = tng::periodic_offset(r.center_kpc[c] - m.center_kpc[c], box_kpc);
    dv[c] = report.bulk_velocity_kms[c] - spec.bulk_velocity_kms[c];
    CHECK(std::abs(dx[c]) < 0.05);
    CHECK(std::abs(dv[c]) < 5.0);
    CHECK(m.center_kpc[c] == Approx(spec.center_ckpc_h[c] * kpc_per_code).epsilon(1e-15));
  }
  for (const std::string set : {"stars.", "gas."})
    for (const auto& [field, offset] :
         {std::pair{"position_kpc", dx}, std::pair{"velocity_kms", dv}}) {
      const auto& a = got.at(set + field);
      const auto& b = want.at(set + field);
      REQUIRE(a.size() == b.size());
      std::size_t bad = 0;
      double worst = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        const double diff = std::abs(a[i] - (b[i] + offset[i % 3]));
        const double tol = 0x1p-24 * (std::abs(a[i]) + std::abs(b[i])) + 1e-9;
        worst = std::max(worst, diff / tol);
        if (diff > tol) ++bad;
      }
      INFO(set << field << ": worst difference " << worst << " of the tolerance");
      CHECK(bad == 0);
    }

  // Half-mass radius: the source's 0.002 dex histogram around the true centre against the
  // reader's exact sort around the found one (1 %), and against an exact sort of the source's
  // own stars around the true centre, which the histogram, interpolated within its 0.46 % wide
  // bin, must match to better than a bin (0.3 %).
  CHECK(m.halfmass_radius_stars_kpc == Approx(r.halfmass_radius_stars_kpc).epsilon(0.01));
  const auto& pos = got.at("stars.position_kpc");
  const auto& mass = got.at("stars.mass_msun");
  std::vector<double> radius(mass.size());
  for (std::size_t i = 0; i < mass.size(); ++i)
    radius[i] = std::hypot(double(pos[3 * i]), double(pos[3 * i + 1]), double(pos[3 * i + 2]));
  std::vector<std::size_t> order(mass.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto i, auto j) { return radius[i] < radius[j]; });
  const double total = std::accumulate(mass.begin(), mass.end(), 0.0);
  double cumulative = 0, exact = 0;
  for (const std::size_t i : order)
    if ((cumulative += mass[i]) >= 0.5 * total) {
      exact = radius[i];
      break;
    }
  CHECK(m.halfmass_radius_stars_kpc == Approx(exact).epsilon(0.003));
  // The stars' total current mass is the spec's: the mass unit is set from the first 65536
  // stars, here all of them, so it is exact up to the float32 rounding of each mass.
  CHECK(total == Approx(spec.stellar_mass_msun).epsilon(1e-4));
}

TEST_CASE("synthetic input: gas only when asked for, no wind cells", "[synthetic]") {
  auto spec = tilted_galaxy();
  spec.n_stars = 500;
  spec.n_gas = 50;
  const auto mesh = make_mesh(Backend::cpu, 3);
  const GalaxyData no_gas = tng::make_synthetic_galaxy(*mesh, spec, /*with_gas=*/false);
  CHECK(no_gas.stars.count() == 500);
  CHECK(no_gas.gas.count() == 0);
  CHECK(no_gas.gas.temperature_k.empty());
  spec.n_gas = 0;
  CHECK(tng::make_synthetic_galaxy(*mesh, spec).gas.count() == 0);
  spec.wind_fraction = 0.02;
  CHECK_THROWS_WITH(tng::make_synthetic_galaxy(*mesh, spec),
                    Catch::Contains("wind_fraction: expected 0"));
}

TEST_CASE("synthetic input: the run config, its defaults and its errors", "[synthetic]") {
  const std::string config = example("muse_synthetic");
  const RunConfig c = load_run_config(config, {});
  REQUIRE(c.synthetic);
  CHECK(c.input_file.empty());
  CHECK(c.synthetic->n_stars == 100000);  // "1e5": a whole number written as a float
  CHECK(c.synthetic->n_gas == 10000);
  CHECK(c.synthetic->seed == 1);
  CHECK(c.synthetic->redshift == 0.05);
  CHECK(c.synthetic->block_rows == 1048576);
  CHECK(c.synthetic->wind_fraction == 0.0);

  // Defaults: gas = stars / 10, the snapshot at the observed redshift, the run's cosmology.
  const RunConfig d = load_run_config(
      config, {"input.synthetic={\"stars\": 2000, \"v_flat_kms\": 150, \"inclination_deg\": 30}",
               "galaxy.redshift=0.1", "cosmology={\"hubble_param\": 0.7, \"omega_matter\": 0.3}"});
  CHECK(d.synthetic->n_gas == 200);
  CHECK(d.synthetic->redshift == 0.1);
  CHECK(d.synthetic->v_flat_kms == 150.0);
  CHECK(d.synthetic->inclination_deg == 30.0);
  CHECK(d.synthetic->cosmology.hubble_param == 0.7);
  CHECK(d.synthetic->block_rows == std::size_t{1} << 20);

  const std::pair<std::string, std::string> errors[] = {
      {"input.synthetic.stars=0", "input.synthetic.stars: expected an integer >= 1"},
      {"input.synthetic.stars=-5", "input.synthetic.stars: expected an integer >= 1"},
      {"input.synthetic.stars=2.5", "input.synthetic.stars: expected an integer >= 1"},
      {"input.synthetic.gas=-1", "input.synthetic.gas: expected an integer >= 0"},
      {"input.synthetic.block_rows=0", "input.synthetic.block_rows: expected an integer >= 1"},
      {"input.synthetic.bulge_fraction=1.5",
       "input.synthetic.bulge_fraction: expected a value in [0, 1]"},
      {"input.synthetic.redshift=16", "input.synthetic.redshift: expected a value in [0, 15]"},
      {"input.synthetic.wind_fraction=0.1", "input.synthetic.wind_fraction: unknown key"},
      {"input.file=galaxy.hdf5", "input: expected exactly one of \"file\""},
      {"input={}", "input: expected exactly one of \"file\""},
      {"input.format=tng", "input.format: unknown key"}};
  for (const auto& [assignment, message] : errors) {
    INFO(assignment);
    CHECK_THROWS_AS(load_run_config(config, {assignment}), ConfigError);
    CHECK_THROWS_WITH(load_run_config(config, {assignment}), Catch::Contains(message));
  }
  CHECK_THROWS_WITH(load_run_config(config, {"input.file=galaxy.hdf5"}), Catch::Contains("both"));
  CHECK_THROWS_WITH(load_run_config(config, {"input={}"}), Catch::Contains("neither"));
}

TEST_CASE("synthetic input: a bad count stops `ifusim run` before any output exists",
          "[synthetic][cli]") {
  test::ScratchDir dir("synthetic_cli");
  const std::string exe = IFUSIM_BINARY, out = dir.file("out"), log = dir.file("run.log");
  for (const std::string set : {"input.synthetic.stars=0", "input.synthetic.stars=-5",
                                "input.synthetic.block_rows=0", "input.file=galaxy.hdf5"}) {
    INFO(set);
    const std::string cmd = exe + " run " + example("muse_synthetic") + " --no-progress --out " +
                            out + " --set " + set + " > " + log + " 2>&1";
    CHECK(std::system(cmd.c_str()) != 0);
    CHECK_THAT(read_text(log), Catch::Contains(set.substr(0, set.find('='))) ||
                                   Catch::Contains("input: expected exactly one"));
    CHECK_FALSE(fs::exists(out));
  }
}

TEST_CASE("synthetic input: the MUSE example runs end to end", "[synthetic][pipeline]") {
  test::ScratchDir dir("synthetic_run");
  const RunConfig config = load_run_config(
      example("muse_synthetic"), {"input.synthetic.stars=3000", "input.synthetic.gas=300"});
  RunOptions options;
  options.n_devices = 2;
  options.output_dir = dir.file("out");
  options.progress = false;
  const RunReport report = run_pipeline(config, options);
  CHECK(report.stars_per_device == std::vector<std::size_t>{1500, 1500});
  REQUIRE(report.cube.shape.n_voxels() > 0);
  double total = 0;
  std::size_t nonfinite = 0;
  for (const double v : report.cube.data) {
    if (!std::isfinite(v)) ++nonfinite;
    total += v;
  }
  CHECK(nonfinite == 0);
  CHECK(total > 0);
  CHECK(fs::exists(fs::path(dir.file("out")) / "cube.fits"));
  // The cube's provenance names the synthetic input.
  bool provenance = false;
  for (const auto& [key, value] : report.cube.provenance)
    if (key == "INPUT") provenance = value.rfind("synthetic {", 0) == 0;
  CHECK(provenance);
}
