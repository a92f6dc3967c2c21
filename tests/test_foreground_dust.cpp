// The foreground_dust stage (the Milky Way's extinction), run through the registry as a run
// makes it, against the CCM89 curve's values written out by hand; and galaxy.ebv_mw, the run
// config's key it inherits, through whole runs.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "io/run_config.h"
#include "pipeline/devices.h"
#include "pipeline/registry.h"
#include "pipeline/runner.h"
#include "tests/cube_tolerance.h"

using namespace ifusim;

namespace {

// A cube of 2 x 2 spaxels of flux 1 (variance 4) at every wavelength, one spaxel NaN.
struct Planes {
  Cube cube;
  Observation obs;
};
Planes flat_cube(double wave_start_angstrom, double step_angstrom, int n_wave) {
  Planes p;
  p.cube.shape = {2, 2, n_wave};
  p.cube.data.assign(p.cube.shape.n_voxels(), 1.0);
  p.cube.variance.assign(p.cube.shape.n_voxels(), 4.0);
  for (int k = 0; k < n_wave; ++k) p.cube.data[k] = std::numeric_limits<double>::quiet_NaN();
  p.obs.axes.wave_start_angstrom = wave_start_angstrom;
  p.obs.axes.wave_step_angstrom = step_angstrom;
  return p;
}

Cube dim(Planes p, const nlohmann::json& params) {
  const auto mesh = make_mesh(Backend::cpu, 1);
  RunState state(*mesh);
  state.observation = p.obs;
  state.cube = std::move(p.cube);
  const nlohmann::json stages = {{{"stage", "foreground_dust"}, {"params", params}}};
  for (const auto& s : make_stages(stages, "stages", {"cube"})) s->run(state);
  return std::move(*state.cube);
}

}  // namespace

TEST_CASE("foreground_dust: A_lambda of CCM89 at V and in the infrared, variance and NaN kept") {
  const double ebv = 0.1;
  // At x = 1 / lambda = 1.82 micron^-1 (V) CCM89 gives a = 1, b = 0: A_lambda = A_V = 3.1 E(B-V).
  const double v_angstrom = 1e4 / 1.82;
  const Cube v = dim(flat_cube(v_angstrom - 10.0, 1.0, 21), {{"ebv_mag", ebv}});
  const double at_v = std::pow(10.0, -0.4 * 3.1 * ebv);
  // At x = 1 (1 micron), the infrared power law: a = 0.574, b = -0.527 (CCM89 eq. 2).
  const Cube ir = dim(flat_cube(1e4 - 5.0, 1.0, 11), {{"ebv_mag", ebv}, {"r_v", 3.1}});
  const double at_ir = std::pow(10.0, -0.4 * ebv * 3.1 * (0.574 - 0.527 / 3.1));
  for (int s = 1; s < 4; ++s) {
    CHECK(v.data[s * 21 + 10] == Approx(at_v).epsilon(test::kCubeValue));
    CHECK(v.variance[s * 21 + 10] == Approx(4.0 * at_v * at_v).epsilon(test::kCubeValue));
    CHECK(ir.data[s * 11 + 5] == Approx(at_ir).epsilon(test::kCubeValue));
  }
  // Bluer light is dimmed more; the NaN spaxel stays NaN.
  CHECK(v.data[21 + 0] < v.data[21 + 20]);
  CHECK(std::isnan(v.data[0]));
  CHECK(std::isnan(v.data[20]));
  // No foreground dust: the cube unchanged.
  const Cube clear = dim(flat_cube(5000.0, 1.0, 5), {{"ebv_mag", 0.0}});
  CHECK(clear.data[5] == 1.0);
  CHECK(clear.variance[5] == 4.0);
}

TEST_CASE("foreground_dust: bad parameters name the key") {
  const auto make = [](const nlohmann::json& params) {
    return make_stage("foreground_dust", params, "stages.foreground_dust", {});
  };
  CHECK_THROWS_WITH(make({{"ebv_mag", -0.1}}), Catch::Contains("stages.foreground_dust.ebv_mag"));
  CHECK_THROWS_WITH(make({{"ebv_mag", 0.1}, {"r_v", 9}}),
                    Catch::Contains("stages.foreground_dust.r_v"));
  CHECK_THROWS_AS(make(nlohmann::json::object()), ConfigError);
  CHECK_THROWS_WITH(make({{"ebv_mag", 0.1}, {"av", 1}}), Catch::Contains("av"));
}

namespace {

namespace fs = std::filesystem;

// A_lambda / A_V of Cardelli, Clayton & Mathis (1989, ApJ 345, 245), eqs. 2 (infrared,
// 0.3 <= x < 1.1 per micron) and 3 (optical, 1.1 <= x <= 3.3), written out from the paper with
// the coefficients of a(x) and b(x) in ascending powers of y = x - 1.82 (not the code's nesting).
double ccm89_by_hand(double wavelength_angstrom, double r_v) {
  const double x = 1e4 / wavelength_angstrom;
  if (x < 1.1) return 0.574 * std::pow(x, 1.61) - 0.527 * std::pow(x, 1.61) / r_v;
  const double y = x - 1.82;
  const double ca[8] = {1.0, 0.17699, -0.50447, -0.02427, 0.72085, 0.01979, -0.77530, 0.32999};
  const double cb[8] = {0.0, 1.41338, 2.28305, 1.07233, -5.38434, -0.62251, 5.30260, -2.09002};
  double a = 0, b = 0;
  for (int i = 0; i < 8; ++i) {
    a += ca[i] * std::pow(y, i);
    b += cb[i] * std::pow(y, i);
  }
  return a + b / r_v;
}

struct OutDir {
  fs::path path = fs::temp_directory_path() /
                  ("ifusim_ebv_mw_" + std::to_string(::getpid()) + "_" + std::to_string(next()++));
  OutDir() { fs::remove_all(path); }
  ~OutDir() { fs::remove_all(path); }
  static int& next() {
    static int n = 0;
    return n;
  }
};

// The MUSE synthetic example, small, through stellar_spectra and flux, and foreground_dust where
// `dust`; `more` overrides on top.
RunConfig ebv_config(bool dust, std::vector<std::string> more) {
  std::vector<std::string> o = {"input.synthetic.stars=2000", "input.synthetic.gas=0", "stages={}"};
  o.push_back(dust ? R"(pipeline=["orient", "aperture", "stellar_spectra", "psum", "flux", )"
                     R"("foreground_dust"])"
                   : R"(pipeline=["orient", "aperture", "stellar_spectra", "psum", "flux"])");
  o.insert(o.end(), more.begin(), more.end());
  return load_run_config(std::string(IFUSIM_SOURCE_DIR) + "/configs/examples/muse_synthetic.json",
                         o);
}

RunReport run_into(const RunConfig& config, const fs::path& out) {
  RunOptions options;
  options.n_devices = 1;
  options.output_dir = out.string();
  options.progress = false;
  return run_pipeline(config, options);
}

}  // namespace

