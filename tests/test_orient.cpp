#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "helpers.h"
#include "pipeline/devices.h"
#include "stages/orient/orient.h"

using namespace ifusim;

namespace {

// A thin rotating disc in the x-y plane (scale length 3 kpc, height 0.2 kpc, circular speed
// 200 km/s, counter-clockwise), then tilted by `tilt`.
test::HostStars tilted_disc(std::size_t n, const Matrix3& tilt, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> radius(1.0 / 3.0);
  std::uniform_real_distribution<double> phi(0, 2 * M_PI);
  std::normal_distribution<double> height(0, 0.2);
  test::HostStars s = test::random_stars(n, seed);
  for (std::size_t i = 0; i < n; ++i) {
    const double r = radius(rng), p = phi(rng);
    const double pos[3] = {r * std::cos(p), r * std::sin(p), height(rng)};
    const double vel[3] = {-200 * std::sin(p), 200 * std::cos(p), 0};
    for (int a = 0; a < 3; ++a) {
      s.position_kpc[3 * i + a] = static_cast<float>(
          tilt[3 * a] * pos[0] + tilt[3 * a + 1] * pos[1] + tilt[3 * a + 2] * pos[2]);
      s.velocity_kms[3 * i + a] = static_cast<float>(
          tilt[3 * a] * vel[0] + tilt[3 * a + 1] * vel[1] + tilt[3 * a + 2] * vel[2]);
    }
  }
  return s;
}

std::vector<float> oriented_positions(int n_devices, const test::HostStars& host,
                                      const nlohmann::json& params) {
  auto mesh = make_mesh(Backend::cpu, n_devices);
  RunState state(*mesh);
  state.data.stars = test::put_stars(*mesh, host);
  state.data.galaxy.halfmass_radius_stars_kpc = 5.0;
  run_stage(*make_orient_stage(params, "stages[0].params"), state);
  return state.data.stars.position_kpc.to_host();
}

}  // namespace

TEST_CASE("orient: Euler rotations are proper rotations, edge-on turns the normal to -y",
          "[orient]") {
  const Matrix3 r = euler_rotation(30, -50, 110);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double dot = 0;
      for (int k = 0; k < 3; ++k) dot += r[i * 3 + k] * r[j * 3 + k];
      CHECK(dot == Approx(i == j ? 1.0 : 0.0).margin(1e-14));
    }
  const Matrix3 edge = euler_rotation(90, 0, 0);
  CHECK(edge[2] == Approx(0).margin(1e-15));  // z -> (0, -1, 0)
  CHECK(edge[5] == Approx(-1).margin(1e-15));
  CHECK(edge[8] == Approx(0).margin(1e-15));
}

TEST_CASE("orient: a tilted disc is turned face-on, rotating counter-clockwise", "[orient]") {
  const auto host = tilted_disc(20000, euler_rotation(37, 61, -20), 5);
  for (int d : {1, 3}) {
    const auto p = oriented_positions(d, host, nlohmann::json::object());
    double zz = 0, rr = 0;
    for (std::size_t i = 0; i < host.size(); ++i) {
      zz += p[3 * i + 2] * p[3 * i + 2];
      rr += p[3 * i] * p[3 * i] + p[3 * i + 1] * p[3 * i + 1];
    }
    // Radii are exponentially distributed (scale 3 kpc), so rms R = 3 sqrt(2) = 4.24 kpc and a
    // perfectly aligned disc has rms z / rms R = 0.2 / 4.24 = 0.047; a 2-degree misalignment
    // would raise it to about 0.053.
    INFO("rms z / rms R = " << std::sqrt(zz / rr));
    CHECK(std::sqrt(zz / rr) < 0.052);
  }
  CHECK(oriented_positions(1, host, nlohmann::json::object()) ==
        oriented_positions(4, host, nlohmann::json::object()));
}

TEST_CASE("orient: edge-on puts the disc along the line of sight", "[orient]") {
  const auto host = tilted_disc(20000, euler_rotation(-15, 20, 80), 6);
  const auto p = oriented_positions(2, host, nlohmann::json{{"orientation", "edge-on"}});
  double yy = 0, xx = 0, zz = 0;
  for (std::size_t i = 0; i < host.size(); ++i) {
    xx += p[3 * i] * p[3 * i];
    yy += p[3 * i + 1] * p[3 * i + 1];
    zz += p[3 * i + 2] * p[3 * i + 2];
  }
  // Thin in y (the sky's vertical): rms y / rms x = 0.2 / 3 = 0.067 when exactly edge-on.
  CHECK(std::sqrt(yy / xx) < 0.072);
  CHECK(zz / xx == Approx(1.0).epsilon(0.1));  // as extended along the line of sight as along x
}

TEST_CASE("orient: parameters are validated", "[orient]") {
  CHECK_THROWS_WITH(
      OrientParams::from_json(JsonParams(nlohmann::json{{"orientation", "sideways"}}, "galaxy")),
      Catch::Contains("galaxy.orientation: expected one of \"face-on\", \"edge-on\""));
  CHECK_THROWS_WITH(OrientParams::from_json(
                        JsonParams(nlohmann::json{{"orientation", {{"alpha", 3}}}}, "galaxy")),
                    Catch::Contains("galaxy.orientation.alpha: unknown key"));
}
