// Spatial smoothing (stages/common/footprint.h, smoothing.h; docs/smoothing.md): the kernel
// and its spaxel integrals against the analytic integrals written out here with std::erf, light
// conservation at the field and aperture edges, the images of the mass_image stage, the
// k-nearest-neighbour smoothing length against brute force, StellarHsml from TNG files, the
// smoothed dust screen, and parameter errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "core/config_error.h"
#include "data/fixed_point.h"
#include "helpers.h"
#include "io/hdf5.h"
#include "io/tng/synthetic_files.h"
#include "io/tng/tng_reader.h"
#include "pipeline/devices.h"
#include "pipeline/registry.h"
#include "stages/common/footprint.h"
#include "stages/common/particle_fields.h"
#include "stages/dust/dust.h"
#include "stages/spaxel_grid/smoothing.h"
#include "stages/spaxel_grid/spaxel_grid.h"
#include "tests/cube_tolerance.h"
#include "tng_test_util.h"

using namespace ifusim;

namespace {

// The kernel as the documentation states it, written independently of footprint.h: a Gaussian
// of width sigma cut at +-sqrt(40/3) sigma in each axis and renormalised there.
const double kTruncation = std::sqrt(40.0 / 3.0);
constexpr double kEps = std::numeric_limits<double>::epsilon();

// The fraction of the truncated, renormalised 1-D kernel centred on c that lies in [a, b].
double axis_fraction(double a, double b, double c, double sigma) {
  const double reach = kTruncation * sigma;
  a = std::max(a, c - reach);
  b = std::min(b, c + reach);
  if (!(b > a)) return 0.0;
  const double s = std::sqrt(2.0) * sigma;
  return (std::erf((b - c) / s) - std::erf((a - c) / s)) /
         (2.0 * std::erf(kTruncation / std::sqrt(2.0)));
}

SpaxelGrid square_grid(int n, double spaxel_kpc) {
  SpaxelGrid g;
  g.n_side = n;
  g.spaxel_size_kpc = spaxel_kpc;
  g.smoothing = static_cast<int>(Smoothing::kernel);
  return g;
}

std::map<int, double> footprint_of(const SpaxelGrid& grid, double x, double y, double sigma) {
  std::map<int, double> w;
  for_each_kernel_spaxel(grid, x, y, sigma, [&](std::int32_t s, double weight) {
    CHECK(w.count(s) == 0);  // each spaxel once
    w[s] = weight;
  });
  return w;
}

double total(const std::map<int, double>& w) {
  double t = 0;
  for (const auto& [s, v] : w) t += v;
  return t;
}

// One star with the given smoothing length.
test::HostStars one_star(float x, float y, float z, float mass, float smoothing_length_kpc) {
  test::HostStars s = test::random_stars(1, 3);
  s.position_kpc = {x, y, z};
  s.mass_msun = {mass};
  s.smoothing_length_kpc = {smoothing_length_kpc};
  return s;
}

// The mass image of `host` on a spaxel_grid grid with the given parameters.
Cube mass_image(int n_devices, const test::HostStars& host, const nlohmann::json& grid_params) {
  auto mesh = make_mesh(Backend::cpu, n_devices);
  RunState state(*mesh);
  state.data.stars = put_stars(*mesh, host);
  run_stage(*make_stage("spaxel_grid", grid_params, "p", {}), state);
  run_stage(*make_stage("mass_image", nlohmann::json::object(), "p", {}), state);
  run_stage(*make_stage("psum", nlohmann::json::object(), "p", {}), state);
  REQUIRE(state.cube.has_value());
  return std::move(*state.cube);
}

double sum_of(const Cube& c) {
  double t = 0;
  for (double v : c.data) t += v;
  return t;
}

}  // namespace

