// Streaming (input.stream_block_stars, docs/streaming.md): a galaxy's stars pass through
// the stages block by block, after its gas in one block. The cube, its variance and every map are
// bitwise those of the run that holds the galaxy, for any block size and device count, with either
// spectral method and either histogram storage, with dust and emission lines; the stream's blocks
// are bitwise the in-memory galaxy's rows; the plan holds one block; what cannot stream is refused
// before anything is read or written.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "io/hdf5.h"
#include "io/rubix/rubix_galaxy.h"
#include "io/run_config.h"
#include "io/tng/synthetic_files.h"
#include "io/tng/synthetic_source.h"
#include "io/tng/tng_reader.h"
#include "pipeline/devices.h"
#include "pipeline/plan.h"
#include "pipeline/runner.h"
#include "sanitizer.h"
#include "tng_test_util.h"

using namespace ifusim;
namespace fs = std::filesystem;

namespace {

std::string example(const std::string& name) {
  return std::string(IFUSIM_SOURCE_DIR) + "/configs/examples/" + name + ".json";
}

// The MUSE synthetic example, small, stars only, no files.
RunConfig config(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"input.synthetic.stars=12000", "input.synthetic.gas=0",
                                       "devices.oversubscribe=true"});
  return load_run_config(example("muse_synthetic"), overrides);
}

RunReport run(const RunConfig& c, int devices) {
  RunOptions options;
  options.n_devices = devices;
  options.write_outputs = false;
  options.progress = false;
  return run_pipeline(c, options);
}

// Bit for bit, NaN included (an empty vector has no data pointer to compare).
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Cube, variance and maps bitwise equal; the cube has light and no NaN.
void check_same_cube(const Cube& held, const Cube& streamed) {
  REQUIRE(held.data.size() > 0);
  double total = 0;
  std::size_t masked = 0, infinite = 0;  // NaN: outside a circular aperture (SAMI), in both
  for (double v : held.data) {
    if (std::isnan(v)) ++masked;
    if (std::isinf(v)) ++infinite;
    if (std::isfinite(v)) total += v;
  }
  CHECK(infinite == 0);
  CHECK(masked < held.data.size() / 2);
  CHECK(total > 0);
  CHECK(same_bits(held.data, streamed.data));
  CHECK(same_bits(held.variance, streamed.variance));
  REQUIRE(held.maps.size() == streamed.maps.size());
  for (const auto& [name, map] : held.maps) {
    INFO("map " << name);
    REQUIRE(streamed.maps.count(name) == 1);
    CHECK(same_bits(map.values, streamed.maps.at(name).values));
  }
}

}  // namespace

TEST_CASE("streaming: bitwise the cube of the held galaxy, for any block size and device count",
          "[streaming]") {
  struct Variant {
    const char* what;
    std::vector<std::string> overrides;
    bool every_split;  // all three block sizes and device counts, or the first only
  };
  const Variant variants[] = {
      {"binned, automatic histogram (calc_ifu)", {}, true},
      {"binned, sparse histogram", {"stages.stellar_spectra.histogram=\"sparse\""}, true},
      {"binned, dense histogram", {"stages.stellar_spectra.histogram=\"dense\""}, true},
      {"exact", {"stages.stellar_spectra.method=\"exact\"", "telescope=\"SAMI\""}, true},
      {"mass image, edge-on",
       {"stages={}", "pipeline=[\"orient\", \"aperture\", \"mass_image\", \"psum\"]",
        "galaxy.orientation=\"edge-on\""},
       true},
      {"kernel smoothing, kNN lengths (a pass over the stars' positions)",
       {"stages.aperture.smoothing=\"kernel\"", "stages.aperture.knn_neighbours=8"},
       true},
      {"gas: dust and emission lines (calc_ifu_gas)",
       {"input.synthetic.gas=3000", "pipeline=\"calc_ifu_gas\""},
       false},
      {"gas and stars smoothed (dust, exact, edge-on)",
       {"input.synthetic.gas=3000", "pipeline=\"calc_dusty_ifu\"",
        "stages.aperture.smoothing=\"kernel\"", "stages.aperture.knn_neighbours=8",
        "stages.stellar_spectra.method=\"exact\"", "galaxy.orientation=\"edge-on\""},
       false}};
  // The first split (several blocks on several devices) is the one every variant and every build
  // checks; the sanitizer build checks only it (tests/sanitizer.h).
  const std::pair<std::string, int> splits[] = {{"5003", 3}, {"2801", 1}, {"1000000", 2}};
  for (const auto& [what, overrides, every_split] : variants) {
    INFO(what);
    const RunReport held = run(config(overrides), 1);
    const bool all_splits = every_split && !test::kAddressSanitizer;
    for (std::size_t i = 0; i < (all_splits ? std::size(splits) : 1); ++i) {
      const auto& [block, devices] = splits[i];
      INFO("blocks of " << block << " stars on " << devices << " device(s)");
      auto o = overrides;
      o.push_back("input.stream_block_stars=" + block);
      const RunReport streamed = run(config(o), devices);
      check_same_cube(held.cube, streamed.cube);
      std::size_t stars = 0;
      for (auto n : streamed.stars_per_device) stars += n;
      CHECK(stars == 12000);
      CHECK(streamed.summary.at("n_stars") == 12000);
    }
  }
}

