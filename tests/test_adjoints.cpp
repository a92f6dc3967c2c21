// The cube stages' adjoints (issue 27, docs/gradients.md): each stage's adjoint is the transpose
// of its forward map, checked by the dot-product identity <A x, y> = <x, A^T y> for random
// non-zero x (a change of the cube the stage was given) and y (a cotangent of the cube it made).
//
// The forward cube is float (rounded once per stage, ~6e-8 relative), which cannot show an
// adjoint right to 1e-10; so each stage also applies its forward map in double (tangent(), the
// very code and tables of run() on double values), and the identity is checked against that, to
// a relative 1e-10: both sides are the same sums of ~n_voxels x n_taps products of values of
// order 1 made in double in other orders, whose rounding is ~1e-16 x sqrt(terms) relative, far
// below 1e-10, while a wrong tap, edge or shape moves the sides apart by far more. That tangent()
// is run()'s map is checked on the same x: run()'s float cube against tangent()'s to 1e-6 of the
// cube's largest value (a few float roundings).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <span>

#include "core/json_params.h"
#include "pipeline/devices.h"
#include "pipeline/registry.h"
#include "pipeline/vjp.h"
#include "stages/common/convolution.h"
#include "stages/common/spaxel_grid.h"
#include "stages/fibres/fibres.h"
#include "stages/lsf/lsf.h"
#include "stages/psf/psf.h"
#include "tests/fibre_fixtures.h"

using namespace ifusim;
using nlohmann::json;