TEST_CASE("smoothing: the kernel's width is the cubic spline's, weights inside sum to 1",
          "[smoothing]") {
  // Per-axis variance of the Gadget cubic spline of support 1, (1/3) int r^2 W 4 pi r^2 dr, by
  // Simpson's rule: 3/40, so support / sigma = sqrt(40/3).
  auto spline = [](double q) {
    const double w = q < 0.5 ? 1 - 6 * q * q + 6 * q * q * q : (q < 1 ? 2 * std::pow(1 - q, 3) : 0);
    return 8.0 / M_PI * w;
  };
  const int steps = 20000;
  double norm = 0, second = 0;
  for (int k = 0; k <= steps; ++k) {
    const double q = static_cast<double>(k) / steps;
    const double simpson = (k == 0 || k == steps) ? 1 : (k % 2 ? 4 : 2);
    norm += simpson * 4 * M_PI * q * q * spline(q);
    second += simpson * 4 * M_PI * q * q * q * q * spline(q);
  }
  norm /= 3.0 * steps;
  second /= 3.0 * steps;
  CHECK(norm == Approx(1.0).epsilon(1e-9));
  CHECK(second / 3.0 == Approx(3.0 / 40.0).epsilon(1e-9));
  CHECK(kSplineSupportPerSigma == Approx(1.0 / std::sqrt(second / 3.0)).epsilon(1e-9));
  CHECK(kStarSigmaPerSmoothingLength * kSplineSupportPerSigma == Approx(1.0).epsilon(1e-15));

  // 40 x 0.25 kpc: the field is [-5, 5)^2. Kernels from much smaller than a spaxel to 12 wide.
  const SpaxelGrid grid = square_grid(40, 0.25);
  for (const double h : {0.01, 0.3, 1.0, 3.0, 4.5}) {
    const double sigma = h * kStarSigmaPerSmoothingLength;
    const double x = 0.13, y = -0.41;
    const auto w = footprint_of(grid, x, y, sigma);
    CAPTURE(h);
    CHECK(std::abs(total(w) - 1.0) <= 1e-12);
    // Every weight is the analytic integral over its spaxel; the footprint is the support's
    // bounding box.
    int n_expected = 0;
    for (int iy = 0; iy < 40; ++iy)
      for (int ix = 0; ix < 40; ++ix) {
        const double fx = axis_fraction(-5 + 0.25 * ix, -5 + 0.25 * (ix + 1), x, sigma);
        const double fy = axis_fraction(-5 + 0.25 * iy, -5 + 0.25 * (iy + 1), y, sigma);
        if (fx * fy > 0) ++n_expected;
        const auto it = w.find(iy * 40 + ix);
        CHECK(std::abs((it == w.end() ? 0.0 : it->second) - fx * fy) <= 1e-14);
      }
    CHECK(static_cast<int>(w.size()) == n_expected);
  }
  // A kernel under a spaxel's size is (almost) all in its own spaxel; zero width is a point.
  const auto point = footprint_of(grid, 0.13, -0.41, 0.0);
  REQUIRE(point.size() == 1);
  CHECK(point.begin()->first == grid.index_of(0.13, -0.41));
  CHECK(point.begin()->second == 1.0);
}