TEST_CASE("streaming: the stream's blocks are the in-memory galaxy's rows, bit for bit",
          "[streaming][synthetic]") {
  const RunConfig c = config({});
  const auto mesh = make_mesh(Backend::cpu, 2);
  const GalaxyData held = tng::make_synthetic_galaxy(*mesh, *c.synthetic, false);
  const tng::SyntheticStarStream stream(*c.synthetic);
  REQUIRE(stream.n_rows() == 12000);
  const GalaxyData record = stream.first_pass(*mesh, 4096);
  CHECK(record.stars.count() == 0);
  CHECK(record.galaxy.halfmass_radius_stars_kpc == held.galaxy.halfmass_radius_stars_kpc);
  CHECK(record.galaxy.halfmass_radius_stars_kpc > 0);
  REQUIRE(record.star_bounds);
  const StarBounds b = measure_star_bounds(*mesh, held.stars);
  CHECK(record.star_bounds->count == b.count);
  CHECK(record.star_bounds->max_initial_mass_msun == b.max_initial_mass_msun);
  CHECK(record.star_bounds->max_mass_msun == b.max_mass_msun);
  CHECK(record.star_bounds->max_abs_velocity_kms == b.max_abs_velocity_kms);
  CHECK(b.speed_bound_kms() > 100);

  const Stars block = stream.read(*mesh, 4000, 5001);
  REQUIRE(block.count() == 5001);
  const auto all_ages = test::host(held.stars.age_gyr), block_ages = test::host(block.age_gyr);
  const auto all_pos = test::host(held.stars.position_kpc);
  const auto block_pos = test::host(block.position_kpc);
  CHECK(std::memcmp(block_ages.data(), all_ages.data() + 4000, 5001 * sizeof(float)) == 0);
  CHECK(std::memcmp(block_pos.data(), all_pos.data() + 3 * 4000, 3 * 5001 * sizeof(float)) == 0);
}