TEST_CASE("galaxy.ebv_mw: the cube dimmed by 10^(-0.4 E(B-V) R_V k(lambda)) of CCM89",
          "[foreground_dust][pipeline]") {
  OutDir a, b;
  const RunReport dimmed = run_into(ebv_config(true, {"galaxy.ebv_mw=0.1"}), a.path);
  const RunReport clear = run_into(ebv_config(false, {}), b.path);
  const Cube& d = dimmed.cube;
  const Cube& c = clear.cube;
  REQUIRE(d.shape == c.shape);
  const int n_wave = c.shape.n_wave;
  // The plane nearest each wavelength: blue, V (A_lambda = A_V), H-alpha, and the infrared
  // branch beyond 1 / 1.1 micron.
  for (const double want_angstrom : {4800.0, 1e4 / 1.82, 6563.0, 9300.0}) {
    int k = 0;
    for (int j = 0; j < n_wave; ++j)
      if (std::abs(c.axes.wavelength_angstrom(j) - want_angstrom) <
          std::abs(c.axes.wavelength_angstrom(k) - want_angstrom))
        k = j;
    const double lambda = c.axes.wavelength_angstrom(k);
    const double expected = std::pow(10.0, -0.4 * 0.1 * 3.1 * ccm89_by_hand(lambda, 3.1));
    int checked = 0;
    for (std::size_t s = 0; s < c.shape.n_spaxels(); ++s) {
      const double with = d.data[s * n_wave + k];
      const double without = c.data[s * n_wave + k];
      REQUIRE(std::isnan(with) == std::isnan(without));
      if (std::isnan(without) || without <= 0) continue;
      REQUIRE(std::isfinite(with));
      CHECK(with / without == Approx(expected).epsilon(test::kCubeValue));
      ++checked;
    }
    CAPTURE(lambda);
    CHECK(checked > 10);
  }
  // One number by hand: at 1e4 / 1.82 A (x = 1.82, y = 0) a = 1, b = 0, so the factor is
  // 10^(-0.4 * 0.31) = 10^(-0.124) = 0.75162 whatever the polynomial.
  CHECK(std::pow(10.0, -0.4 * 0.1 * 3.1 * ccm89_by_hand(1e4 / 1.82, 3.1)) ==
        Approx(0.75162).epsilon(1e-4));
  // The stage's own ebv_mag, the same value, gives the same cube.
  OutDir e;
  const RunReport own = run_into(ebv_config(true, {"stages.foreground_dust.ebv_mag=0.1"}), e.path);
  CHECK(own.cube.data.size() == d.data.size());
  bool same = true;
  for (std::size_t i = 0; i < d.data.size(); ++i)
    same = same && (own.cube.data[i] == d.data[i] ||
                    (std::isnan(own.cube.data[i]) && std::isnan(d.data[i])));
  CHECK(same);
}

TEST_CASE("galaxy.ebv_mw: bad values, a pipeline that would ignore it, two values: refused",
          "[foreground_dust][pipeline]") {
  for (const char* bad : {"galaxy.ebv_mw=-0.1", "galaxy.ebv_mw=11", R"(galaxy.ebv_mw="0.1")"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(ebv_config(true, {bad}), Catch::Contains("json: galaxy.ebv_mw: expected"));
  }
  OutDir out;
  // Given, > 0, and no stage applies it: refused before anything runs, naming the stage to add.
  CHECK_THROWS_WITH(run_into(ebv_config(false, {"galaxy.ebv_mw=0.1"}), out.path),
                    Catch::StartsWith("galaxy.ebv_mw: 0.1,") &&
                        Catch::Contains("add foreground_dust to the pipeline"));
  // Given twice with different values.
  CHECK_THROWS_WITH(
      run_into(ebv_config(true, {"galaxy.ebv_mw=0.1", "stages.foreground_dust.ebv_mag=0.2"}),
               out.path),
      Catch::StartsWith("galaxy.ebv_mw:") && Catch::Contains("stages.foreground_dust.ebv_mag"));
  // The stage with neither: its error points at galaxy.ebv_mw.
  CHECK_THROWS_WITH(run_into(ebv_config(true, {}), out.path),
                    Catch::StartsWith("stages.foreground_dust.ebv_mag:") &&
                        Catch::Contains("galaxy.ebv_mw") && Catch::Contains("no dust map"));
  CHECK_FALSE(fs::exists(out.path));
  // 0 without the stage is no extinction: runs.
  CHECK_NOTHROW(run_into(ebv_config(false, {"galaxy.ebv_mw=0"}), out.path));
}