TEST_CASE("smoothing: the footprint weights' slopes along the position match finite differences",
          "[smoothing][vjp]") {
  // for_each_kernel_spaxel_slopes (reverse mode, docs/gradients.md) against central differences
  // of the test's own axis_fraction (written from the documentation, not from footprint.h), in
  // double: steps of 1e-6 sigma, so the difference's truncation error, ~(h / sigma)^2, is 1e-12
  // and its rounding ~1e-16 / 1e-6 = 1e-10 of a weight; held to 1e-7 / sigma. The kernels'
  // square edges stay >= 1e-3 kpc from the spaxels' edges (where the covered set changes), the
  // field's included: 8 x 1 kpc spaxels, [-4, 4)^2, kernels smaller than a spaxel to wider than
  // the field, centres inside, near and beyond the edges.
  const SpaxelGrid grid = square_grid(8, 1.0);
  auto near_edge = [](double u) { return std::abs(u - std::round(u)) < 1e-3; };
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> centre(-4.8, 4.8);
  int checked = 0, inside_checked = 0;
  for (const double h : {0.3, 1.0, 2.5, 6.0}) {
    const double sigma = h * kStarSigmaPerSmoothingLength, reach = kTruncation * sigma;
    for (int trial = 0; trial < 40; ++trial) {
      const double x = centre(rng), y = centre(rng);
      if (near_edge(x - reach) || near_edge(x + reach) || near_edge(y - reach) ||
          near_edge(y + reach))
        continue;
      const auto w = footprint_of(grid, x, y, sigma);
      std::map<int, std::pair<double, double>> slopes;
      std::size_t visited = 0;
      for_each_kernel_spaxel_slopes(grid, x, y, sigma,
                                    [&](std::int32_t s, double weight, double w_x, double w_y) {
                                      ++visited;
                                      // The deposit's spaxels and bitwise its weights.
                                      REQUIRE(w.count(s) == 1);
                                      CHECK(weight == w.at(s));
                                      slopes[s] = {w_x, w_y};
                                    });
      CHECK(visited == w.size());
      const double step = 1e-6 * sigma;
      double sum_x = 0.0, sum_y = 0.0;
      for (const auto& [s, slope] : slopes) {
        const int ix = s % 8, iy = s / 8;
        const double x0 = -4.0 + ix, y0 = -4.0 + iy;
        const double fx = axis_fraction(x0, x0 + 1.0, x, sigma);
        const double fy = axis_fraction(y0, y0 + 1.0, y, sigma);
        const double dfx = (axis_fraction(x0, x0 + 1.0, x + step, sigma) -
                            axis_fraction(x0, x0 + 1.0, x - step, sigma)) /
                           (2.0 * step);
        const double dfy = (axis_fraction(y0, y0 + 1.0, y + step, sigma) -
                            axis_fraction(y0, y0 + 1.0, y - step, sigma)) /
                           (2.0 * step);
        CAPTURE(h, x, y, ix, iy);
        CHECK(std::abs(slope.first - dfx * fy) <= 1e-7 / sigma);
        CHECK(std::abs(slope.second - fx * dfy) <= 1e-7 / sigma);
        sum_x += slope.first;
        sum_y += slope.second;
        ++checked;
      }
      // A square inside the field keeps weights summing to 1: their slopes sum to 0.
      if (x - reach > -4.0 && x + reach < 4.0 && y - reach > -4.0 && y + reach < 4.0) {
        CHECK(std::abs(sum_x) <= 1e-12 / sigma);
        CHECK(std::abs(sum_y) <= 1e-12 / sigma);
        ++inside_checked;
      }
    }
  }
  CHECK(checked > 500);
  CHECK(inside_checked > 5);
  // A point (no width): weight 1, zero slopes.
  for_each_kernel_spaxel_slopes(grid, 0.3, -1.2, 0.0,
                                [&](std::int32_t s, double weight, double w_x, double w_y) {
                                  CHECK(s == grid.index_of(0.3, -1.2));
                                  CHECK(weight == 1.0);
                                  CHECK(w_x == 0.0);
                                  CHECK(w_y == 0.0);
                                });
}

TEST_CASE("smoothing: a star's image keeps its mass, centroid and the kernel's width",
          "[smoothing]") {
  const float x = 0.37f, y = -0.52f, mass = 3.0e6f, h = 1.2f;
  const Cube image =
      mass_image(1, one_star(x, y, 0.5f, mass, h),
                 {{"n_spaxels", 40}, {"spaxel_size_kpc", 0.25}, {"smoothing", "kernel"}});
  REQUIRE(image.shape == CubeShape{40, 40, 1});
  const double quantum = FixedPointScale::for_bound(mass, "test sums").quantum();
  double m = 0, mx = 0, my = 0, mxx = 0, myy = 0;
  int lit = 0;
  for (int iy = 0; iy < 40; ++iy)
    for (int ix = 0; ix < 40; ++ix) {
      const double v = image.at(ix, iy, 0), cx = -5 + 0.25 * (ix + 0.5),
                   cy = -5 + 0.25 * (iy + 0.5);
      m += v;
      mx += v * cx;
      my += v * cy;
      mxx += v * cx * cx;
      myy += v * cy * cy;
      lit += v > 0;
    }
  CHECK(lit > 80);  // spread over many spaxels, not one
  // Each of the ~100 spaxels is rounded once to the fixed-point quantum; this test's own sum of
  // the doubles adds an ulp of the total per spaxel; each float32 voxel rounds by 2^-24 of
  // itself, 2^-24 of the mass in all (tests/cube_tolerance.h).
  CHECK(std::abs(m - mass) <= lit * (0.5 * quantum + kEps * mass) + test::kFloatRounding * mass);
  // The binned kernel's centroid: symmetric, so the star's position up to the binning of the
  // truncation edges (1e-4 of a spaxel here).
  CHECK(mx / m == Approx(x).margin(2.5e-5));
  CHECK(my / m == Approx(y).margin(2.5e-5));
  // Per-axis variance: the truncated Gaussian's, 1 - 2 t phi(t) / erf(t / sqrt 2) of sigma^2,
  // plus a spaxel's d^2 / 12 (Sheppard's correction).
  const double sigma = h * kStarSigmaPerSmoothingLength, t = kTruncation;
  const double truncated =
      1 - 2 * t * std::exp(-0.5 * t * t) / std::sqrt(2 * M_PI) / std::erf(t / std::sqrt(2.0));
  const double variance = sigma * sigma * truncated + 0.25 * 0.25 / 12;
  CHECK(mxx / m - (mx / m) * (mx / m) == Approx(variance).epsilon(2e-3));
  CHECK(myy / m - (my / m) * (my / m) == Approx(variance).epsilon(2e-3));
}