TEST_CASE("streaming: a subhalo of a chunked TNG snapshot, bitwise the cube of read_tng",
          "[streaming][tng]") {
  // A central of 6000 PartType4 rows (wind cells among them) over 4 chunk files, and two
  // satellites: blocks of 1001 rows cross the chunk files' ends.
  const test::ScratchDir dir("streaming_snapshot");
  tng::SyntheticGalaxySpec central;
  central.n_stars = 6000;
  central.n_gas = 2500;
  central.seed = 5;
  central.redshift = 0.05;
  central.inclination_deg = 40;
  central.center_ckpc_h = {74999.0, 20000.0, 0.5};
  central.bulk_velocity_kms = {120.0, -80.0, 35.0};
  const auto spec = tng::make_snapshot_spec(central, 3, 2, 4);
  tng::write_tng_snapshot(dir.path().string(), spec);
  tng::write_tng_cutout(dir.file("cutout.hdf5"), spec.subhalos[0]);
  const std::vector<std::string> input = {"input={\"file\": \"" + dir.path().string() +
                                              "\", \"snapshot\": " + std::to_string(spec.snapshot) +
                                              ", \"subhalo\": 0}",
                                          "galaxy.redshift=0.05", "devices.oversubscribe=true"};
  const RunConfig held_config = load_run_config(example("muse_tng_mastar"), input);
  const RunReport held = run(held_config, 1);
  std::size_t held_stars = held.summary.at("n_stars");
  CHECK(held_stars < 6000);  // the wind cells are dropped
  CHECK(held_stars > 5000);
  for (const int devices : {1, 3}) {
    if (devices == 1 && test::kAddressSanitizer) continue;  // tests/sanitizer.h
    INFO(devices << " device(s)");
    auto streamed_input = input;
    streamed_input.push_back("input.stream_block_stars=1001");
    const RunReport streamed =
        run(load_run_config(example("muse_tng_mastar"), streamed_input), devices);
    check_same_cube(held.cube, streamed.cube);
    CHECK(streamed.summary.at("n_stars") == held_stars);
    std::size_t stars = 0;
    for (auto n : streamed.stars_per_device) stars += n;
    CHECK(stars == held_stars);
  }
  // Its gas, read by hyperslab across the chunk files, in a block of its own.
  auto gas_input = input;
  gas_input.push_back("pipeline=\"calc_ifu_gas\"");
  const RunReport held_gas = run(load_run_config(example("muse_tng_mastar"), gas_input), 1);
  CHECK(held_gas.summary.at("n_gas") > 0);
  CHECK_FALSE(same_bits(held_gas.cube.data, held.cube.data));
  gas_input.push_back("input.stream_block_stars=1001");
  check_same_cube(held_gas.cube,
                  run(load_run_config(example("muse_tng_mastar"), gas_input), 2).cube);

  // With StellarHsml in the files, kernel smoothing takes its lengths from them and streams.
  for (int k = 0; k < 4; ++k) {
    h5::File f(tng::snapshot_chunk_path(dir.path().string(), spec.snapshot, k),
               h5::File::Mode::read_write);
    if (!f.exists("PartType4/Coordinates")) continue;
    const std::size_t rows = f.shape("PartType4/Coordinates").at(0);
    std::vector<float> hsml(rows);
    for (std::size_t i = 0; i < rows; ++i) hsml[i] = 0.2f + 0.01f * static_cast<float>(i % 50);
    f.write<float>("PartType4/StellarHsml", hsml, {rows});
    f.set_attribute<double>("to_cgs", 3.085678e21, "PartType4/StellarHsml");
    f.set_attribute<double>("a_scaling", 1.0, "PartType4/StellarHsml");
    f.set_attribute<double>("h_scaling", -1.0, "PartType4/StellarHsml");
  }
  auto smoothed = input;
  smoothed.push_back("stages.aperture.smoothing=\"kernel\"");
  const RunReport held_smoothed = run(load_run_config(example("muse_tng_mastar"), smoothed), 1);
  smoothed.push_back("input.stream_block_stars=1001");
  const RunReport streamed_smoothed = run(load_run_config(example("muse_tng_mastar"), smoothed), 2);
  check_same_cube(held_smoothed.cube, streamed_smoothed.cube);
  // The lengths were the files': the smoothed cube differs from the one-spaxel deposits.
  CHECK_FALSE(same_bits(held_smoothed.cube.data, held.cube.data));
}

TEST_CASE("streaming: a TNG cutout, centred in passes, bitwise the cube of read_tng",
          "[streaming][tng]") {
  // The TNG100 cutout: blocks of 97 rows centre it in many passes, holding 97 stars at a time.
  const RunConfig held_config =
      load_run_config(example("muse_tng_mastar"), {"devices.oversubscribe=true"});
  const RunReport held = run(held_config, 1);
  for (const auto& [block, devices] : {std::pair{"97", 1}, {"1001", 3}}) {
    INFO("blocks of " << block << " rows on " << devices << " device(s)");
    const RunReport streamed =
        run(load_run_config(
                example("muse_tng_mastar"),
                {"devices.oversubscribe=true", std::string("input.stream_block_stars=") + block}),
            devices);
    check_same_cube(held.cube, streamed.cube);
    CHECK(streamed.summary.at("n_stars") == held.summary.at("n_stars"));
  }
  // Its gas: dust, and the emission lines of its star-forming cells.
  const std::vector<std::string> gas = {"devices.oversubscribe=true", "pipeline=\"calc_ifu_gas\""};
  const RunReport held_gas = run(load_run_config(example("muse_tng_mastar"), gas), 1);
  auto streamed_gas = gas;
  streamed_gas.push_back("input.stream_block_stars=1001");
  check_same_cube(held_gas.cube,
                  run(load_run_config(example("muse_tng_mastar"), streamed_gas), 3).cube);

  // drop_nonfinite: a made cutout with three non-finite masses drops the same rows block by
  // block.
  const test::ScratchDir dir("streaming_cutout");
  tng::SyntheticGalaxySpec spec;
  spec.n_stars = 4000;
  spec.n_gas = 0;
  spec.seed = 9;
  spec.redshift = 0.05;
  spec.center_ckpc_h = {74999.0, 20000.0, 0.5};
  const std::string cutout = dir.file("cutout.hdf5");
  tng::write_tng_cutout(cutout, tng::make_snapshot_spec(spec, 1, 1, 1).subhalos[0]);
  {
    h5::File f(cutout, h5::File::Mode::read_write);
    auto m = f.read<float>("PartType4/Masses");
    for (const std::size_t i : {10, 1500, 3999}) m[i] = std::numeric_limits<float>::quiet_NaN();
    f.write_rows<float>("PartType4/Masses", 0, m.data(), m.size());
  }
  const std::vector<std::string> input = {
      "input={\"file\": \"" + cutout + "\", \"drop_nonfinite\": true}", "galaxy.redshift=0.05",
      "devices.oversubscribe=true"};
  const RunReport held_dropped = run(load_run_config(example("muse_tng_mastar"), input), 1);
  auto streamed_input = input;
  streamed_input.push_back("input.stream_block_stars=1000");
  const RunReport streamed_dropped =
      run(load_run_config(example("muse_tng_mastar"), streamed_input), 2);
  check_same_cube(held_dropped.cube, streamed_dropped.cube);
  CHECK(streamed_dropped.summary.at("n_stars") == held_dropped.summary.at("n_stars"));
  // Without drop_nonfinite, the first pass names the dataset.
  streamed_input.push_back("input.drop_nonfinite=false");
  CHECK_THROWS_WITH(run(load_run_config(example("muse_tng_mastar"), streamed_input), 1),
                    Catch::Contains(":/PartType4/Masses: 3 non-finite value(s)"));
}

