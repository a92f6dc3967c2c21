// The foreground_dust stage (the Milky Way's extinction), run through the registry as a run
// makes it, against the CCM89 curve's values written out by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "core/config_error.h"
#include "pipeline/devices.h"
#include "pipeline/registry.h"

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
    CHECK(v.data[s * 21 + 10] == Approx(at_v).epsilon(1e-9));
    CHECK(v.variance[s * 21 + 10] == Approx(4.0 * at_v * at_v).epsilon(1e-9));
    CHECK(ir.data[s * 11 + 5] == Approx(at_ir).epsilon(1e-9));
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