TEST_CASE("smoothing: a kernel crossing the field edge loses exactly its outside part",
          "[smoothing]") {
  const SpaxelGrid grid = square_grid(40, 0.25);  // [-5, 5)^2
  const double h = 1.0, sigma = h * kStarSigmaPerSmoothingLength;
  const double norm = 2 * std::erf(kTruncation / std::sqrt(2.0));
  // Inside fraction across one straight edge at +5 (or -5): the kernel's integral up to it.
  auto inside_below = [&](double c, double edge) {
    return (std::erf((edge - c) / (std::sqrt(2.0) * sigma)) +
            std::erf(kTruncation / std::sqrt(2.0))) /
           norm;
  };
  // Across the right edge, across a corner, and from outside the field (spaxel index -1).
  const double right = inside_below(4.8, 5.0);
  CHECK(right < 0.9);
  CHECK(std::abs(total(footprint_of(grid, 4.8, 0.1, sigma)) - right) <= 1e-12);
  const double corner = inside_below(4.8, 5.0) * inside_below(4.9, 5.0);  // (4.8, -4.9): mirror
  CHECK(std::abs(total(footprint_of(grid, 4.8, -4.9, sigma)) - corner) <= 1e-12);
  const double outside = inside_below(5.3, 5.0);
  CHECK(outside > 0.05);
  CHECK(grid.index_of(5.3, 0.1) == -1);
  CHECK(std::abs(total(footprint_of(grid, 5.3, 0.1, sigma)) - outside) <= 1e-12);
  CHECK(footprint_of(grid, 5.0 + 1.01 * h, 0.1, sigma).empty());  // beyond the kernel's reach

  // The same through FootprintView (spaxel_index -1 must not stop it) and the mass image.
  const float xs[] = {5.3f}, ys[] = {0.1f}, hs[] = {static_cast<float>(h)};
  const std::int32_t index[] = {-1};
  FootprintView view;
  view.grid = grid;
  view.spaxel_index = index;
  view.x_kpc = xs;
  view.y_kpc = ys;
  view.smoothing_length_kpc = hs;
  double via_view = 0;
  view.for_each(0, [&](std::int32_t, double w) { via_view += w; });
  CHECK(std::abs(via_view - inside_below(5.3f, 5.0)) <= 1e-12);
  view.smoothing_length_kpc = nullptr;  // unsmoothed: the star's own spaxel, none here
  int calls = 0;
  view.for_each(0, [&](std::int32_t, double) { ++calls; });
  CHECK(calls == 0);

  const float mass = 1.0e6f;
  const Cube image =
      mass_image(2, one_star(5.3f, 0.1f, 0.0f, mass, static_cast<float>(h)),
                 {{"n_spaxels", 40}, {"spaxel_size_kpc", 0.25}, {"smoothing", "kernel"}});
  const double quantum = FixedPointScale::for_bound(mass, "test sums").quantum();
  CHECK(std::abs(sum_of(image) - mass * inside_below(5.3f, 5.0)) <=
        image.data.size() * kEps * mass + 100 * quantum + test::kFloatRounding * mass);
}