TEST_CASE("streaming: a RUBIX galaxy, bitwise the cube of read_rubix_galaxy",
          "[streaming][rubix]") {
  const test::ScratchDir dir("streaming_rubix");
  const std::string path = dir.file("galaxy.h5");
  {
    const auto mesh = make_mesh(Backend::cpu, 1);
    TngReadOptions options;
    options.path = test::tng100_cutout();
    write_rubix_galaxy(read_tng(*mesh, options), path);
  }
  const std::vector<std::string> input = {"input={\"file\": \"" + path + "\"}",
                                          "devices.oversubscribe=true"};
  const RunReport held = run(load_run_config(example("muse_tng_mastar_dusty"), input), 1);
  CHECK(held.summary.at("n_gas") > 0);
  auto streamed_input = input;
  streamed_input.push_back("input.stream_block_stars=300");
  const RunReport streamed =
      run(load_run_config(example("muse_tng_mastar_dusty"), streamed_input), 3);
  check_same_cube(held.cube, streamed.cube);
  CHECK(streamed.summary.at("n_stars") == held.summary.at("n_stars"));
  CHECK(streamed.summary.at("n_gas") == held.summary.at("n_gas"));
}

TEST_CASE("streaming: the plan holds one block of particles", "[streaming][plan]") {
  RunOptions options;
  options.n_devices = 1;
  // 2e9 stars held at once need ~88 GB of particle fields; streamed, one block of 1e6.
  const std::vector<std::string> big = {"input.synthetic.stars=2e9", "devices.memory_limit_gb=8"};
  const RunPlan held = plan_pipeline(config(big), options);
  CHECK_FALSE(held.fits());
  CHECK_THAT(held.problems.at(0), Catch::Contains("input.stream_block_stars"));
  auto streamed_overrides = big;
  streamed_overrides.push_back("input.stream_block_stars=1e6");
  const RunPlan streamed = plan_pipeline(config(streamed_overrides), options);
  INFO(streamed.report);
  CHECK(streamed.fits());
  CHECK_THAT(streamed.report, Catch::Contains("streamed: blocks of 1000000 stars (2000 blocks)"));
  CHECK_THAT(streamed.report, Catch::Contains("particle fields (one block)"));
}

TEST_CASE("streaming: what cannot stream is refused, naming the key, before anything is written",
          "[streaming]") {
  const std::pair<std::vector<std::string>, std::string> refused[] = {
      {{"input.stream_block_stars=0"}, "input.stream_block_stars: expected an integer >= 1"},
      {{"input.stream_block_stars=2.5"}, "input.stream_block_stars: expected an integer >= 1"},
      {{"input.stream_block_stars=1000", "telescope=\"MUSE-WFM\"",
        "stages.stellar_spectra.histogram=\"dense\"",
        "stages.stellar_spectra.histogram_memory_gb=0.01"},
       "stages.stellar_spectra.histogram: \"dense\" needs the whole histogram at once"}};
  for (const auto& [overrides, message] : refused) {
    INFO(message);
    test::ScratchDir dir("streaming_refused");
    auto run_it = [&] {
      RunOptions options;
      options.n_devices = 1;
      options.output_dir = dir.file("out");
      options.progress = false;
      run_pipeline(config(overrides), options);
    };
    CHECK_THROWS_AS(run_it(), ConfigError);
    CHECK_THROWS_WITH(run_it(), Catch::Contains(message));
    CHECK_FALSE(fs::exists(dir.file("out")));
  }
}