namespace {

// Dot products in double agree to this (see above).
constexpr double kDotTolerance = 1e-10;
// run()'s float cube against tangent()'s double one, relative to the largest value.
constexpr double kFloatTolerance = 1e-6;

Observation observation() {
  Observation obs;
  obs.redshift = 0.03;
  obs.luminosity_distance_mpc = obs.cosmology.luminosity_distance_mpc(obs.redshift);
  obs.kpc_per_arcsec = obs.cosmology.kpc_per_arcsec(obs.redshift);
  obs.axes.spaxel_arcsec = 0.2;
  obs.axes.wave_start_angstrom = 4750.0;
  obs.axes.wave_step_angstrom = 1.25;
  obs.telescope.wave_start_angstrom = 4750.0;  // the band (the LSF's margin is over it)
  obs.telescope.wave_end_angstrom = 4900.0;
  obs.telescope.wave_step_angstrom = 1.25;
  obs.telescope_lsf_fwhm_angstrom = 2.51;
  obs.template_fwhm_angstrom = 2.51;
  obs.seed = 42;
  return obs;
}

// Random values of either sign, |v| in [0.5, 1.5]: none zero.
CubeCotangent random_cube(const CubeShape& shape, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  CubeCotangent c{shape, std::vector<double>(shape.n_voxels())};
  for (double& v : c.values_to_change()) v = (rng() & 1 ? 1.0 : -1.0) * u(rng);
  return c;
}

double dot(std::span<const double> a, std::span<const double> b) {
  REQUIRE(a.size() == b.size());
  double sum = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

void require_finite(std::span<const double> values) {
  for (double v : values) REQUIRE(std::isfinite(v));
}

std::string text(const CubeShape& s) {
  return std::to_string(s.nx) + "x" + std::to_string(s.ny) + "x" + std::to_string(s.n_wave);
}

// x rounded to float, as run() is given it (so that run() and tangent() see the same values).
CubeCotangent as_float_values(CubeCotangent x) {
  for (double& v : x.values_to_change()) v = static_cast<float>(v);
  return x;
}

// The forward in float: `stages` run() in order on x's values, from `state` (its observation,
// products); the state as they left it, for their adjoints.
void run_forward(const std::vector<Stage*>& stages, RunState& state, const CubeCotangent& x) {
  Cube cube;
  cube.shape = x.shape;
  cube.unit = "Lsun/Angstrom";
  cube.data.assign(x.values().begin(), x.values().end());
  state.cube = std::move(cube);
  for (Stage* s : stages) s->run(state);
}

// The checks of one chain of stages (one stage, or several in run order) on a cube of `given`
// shape: run() against tangent() (NaN in run()'s cube only where tangent() is 0: a masked
// voxel), then <J x, y> = <x, J^T y> through pipeline/vjp's passes. Returns J x's shape.
CubeShape check_chain(const std::vector<Stage*>& stages, RunState& state, const CubeShape& given,
                      std::uint64_t seed) {
  const CubeCotangent x = as_float_values(random_cube(given, seed));
  run_forward(stages, state, x);
  const Cube& made = *state.cube;
  const std::vector<const Stage*> chain(stages.begin(), stages.end());

  const CubeCotangent jx = cube_stages_jvp(chain, state, x);
  INFO("given " << text(given) << ", made " << text(made.shape));
  REQUIRE(jx.shape == made.shape);
  const std::span<const double> jx_values = jx.values();
  REQUIRE(jx_values.size() == made.data.size());
  require_finite(jx_values);
  double peak = 0.0;
  for (double v : jx_values) peak = std::max(peak, std::abs(v));
  REQUIRE(peak > 0.0);  // never an all-zero map
  std::size_t masked = 0;
  for (std::size_t i = 0; i < jx_values.size(); ++i) {
    if (std::isnan(made.data[i])) {
      ++masked;
      REQUIRE(jx_values[i] == 0.0);
      continue;
    }
    REQUIRE(std::abs(made.data[i] - jx_values[i]) <= kFloatTolerance * peak);
  }
  REQUIRE(masked < jx_values.size());

  // The backward from the caller's values read in place, as a VJP hands them over (a stage that
  // changes them in place works on its own copy); held, the same values.
  const CubeCotangent y = random_cube(made.shape, seed + 1);
  const CubeCotangent jty =
      cube_stages_vjp(chain, state, CubeCotangent::borrowing(y.shape, y.values().data()));
  REQUIRE(jty.shape == given);
  REQUIRE(jty.values().size() == given.n_voxels());
  require_finite(jty.values());
  CHECK(std::ranges::equal(cube_stages_vjp(chain, state, y).values(), jty.values()));
  const double lhs = dot(jx_values, y.values()), rhs = dot(x.values(), jty.values());
  INFO("<J x, y> = " << lhs << ", <x, J^T y> = " << rhs);
  REQUIRE(std::abs(lhs) > 1e-3 * std::sqrt(static_cast<double>(jx_values.size())));
  CHECK(std::abs(lhs - rhs) <= kDotTolerance * std::abs(lhs));
  return made.shape;
}

// One stage made through the registry, as a run makes it.
std::unique_ptr<Stage> make_one(const json& stage, std::vector<std::string> available = {"cube"}) {
  auto stages = make_stages(json::array({stage}), "stages", std::move(available));
  return std::move(stages.front());
}

SpaxelGrid circular_grid(int n_side) {
  SpaxelGrid grid;
  grid.n_side = n_side;
  grid.spaxel_size_kpc = 1.0;
  grid.aperture = static_cast<int>(ApertureShape::circular);
  grid.aperture_kpc = n_side - 4.0;  // spaxels in every corner outside
  return grid;
}

}  // namespace

TEST_CASE("adjoint: flux and foreground_dust scale by their factors", "[adjoint]") {
  auto mesh = make_mesh(Backend::cpu, 1);
  for (const json& stage : {json{{"stage", "flux"}, {"params", {{"unit_scale", 1e-20}}}},
                            json{{"stage", "foreground_dust"}, {"params", {{"ebv_mag", 0.3}}}}}) {
    INFO(stage.dump());
    RunState state(*mesh);
    state.observation = observation();
    state.observation.margin = {2, 3};
    auto s = make_one(stage);
    check_chain({s.get()}, state, {6, 5, 23}, 1);
  }
}

TEST_CASE("adjoint: lsf, one kernel and a kernel per source pixel, with the band's margin",
          "[adjoint]") {
  auto mesh = make_mesh(Backend::cpu, 1);
  // sigma^2 = (FWHM_tel^2 - FWHM_lib^2 (1 + z)^2) / 8 ln 2: 2.2 pixels (of 1.25 A) for a constant
  // 6.6 A against 2 A templates; 0.8 to 3.3 pixels where the templates' FWHM runs from 6 A to 1 A
  // over the band (each source pixel its own kernel: the transpose is not the convolution).
  for (const json& params :
       {json{{"fwhm_angstrom", 6.6}, {"template_fwhm_angstrom", 2.0}},
        json{{"fwhm_angstrom", 6.6},
             {"template_fwhm_angstrom",
              {{"wavelength_angstrom", {4500.0, 4700.0}}, {"fwhm_angstrom", {6.0, 1.0}}}}}}) {
    INFO(params.dump());
    auto lsf = make_one({{"stage", "lsf"}, {"params", params}});
    RunState state(*mesh);
    state.observation = observation();
    const CubeMargin margin = lsf->margin(state.observation);
    REQUIRE(margin.wavelengths >= 8);  // it spreads
    state.observation.margin = margin;
    check_chain({lsf.get()}, state, {3, 4, 120 + 2 * margin.wavelengths}, 2);
  }
}

TEST_CASE("adjoint: correlate_axis_in_place is the transpose of convolve_axis_in_place",
          "[adjoint]") {
  // On each axis layout the stages use ((outer, n, 1), (outer, n, inner), (1, n, inner)), with
  // kernels wider than the axis (capped) and per source pixel.
  const int n = 9;
  std::vector<Kernel1D> per_pixel;
  for (int j = 0; j < n; ++j)
    per_pixel.push_back(gaussian_pixel_kernel(0.5 + 0.4 * j, 1e-6, n - 1));
  const std::vector<Kernel1D> wide = {gaussian_pixel_kernel(6.0, 1e-6, n - 1)};
  struct Layout {
    std::size_t outer, inner;
  };
  std::uint64_t seed = 10;
  for (const auto& kernels : {per_pixel, wide})
    for (const Layout& l : {Layout{5, 1}, Layout{3, 4}, Layout{1, 7}}) {
      const CubeShape shape{static_cast<int>(l.outer), 1, n * static_cast<int>(l.inner)};
      CubeCotangent x = random_cube(shape, ++seed), y = random_cube(shape, ++seed);
      std::vector<double> ax = x.values_to_change(), aty = y.values_to_change();
      convolve_axis_in_place(ax, l.outer, n, l.inner, kernels);
      correlate_axis_in_place(aty, l.outer, n, l.inner, kernels);
      const double lhs = dot(ax, y.values()), rhs = dot(x.values(), aty);
      INFO(l.outer << " x " << n << " x " << l.inner << ": " << lhs << " vs " << rhs);
      CHECK(std::abs(lhs - rhs) <= kDotTolerance * std::abs(lhs));
      // The forward in double is convolve_axis's sum (the reference).
      std::vector<double> reference;
      convolve_axis(x.values_to_change(), reference, l.outer, n, l.inner, kernels);
      for (std::size_t i = 0; i < ax.size(); ++i)
        REQUIRE(ax[i] == Approx(reference[i]).margin(1e-14));
    }
}

TEST_CASE("adjoint: psf, Gaussian and Moffat, constant and varying with wavelength", "[adjoint]") {
  auto mesh = make_mesh(Backend::cpu, 1);
  const json varying = {{"wavelength_angstrom", {4750.0, 4790.0}}, {"fwhm_arcsec", {0.9, 0.5}}};
  for (const json& params : {json{{"fwhm_arcsec", 0.8}}, json{{"fwhm_arcsec", varying}},
                             json{{"fwhm_arcsec", 0.8}, {"shape", "moffat"}, {"beta", 2.5}},
                             json{{"fwhm_arcsec", varying}, {"shape", "moffat"}, {"beta", 3.0}}}) {
    INFO(params.dump());
    auto psf = make_one({{"stage", "psf"}, {"params", params}});
    RunState state(*mesh);
    state.observation = observation();
    const CubeMargin margin = psf->margin(state.observation);
    REQUIRE(margin.spaxels >= 3);  // it spreads
    state.observation.margin = margin;
    // Not square, and narrower than the Moffat's kernel (capped by the cube).
    check_chain({psf.get()}, state, {9 + 2 * margin.spaxels, 6 + 2 * margin.spaxels, 32}, 3);
  }
}

TEST_CASE("adjoint: aperture_mask pads the crop with zeros and zeroes outside the aperture",
          "[adjoint]") {
  auto mesh = make_mesh(Backend::cpu, 1);
  for (const CubeMargin margin : {CubeMargin{0, 0}, CubeMargin{3, 5}}) {
    auto mask = make_one({{"stage", "aperture_mask"}}, {"cube", "spaxels"});
    RunState state(*mesh);
    state.observation = observation();
    state.observation.margin = margin;
    const int n_side = 14 + 2 * margin.spaxels;
    state.products.put("spaxels", circular_grid(n_side));
    const CubeShape given{n_side, n_side, 17 + 2 * margin.wavelengths};
    const CubeShape made = check_chain({mask.get()}, state, given, 4);
    CHECK(made == CubeShape{14, 14, 17});
    // A cotangent of ones comes back as ones inside the aperture and the band, zero elsewhere.
    CubeCotangent ones{made, std::vector<double>(made.n_voxels(), 1.0)};
    const CubeCotangent back = cube_stages_vjp({mask.get()}, state, ones);
    const SpaxelGrid grid = circular_grid(n_side);
    double total = 0.0;
    for (int iy = 0; iy < n_side; ++iy)
      for (int ix = 0; ix < n_side; ++ix)
        for (int k = 0; k < given.n_wave; ++k) {
          const bool kept = ix >= margin.spaxels && ix < n_side - margin.spaxels &&
                            iy >= margin.spaxels && iy < n_side - margin.spaxels &&
                            k >= margin.wavelengths && k < given.n_wave - margin.wavelengths &&
                            grid.spaxel_in_aperture(ix, iy);
          const double v =
              back.values()[(static_cast<std::size_t>(iy) * n_side + ix) * given.n_wave + k];
          REQUIRE(v == (kept ? 1.0 : 0.0));
          total += v;
        }
    // Some of the field inside the aperture, some outside.
    CHECK(total > 0.0);
    CHECK(total < static_cast<double>(made.n_voxels()));
  }
}

TEST_CASE("adjoint: fibres, the transposes of the sampling and the Shepard reconstruction",
          "[adjoint]") {
  auto mesh = make_mesh(Backend::cpu, 1);
  const FibresParams manga = test::manga_bundle(19);
  const json bundle = {{"n_fibres", 19},
                       {"core_diameter_arcsec", manga.bundle.core_diameter_arcsec},
                       {"pitch_arcsec", manga.bundle.pitch_arcsec},
                       {"dither_x_arcsec", manga.bundle.dither_x_arcsec},
                       {"dither_y_arcsec", manga.bundle.dither_y_arcsec}};
  auto fibres = make_fibres_stage({{"bundle", bundle}}, "stages[0].params");
  RunState state(*mesh);
  state.observation = observation();
  state.observation.axes.spaxel_arcsec = 0.5;
  // 36 x 36 spaxels of 0.5 arcsec: the bundle (~12.5 arcsec across) and spaxels beyond its reach
  // (NaN in run()'s cube, 0 in the map's).
  check_chain({fibres.get()}, state, {36, 36, 5}, 5);
}

TEST_CASE("adjoint: noise is the identity (the expected cube's gradient)", "[adjoint]") {
  auto mesh = make_mesh(Backend::cpu, 1);
  auto noise = make_one({{"stage", "noise"}, {"params", {{"snr", 10}}}});
  RunState state(*mesh);
  state.observation = observation();
  const CubeCotangent x = as_float_values(random_cube({4, 3, 10}, 6));
  run_forward({noise.get()}, state, x);
  REQUIRE(state.cube->variance.size() == x.values().size());
  const CubeCotangent y = random_cube({4, 3, 10}, 7);
  CHECK(std::ranges::equal(cube_stages_vjp({noise.get()}, state, y).values(), y.values()));
  CHECK(std::ranges::equal(cube_stages_jvp({noise.get()}, state, x).values(), x.values()));
}

TEST_CASE("adjoint: the backward pass over flux, psf, lsf, aperture_mask and noise", "[adjoint]") {
  auto mesh = make_mesh(Backend::cpu, 1);
  auto stages = make_stages(json::parse(R"([
      {"stage": "flux", "params": {"unit_scale": 1e-20}},
      {"stage": "foreground_dust", "params": {"ebv_mag": 0.1}},
      {"stage": "psf", "params": {"shape": "moffat", "fwhm_arcsec": 0.8, "beta": 2.5}},
      {"stage": "lsf", "params": {"fwhm_angstrom": 5.0, "template_fwhm_angstrom": 2.0}},
      {"stage": "aperture_mask"},
      {"stage": "noise", "params": {"snr": 20}}])"),
                            "stages", {"cube", "spaxels"});
  RunState state(*mesh);
  state.observation = observation();
  // The margin a run simulates: the sum of the stages' (pipeline/runner.cpp).
  CubeMargin margin;
  for (const auto& s : stages) {
    const CubeMargin m = s->margin(state.observation);
    margin.spaxels += m.spaxels;
    margin.wavelengths += m.wavelengths;
  }
  REQUIRE(margin.spaxels > 0);
  REQUIRE(margin.wavelengths > 0);
  state.observation.margin = margin;
  const int field = 12;
  state.products.put("spaxels", circular_grid(field + 2 * margin.spaxels));
  const CubeShape given{field + 2 * margin.spaxels, field + 2 * margin.spaxels,
                        40 + 2 * margin.wavelengths};
  std::vector<Stage*> chain;
  for (const auto& s : stages) chain.push_back(s.get());
  // The noise is drawn on top of the map checked: run() without it first, then the whole chain.
  std::vector<Stage*> noiseless(chain.begin(), chain.end() - 1);
  CHECK(check_chain(noiseless, state, given, 8) == CubeShape{field, field, 40});
  RunState again(*mesh);
  again.observation = state.observation;
  again.observation.margin = margin;
  again.products.put("spaxels", circular_grid(field + 2 * margin.spaxels));
  const CubeCotangent x = as_float_values(random_cube(given, 9));
  run_forward(chain, again, x);
  const std::vector<const Stage*> all(chain.begin(), chain.end());
  const CubeCotangent y = random_cube(again.cube->shape, 10);
  const CubeCotangent jty = cube_stages_vjp(all, again, y);
  const CubeCotangent jx = cube_stages_jvp(all, again, x);
  REQUIRE(jty.shape == given);
  const double lhs = dot(jx.values(), y.values()), rhs = dot(x.values(), jty.values());
  CHECK(std::abs(lhs - rhs) <= kDotTolerance * std::abs(lhs));
}

TEST_CASE("adjoint: the backward pass refuses a stage without an adjoint, naming it", "[adjoint]") {
  // A cube stage as a stage of a plugin would be: no adjoint (Stage's default).
  struct Opaque final : Stage {
    std::string name() const override { return "opaque"; }
    std::vector<std::string> needs() const override { return {"cube"}; }
    std::vector<Provided> provides() const override { return {}; }
    void run(RunState&) override {}
  };
  auto mesh = make_mesh(Backend::cpu, 1);
  RunState state(*mesh);
  state.observation = observation();
  auto flux = make_one({{"stage", "flux"}});
  Opaque opaque;
  const CubeCotangent x = as_float_values(random_cube({3, 3, 4}, 11));
  run_forward({flux.get(), &opaque}, state, x);
  CHECK_THROWS_WITH(cube_stages_vjp({flux.get(), &opaque}, state, random_cube({3, 3, 4}, 12)),
                    Catch::Contains("stage \"opaque\" has no adjoint"));
  // A cotangent of another shape than the run's cube.
  CHECK_THROWS_AS(cube_stages_vjp({flux.get()}, state, random_cube({3, 3, 5}, 13)),
                  std::invalid_argument);
}