TEST_CASE("apertures: light lands on the whole grid, aperture_mask blanks what is outside",
          "[smoothing]") {
  // 20 x 0.5 kpc ([-5, 5)^2) seen through an aperture of diameter 10 kpc; the kernel of a star
  // near the rim reaches spaxels whose centres are outside: it is deposited there, and the
  // aperture mask then makes those spaxels NaN, so the aperture keeps the kernel's share.
  const double r = 5.0;
  auto in_circle = [&](double x, double y) { return x * x + y * y <= r * r; };
  auto in_hexagon = [&](double x, double y) {
    const double s3 = std::sqrt(3.0);
    return std::abs(y) <= 0.5 * s3 * r && s3 * std::abs(x) + std::abs(y) <= s3 * r;
  };
  for (const int shape : {1, 2}) {
    CAPTURE(shape);
    SpaxelGrid grid = square_grid(20, 0.5);
    grid.aperture = shape;
    grid.aperture_kpc = 2 * r;
    // The star's position as the stages see it (float).
    const double x = 3.3f, y = 2.9f, sigma = 1.5 * kStarSigmaPerSmoothingLength;
    // Analytic: column by column, the aperture's spaxels form one run of rows (a convex
    // aperture), whose y-integral is one erf difference.
    double expected = 0;
    for (int ix = 0; ix < 20; ++ix) {
      const double cx = -5 + 0.5 * (ix + 0.5);
      int lo = 20, hi = -1;
      for (int iy = 0; iy < 20; ++iy) {
        const double cy = -5 + 0.5 * (iy + 0.5);
        if (shape == 1 ? in_circle(cx, cy) : in_hexagon(cx, cy)) {
          lo = std::min(lo, iy);
          hi = std::max(hi, iy);
        }
      }
      if (hi < lo) continue;
      expected += axis_fraction(-5 + 0.5 * ix, -5 + 0.5 * (ix + 1), x, sigma) *
                  axis_fraction(-5 + 0.5 * lo, -5 + 0.5 * (hi + 1), y, sigma);
    }
    const auto w = footprint_of(grid, x, y, sigma);
    CHECK(expected < 0.95);                    // the rim cuts the kernel
    CHECK(std::abs(total(w) - 1.0) <= 1e-12);  // but the grid holds all of it
    std::size_t outside_aperture = 0;
    for (const auto& [s, v] : w) {
      const double cx = -5 + 0.5 * (s % 20 + 0.5), cy = -5 + 0.5 * (s / 20 + 0.5);
      outside_aperture += !(shape == 1 ? in_circle(cx, cy) : in_hexagon(cx, cy));
    }
    CHECK(outside_aperture > 0);

    // Through the aperture stage: the telescope's circle, 1 kpc per arcsec.
    auto mesh = make_mesh(Backend::cpu, 1);
    RunState state(*mesh);
    const float mass = 2.0e6f;
    state.data.stars =
        put_stars(*mesh, one_star(static_cast<float>(x), static_cast<float>(y), 0.0f, mass, 1.5f));
    Telescope& t = state.observation.telescope;
    t.fov_arcsec = 2 * r;
    t.spaxel_arcsec = 0.5;
    t.aperture = shape == 1 ? ApertureShape::circular : ApertureShape::hexagonal;
    t.wave_start_angstrom = 5000;
    t.wave_end_angstrom = 5002;
    t.wave_step_angstrom = 1;
    state.observation.kpc_per_arcsec = 1.0;
    run_stage(*make_stage("aperture", {{"smoothing", "kernel"}}, "stages.aperture", {}), state);
    CHECK(state.products.get<SpaxelGrid>("spaxels").smoothing ==
          static_cast<int>(Smoothing::kernel));
    run_stage(*make_stage("mass_image", nlohmann::json::object(), "p", {}), state);
    run_stage(*make_stage("psum", nlohmann::json::object(), "p", {}), state);
    const double quantum = FixedPointScale::for_bound(mass, "test sums").quantum();
    const double tolerance = state.cube->data.size() * kEps * mass + 0.5 * w.size() * quantum +
                             test::kFloatRounding * mass;  // float32 voxels
    CHECK(std::abs(sum_of(*state.cube) - mass) <= tolerance);
    run_stage(*make_stage("aperture_mask", nlohmann::json::object(), "p", {}), state);
    double inside = 0;
    for (int iy = 0; iy < 20; ++iy)
      for (int ix = 0; ix < 20; ++ix) {
        const double v = state.cube->at(ix, iy, 0);
        const double cx = -5 + 0.5 * (ix + 0.5), cy = -5 + 0.5 * (iy + 0.5);
        if (shape == 1 ? in_circle(cx, cy) : in_hexagon(cx, cy)) {
          REQUIRE(std::isfinite(v));
          inside += v;
        } else {
          REQUIRE(std::isnan(v));
        }
      }
    CHECK(std::abs(inside - mass * expected) <= tolerance);
  }
}

