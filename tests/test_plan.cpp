// The dry run (ifusim plan) and the memory check ifusim run makes before reading the galaxy.
#include <sys/wait.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/config_error.h"
#include "io/run_config.h"
#include "pipeline/plan.h"
#include "pipeline/runner.h"

using namespace ifusim;
namespace fs = std::filesystem;

namespace {

std::string example(const std::string& name) {
  return std::string(IFUSIM_SOURCE_DIR) + "/configs/examples/" + name + ".json";
}

RunPlan plan(const std::vector<std::string>& overrides, int devices,
             const std::string& name = "muse_tng_mastar") {
  RunOptions options;
  options.n_devices = devices;
  return plan_pipeline(load_run_config(example(name), overrides), options);
}

// Runs the ifusim binary; returns its exit status and its stdout + stderr.
int run_ifusim(const std::string& args, std::string& output) {
  const fs::path log = fs::temp_directory_path() / ("ifusim_plan_" + std::to_string(::getpid()));
  const int status = std::system(
      (std::string(IFUSIM_BINARY) + " " + args + " > " + log.string() + " 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  output = ss.str();
  fs::remove(log);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("plan: every star field's sharding, the stars per device and the memory items",
          "[plan]") {
  const RunPlan p = plan({}, 3);
  INFO(p.report);
  CHECK(p.fits());
  // The cutout's 2000 PartType4 rows (4 of them wind cells, dropped when read) over 3 devices.
  for (const char* field : {"stars.position_kpc: float32[2000, 3] Sharded(particles) over 3",
                            "stars.age_gyr: float32[2000] Sharded(particles) over 3",
                            "stars.spaxel_index: int32[2000] Sharded(particles) over 3"})
    CHECK_THAT(p.report, Catch::Contains(field));
  CHECK_THAT(p.report, Catch::Contains("[0, 667) 667 rows"));
  CHECK_THAT(p.report, Catch::Contains("[1334, 2000) 666 rows"));
  CHECK_THAT(p.report, Catch::Contains("ssp.cumulative_energy: float64[12, 8001] Replicated"));
  CHECK_THAT(p.report, Catch::Contains("stars per device: 666 each, the first 2 one more"));
  // Particle fields: 2000 rows x (11 float32, the smoothing length included as an upper bound,
  // + 1 int32) = 96,000 bytes; no gas without dust.
  CHECK_THAT(p.report, Catch::Contains("0.096 MB  particle fields"));
  CHECK_THAT(p.report, !Catch::Contains("gas."));
  // The reduced cube: the 25 x 25 field with the Moffat PSF's margin of 15 spaxels (4.53 alpha,
  // alpha = 3.10 spaxels for 0.7 arcsec at beta = 2.5) on each side, and no LSF margin (the
  // templates are coarser than MUSE at z = 0.3): 55 x 55 x 3721 floats = 45.024 MB.
  CHECK_THAT(p.report, Catch::Contains("simulated with a margin of 15 spaxels and 0 wavelengths"));
  CHECK_THAT(p.report, Catch::Contains("45.024 MB  stellar_spectra: reduced cube (float, host)"));
  // The dusty run holds the gas and the stars' A_V.
  const RunPlan dusty = plan({}, 2, "muse_tng_mastar_dusty");
  CHECK_THAT(dusty.report, Catch::Contains("stars.dust_av: float32[2000]"));
  CHECK_THAT(dusty.report, Catch::Contains("gas.position_kpc: float32[100, 3]"));
  // Emission lines hold each line's window of bins per spaxel, not the whole band.
  const RunPlan gas = plan({}, 1, "muse_disc_stars_gas");
  CHECK_THAT(gas.report, Catch::Contains("gas.sfr_msun_per_yr: float32[20000]"));
  CHECK_THAT(gas.report, Catch::Contains("emission_lines: emission-line windows"));
}

TEST_CASE("plan: 1000 host devices count the partial arrays once", "[plan]") {
  const RunPlan one = plan({"stages.stellar_spectra.method=exact"}, 1);
  const RunPlan many =
      plan({"stages.stellar_spectra.method=exact", "devices.oversubscribe=true"}, 1000);
  // The exact method's int64 partial cube, 55 x 55 x 3721 x 8 B (the field and the PSF's
  // margin), once for all host devices.
  const std::string cube = "90.048 MB  stellar_spectra: partial cube (int64)";
  CHECK_THAT(one.report, Catch::Contains(cube));
  CHECK_THAT(many.report, Catch::Contains(cube));
  CHECK_THAT(many.report, Catch::Contains("stars per device: 2 each, the first 0 one more"));
  CHECK(many.fits());
}

TEST_CASE("plan: a run that does not fit is refused, naming what and the setting", "[plan]") {
  const RunPlan p = plan({"devices.memory_limit_gb=0.05"}, 1);
  REQUIRE_FALSE(p.fits());
  REQUIRE(p.problems.size() == 1);
  CHECK_THAT(p.problems[0], Catch::Contains("host memory needs"));
  CHECK_THAT(p.problems[0], Catch::Contains("but has 50.000 MB"));
  CHECK_THAT(p.problems[0], Catch::Contains("devices.memory_limit_gb"));
  // The exact method's cube is the largest part, and the setting that removes it is named.
  const RunPlan exact =
      plan({"stages={}", "pipeline=[\"orient\",\"aperture\",\"stellar_spectra\",\"psum\"]",
            "devices.memory_limit_gb=0.03", "stages.stellar_spectra.method=exact"},
           1);
  REQUIRE_FALSE(exact.fits());
  CHECK_THAT(exact.problems[0], Catch::Contains("stages.stellar_spectra.method"));

  // The CLI: plan exits 1 with the message; run refuses before reading and leaves nothing.
  const fs::path out =
      fs::temp_directory_path() / ("ifusim_plan_out_" + std::to_string(::getpid()));
  fs::remove_all(out);
  std::string output;
  CHECK(run_ifusim("plan " + example("muse_tng_mastar") + " --set devices.memory_limit_gb=0.05",
                   output) == 1);
  CHECK_THAT(output, Catch::Contains("the run does NOT fit"));
  CHECK(run_ifusim("run " + example("muse_tng_mastar") +
                       " --set devices.memory_limit_gb=0.05 --no-progress --out " + out.string(),
                   output) != 0);
  CHECK_THAT(output, Catch::Contains("does not fit in memory"));
  CHECK_THAT(output, Catch::Contains("devices.memory_limit_gb"));
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("plan: devices.memory_limit_gb is validated", "[plan]") {
  for (const std::string bad : {"0", "-1", "\"x\""})
    CHECK_THROWS_WITH(
        load_run_config(example("muse_tng_mastar"), {"devices.memory_limit_gb=" + bad}),
        Catch::Contains("devices.memory_limit_gb"));
}

TEST_CASE(
    "cli: a negative --devices or --rtol and an empty --out are refused, saying what was "
    "expected",
    "[plan]") {
  const std::string config = example("muse_tng_mastar");
  std::string output;
  CHECK(run_ifusim("devices --devices -1", output) != 0);
  CHECK_THAT(output, Catch::Contains("expected a number >= 0, got -1") &&
                         !Catch::Contains("0.000000"));  // not CLI11's 309-digit range
  CHECK(run_ifusim("plan " + config + " --devices -2", output) != 0);
  CHECK_THAT(output, Catch::Contains("expected a number >= 0, got -2"));
  CHECK(run_ifusim("compare a.fits b.fits --rtol -1", output) != 0);
  CHECK_THAT(output,
             Catch::Contains("--rtol") && Catch::Contains("expected a number >= 0, got -1"));
  // --out "" is not "no --out": the config's output.dir would be written instead.
  CHECK(run_ifusim("run " + config + " --out ''", output) != 0);
  CHECK_THAT(output,
             Catch::Contains("--out") && Catch::Contains("expected a folder, got an empty"));
}