TEST_CASE("smoothing: \"none\" gives the single-spaxel image bitwise, for any device count",
          "[smoothing]") {
  test::HostStars host = test::random_stars(20011, 77);
  // Smoothing lengths present must not matter without smoothing.
  for (std::size_t i = 0; i < host.size(); ++i)
    host.smoothing_length_kpc.push_back(0.5f + 0.001f * (i % 300));
  // The single-spaxel image in fixed point, as the mass image has always made it: each star's
  // mass rounded once into its spaxel of the 24 x 0.75 kpc grid.
  double max_mass = 0;
  for (float m : host.mass_msun) max_mass = std::max<double>(max_mass, m);
  const FixedPointScale scale = FixedPointScale::for_bound(host.size() * max_mass, "test sums");
  std::vector<std::int64_t> sums(24 * 24, 0);
  for (std::size_t i = 0; i < host.size(); ++i) {
    const double fx = (host.position_kpc[3 * i] + 9.0) / 0.75,
                 fy = (host.position_kpc[3 * i + 1] + 9.0) / 0.75;
    if (!(fx >= 0 && fy >= 0 && fx < 24 && fy < 24)) continue;
    sums[static_cast<std::size_t>(fy) * 24 + static_cast<std::size_t>(fx)] +=
        std::llrint(static_cast<double>(host.mass_msun[i]) * scale.counts_per_unit);
  }
  // Each exact total rounded once to the cube's float (data/datacube.h).
  std::vector<float> expected(sums.size());
  for (std::size_t s = 0; s < sums.size(); ++s)
    expected[s] = static_cast<float>(static_cast<double>(sums[s]) * scale.quantum());

  const nlohmann::json plain{{"n_spaxels", 24}, {"spaxel_size_kpc", 0.75}};
  nlohmann::json none = plain;
  none["smoothing"] = "none";
  for (int d : {1, 3}) {
    for (const auto& params : {plain, none}) {
      const Cube image = mass_image(d, host, params);
      REQUIRE(image.data.size() == expected.size());
      CHECK(std::memcmp(image.data.data(), expected.data(), expected.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("smoothing: the smoothed image is bitwise identical for 1, 2 and 5 devices",
          "[smoothing]") {
  const test::HostStars host = test::random_stars(4003, 5, 3.0);  // kNN lengths from the stars
  const nlohmann::json params{
      {"n_spaxels", 30}, {"spaxel_size_kpc", 0.4}, {"smoothing", "kernel"}, {"knn_neighbours", 16}};
  const Cube one = mass_image(1, host, params);
  const Cube unsmoothed = mass_image(1, host, {{"n_spaxels", 30}, {"spaxel_size_kpc", 0.4}});
  CHECK(one.data != unsmoothed.data);
  // Light only moves, within the field up to what crosses its edge: totals within 2 percent.
  CHECK(sum_of(one) == Approx(sum_of(unsmoothed)).epsilon(0.02));
  for (int d : {2, 5}) {
    const Cube many = mass_image(d, host, params);
    CHECK(std::memcmp(many.data.data(), one.data.data(), one.data.size() * sizeof(one.data[0])) ==
          0);
  }
}

TEST_CASE("smoothing: k-th nearest neighbour distances equal brute force", "[smoothing]") {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> g(0.0, 2.0);
  std::vector<float> p;
  for (int i = 0; i < 700; ++i)
    for (int c = 0; c < 3; ++c) p.push_back(static_cast<float>(g(rng)));
  for (int c = 0; c < 3; ++c) p.push_back(p[c]);  // a duplicate of point 0
  const std::size_t n = p.size() / 3;
  auto brute = [&](std::size_t i, int k) {
    std::vector<double> d;
    for (std::size_t j = 0; j < n; ++j) {
      if (j == i) continue;
      double s = 0;
      for (int c = 0; c < 3; ++c) {
        const double dc = static_cast<double>(p[3 * i + c]) - p[3 * j + c];
        s += dc * dc;
      }
      d.push_back(std::sqrt(s));
    }
    std::sort(d.begin(), d.end());
    return d[std::min<std::size_t>(static_cast<std::size_t>(k), d.size()) - 1];
  };
  for (const int k : {1, 5, 32}) {
    CAPTURE(k);
    const auto h = knn_smoothing_length_kpc(p, k);
    REQUIRE(h.size() == n);
    for (std::size_t i = 0; i < n; ++i)
      CHECK(h[i] == Approx(brute(i, k)).epsilon(1e-6).margin(1e-7));
  }
  CHECK(knn_smoothing_length_kpc(p, 1)[0] == 0.0f);  // its duplicate is its nearest neighbour
  // Fewer points than k + 1: the farthest other point; one point: 0.
  const std::vector<float> three{0, 0, 0, 3, 0, 0, 0, 4, 0};
  CHECK(knn_smoothing_length_kpc(three, 32) == std::vector<float>{4.0f, 5.0f, 5.0f});
  CHECK(knn_smoothing_length_kpc({1, 2, 3}, 32) == std::vector<float>{0.0f});
  CHECK(gas_cell_radius_kpc(4.0 * M_PI / 3.0 * 8.0, 1.0) == Approx(2.0).epsilon(1e-15));
}

TEST_CASE("smoothing: StellarHsml is read from TNG files, without it the kNN length is used",
          "[smoothing][tng]") {
  test::ScratchDir dir("smoothing");
  tng::SyntheticGalaxySpec spec;
  spec.n_stars = 400;
  spec.n_gas = 20;
  spec.wind_fraction = 0.0;  // every row is a star: row i of the file is star i
  spec.redshift = 0.5;
  const std::string file = dir.file("cutout.hdf5");
  tng::write_tng_cutout(file, spec);
  auto mesh = make_mesh(Backend::cpu, 2);
  const nlohmann::json params{{"n_spaxels", 20}, {"spaxel_size_kpc", 1.0}, {"smoothing", "kernel"}};

  TngReadOptions opt;
  opt.path = file;
  {
    RunState state(*mesh);
    state.data = read_tng(*mesh, opt);
    REQUIRE(state.data.stars.count() == 400);
    CHECK(state.data.stars.smoothing_length_kpc.empty());
    run_stage(*make_stage("spaxel_grid", params, "p", {}), state);
    const auto expected = knn_smoothing_length_kpc(state.data.stars.position_kpc.to_host(), 32);
    CHECK(state.data.stars.smoothing_length_kpc.to_host() == expected);
  }

  // StellarHsml in ckpc/h with TNG's unit attributes (those of Coordinates).
  std::vector<float> hsml(400);
  for (std::size_t i = 0; i < hsml.size(); ++i) hsml[i] = 0.5f + 0.01f * static_cast<float>(i);
  {
    h5::File f(file, h5::File::Mode::read_write);
    const auto g = f.group("PartType4");
    g.write<float>("StellarHsml", hsml, {400});
    g.set_attribute<double>("a_scaling", 1.0, "StellarHsml");
    g.set_attribute<double>("h_scaling", -1.0, "StellarHsml");
    g.set_attribute<double>("to_cgs", 3.085678e21, "StellarHsml");
  }
  RunState state(*mesh);
  state.data = read_tng(*mesh, opt);
  const auto read = state.data.stars.smoothing_length_kpc.to_host();
  REQUIRE(read.size() == 400);
  const double kpc_per_code = spec.scale_factor() / spec.cosmology.hubble_param;
  for (std::size_t i = 0; i < read.size(); ++i)
    CHECK(read[i] == Approx(hsml[i] * kpc_per_code).epsilon(1e-6));
  run_stage(*make_stage("spaxel_grid", params, "p", {}), state);
  CHECK(state.data.stars.smoothing_length_kpc.to_host() == read);  // kept, not recomputed
}

TEST_CASE("smoothing: the dust screen spreads each gas cell over its kernel", "[smoothing][dust]") {
  // 8 x 2 kpc spaxels ([-8, 8)^2); spaxel (4, 4) is 0 < x, y < 2. One gas cell at (1, 1, 0)
  // with radius (3 m / (4 pi rho))^(1/3) = 1.5 kpc, so sigma = 1.5 / sqrt(5) kpc.
  const double m = 4.0e7, z_metals = 0.02, radius = 1.5;
  const double rho = 3.0 * m / (4.0 * M_PI * radius * radius * radius);
  const double sigma = radius * kGasSigmaPerCellRadius;
  CHECK(kGasSigmaPerCellRadius == Approx(1.0 / std::sqrt(5.0)).epsilon(1e-15));
  auto weight = [&](int ix, int iy) {
    return axis_fraction(-8 + 2.0 * ix, -8 + 2.0 * (ix + 1), 1.0, sigma) *
           axis_fraction(-8 + 2.0 * iy, -8 + 2.0 * (iy + 1), 1.0, sigma);
  };
  // A_V for a column sum of m Z (Msun) over a 4 kpc^2 spaxel (docs/dust.md).
  auto av = [](double mass_times_z) {
    const double kpc_cm = 3.0856775814913673e21;
    return 1.0857362047581294 * 2.62e4 * 0.4 * mass_times_z * 1.98841e33 / (kpc_cm * kpc_cm) / 4.0;
  };
  const double w44 = weight(4, 4), w54 = weight(5, 4);
  CHECK(w54 > 0.05);

  // Stars behind (z = 5): one in spaxel (5, 4) with a tiny kernel, one in front (z = -5), one
  // whose kernel is split evenly between spaxels (4, 4) and (5, 4).
  test::HostStars stars = test::random_stars(3, 9);
  stars.position_kpc = {3.0f, 1.0f, 5.0f, 3.0f, 1.0f, -5.0f, 2.0f, 1.0f, 5.0f};
  stars.smoothing_length_kpc = {1e-4f, 1e-4f, 0.5f};
  auto mesh = make_mesh(Backend::cpu, 2);
  RunState state(*mesh);
  state.data.stars = put_stars(*mesh, stars);
  const auto sh = Sharding::sharded();
  state.data.gas.position_kpc = device_put(*mesh, std::vector<float>{1.0f, 1.0f, 0.0f}, 3, sh);
  state.data.gas.mass_msun = device_put(*mesh, std::vector<float>{static_cast<float>(m)}, 1, sh);
  state.data.gas.metallicity =
      device_put(*mesh, std::vector<float>{static_cast<float>(z_metals)}, 1, sh);

  const nlohmann::json grid{{"n_spaxels", 8}, {"spaxel_size_kpc", 2.0}, {"smoothing", "kernel"}};
  // The spaxel stage places the gas too: with kernel smoothing it needs the cells' densities.
  CHECK_THROWS_WITH(run_stage(*make_stage("spaxel_grid", grid, "p", {}), state),
                    Catch::Contains("gas.density_msun_per_kpc3"));
  state.data.gas.density_msun_per_kpc3 =
      device_put(*mesh, std::vector<float>{static_cast<float>(rho)}, 1, sh);
  run_stage(*make_stage("spaxel_grid", grid, "p", {}), state);
  run_stage(*make_stage("dust", nlohmann::json::object(), "p", {}), state);
  const auto a = state.data.stars.derived.at(fields::stars_dust_av).to_host();
  const double mz = static_cast<double>(static_cast<float>(m)) * static_cast<float>(z_metals);
  CHECK(a[0] == Approx(av(mz * w54)).epsilon(1e-5));
  CHECK(a[1] == 0.0f);
  const double split = -2.5 * std::log10(0.5 * std::pow(10.0, -0.4 * av(mz * w44)) +
                                         0.5 * std::pow(10.0, -0.4 * av(mz * w54)));
  CHECK(av(mz * w44) > av(mz * w54) + 0.1);  // the two spaxels differ
  CHECK(a[2] == Approx(split).epsilon(1e-5));
}

TEST_CASE("smoothing: parameters are validated with their key paths", "[smoothing]") {
  CHECK_THROWS_AS(make_stage("aperture", {{"smoothing", "gauss"}}, "stages.aperture", {}),
                  ConfigError);
  CHECK_THROWS_WITH(make_stage("aperture", {{"smoothing", "gauss"}}, "stages.aperture", {}),
                    Catch::Contains("stages.aperture.smoothing: expected one of"));
  CHECK_THROWS_WITH(
      make_stage("aperture", {{"smoothing", "kernel"}, {"knn_neighbours", 0}}, "stages.aperture",
                 {}),
      Catch::Contains("stages.aperture.knn_neighbours: expected an integer from 1 to 1024"));
  CHECK_THROWS_WITH(make_stage("aperture", {{"smoothing", true}}, "stages.aperture", {}),
                    Catch::Contains("stages.aperture.smoothing"));
  CHECK_THROWS_WITH(
      make_stage("spaxel_grid", {{"n_spaxels", 4}, {"spaxel_size_kpc", 1}, {"smoothing", "gauss"}},
                 "stages[0].params", {}),
      Catch::Contains("stages[0].params.smoothing: expected one of"));
  CHECK_THROWS_WITH(
      make_stage("spaxel_grid", {{"n_spaxels", 46341}, {"spaxel_size_kpc", 1}}, "stages[0].params",
                 {}),
      Catch::Contains("stages[0].params.n_spaxels: expected an integer from 1 to 46340"));
  CHECK_NOTHROW(make_stage("spaxel_grid", {{"n_spaxels", 46340}, {"spaxel_size_kpc", 1}},
                           "stages[0].params", {}));
  CHECK_NOTHROW(make_stage("aperture", {{"smoothing", "none"}}, "stages.aperture", {}));
  CHECK_NOTHROW(make_stage("aperture", nlohmann::json::object(), "stages.aperture", {}));

  // A footprint that asks for smoothing of stars without smoothing lengths is a programming error.
  auto mesh = make_mesh(Backend::cpu, 1);
  const Stars stars = put_stars(*mesh, test::random_stars(5, 1));
  SpaxelGrid grid = square_grid(4, 1.0);
  CHECK_THROWS_AS(star_footprint(stars, grid, mesh->device(0)), std::logic_error);
}
