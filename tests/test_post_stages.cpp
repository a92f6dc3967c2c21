// The stages that act once on the reduced host cube after psum: flux, psf, lsf, noise.
#include <omp.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <sstream>

#include "core/config_error.h"
#include "core/json_params.h"
#include "io/telescope.h"
#include "pipeline/devices.h"
#include "pipeline/registry.h"
#include "stages/aperture_mask/aperture_mask.h"
#include "stages/common/convolution.h"
#include "stages/flux/flux.h"
#include "stages/lsf/lsf.h"
#include "stages/noise/noise.h"
#include "stages/psf/psf.h"
#include "tests/cube_tolerance.h"

using namespace ifusim;

namespace {

// Values in [-0.3, 0.7) from a 64-bit LCG (Knuth's MMIX constants), reproducible test data.
struct RandomValues {
  std::uint64_t state;
  double operator()() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) * 0x1.0p-53 - 0.3;
  }
};

Cube make_cube(int nx, int ny, int n_wave, const std::function<double(int, int, int)>& f) {
  Cube cube;
  cube.shape = {nx, ny, n_wave};
  cube.unit = "Lsun/Angstrom";
  cube.data.resize(cube.shape.n_voxels());
  for (int iy = 0; iy < ny; ++iy)
    for (int ix = 0; ix < nx; ++ix)
      for (int k = 0; k < n_wave; ++k)
        cube.data[(static_cast<std::size_t>(iy) * nx + ix) * n_wave + k] = f(ix, iy, k);
  return cube;
}

// A point source in one spaxel: a continuum plus a narrow line, nothing elsewhere.
Cube point_source(int nx, int ny, int n_wave, int sx, int sy) {
  return make_cube(nx, ny, n_wave, [=](int ix, int iy, int k) {
    if (ix != sx || iy != sy) return 0.0;
    return 1.0e6 * (1.0 + 0.001 * k) + (k == n_wave / 2 ? 5.0e6 : 0.0);
  });
}

Observation observation(double redshift) {
  Observation obs;
  obs.redshift = redshift;
  obs.luminosity_distance_mpc = obs.cosmology.luminosity_distance_mpc(redshift);
  obs.kpc_per_arcsec = redshift > 0 ? obs.cosmology.kpc_per_arcsec(redshift) : 0.0;
  obs.axes.spaxel_arcsec = 0.2;
  obs.axes.wave_start_angstrom = 4750.0;
  obs.axes.wave_step_angstrom = 1.25;
  obs.telescope_lsf_fwhm_angstrom = 2.51;
  obs.template_fwhm_angstrom = 2.51;
  obs.seed = 42;
  return obs;
}

// Runs one stage (made through the registry, as a run would) on a cube.
Cube run_stage(const nlohmann::json& stage, Cube cube, const Observation& obs) {
  auto mesh = make_mesh(Backend::cpu, 1);
  RunState state(*mesh);
  state.observation = obs;
  state.cube = std::move(cube);
  auto stages = make_stages(nlohmann::json::array({stage}), "stages", {"cube"});
  for (const auto& s : stages) s->run(state);
  return std::move(*state.cube);
}

double plane_total(const Cube& cube, int k) {
  double sum = 0;
  for (std::size_t s = 0; s < cube.shape.n_spaxels(); ++s)
    sum += cube.data[s * cube.shape.n_wave + k];
  return sum;
}

void require_finite(const Cube& cube) {
  for (double v : cube.data) REQUIRE(std::isfinite(v));
}

// FWHM (in pixels) of a profile along one line through its maximum at index c, from linear
// interpolation of the half-maximum crossings on both sides.
double measured_fwhm(const std::vector<double>& profile, int c) {
  const double half = 0.5 * profile[c];
  auto crossing = [&](int step) {
    int i = c;
    while (profile[i + step] > half) i += step;
    const double a = profile[i], b = profile[i + step];
    return i + step * (a - half) / (a - b);
  };
  return crossing(+1) - crossing(-1);
}

std::string error_of(const nlohmann::json& stages, std::vector<std::string> available = {"cube"}) {
  try {
    make_stages(stages, "stages", std::move(available));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

// ---------------------------------------------------------------------------------------- flux

TEST_CASE("flux: L_sun / A at z = 0.03 becomes L_sun / (4 pi D_L^2) per A", "[post]") {
  const Observation obs = observation(0.03);
  // Independent numbers (astropy FlatLambdaCDM(H0=67.74, Om0=0.3089, Tcmb0=0)):
  // D_L(0.03) = 135.79605910728884 Mpc, L_sun / (4 pi D_L^2) = 1.7349487143017453e-21 cgs.
  CHECK(obs.luminosity_distance_mpc == Approx(135.79605910728884).epsilon(1e-6));
  CHECK(flux_per_solar_luminosity(obs.luminosity_distance_mpc) ==
        Approx(1.7349487143017453e-21).epsilon(1e-5));
  const double d_cm = obs.luminosity_distance_mpc * 3.0856775814913673e24;
  const double factor = 3.828e33 / (4.0 * std::numbers::pi * d_cm * d_cm);

  const Cube in = point_source(5, 4, 30, 2, 1);
  const Cube out = run_stage({{"stage", "flux"}, {"params", {{"unit_scale", 1}}}}, in, obs);
  require_finite(out);
  CHECK(out.unit == "erg/(s*cm**2*Angstrom)");
  CHECK(out.at(2, 1, 15) > 0.0);
  for (std::size_t i = 0; i < in.data.size(); ++i)
    // The flux stage multiplies in double and rounds once to the cube's float32 (subnormal
    // values at this unit included): bitwise that.
    CHECK(out.data[i] == static_cast<float>(static_cast<double>(in.data[i]) * factor));

  // MUSE's unit, the default: the numbers are 1e20 times larger.
  const Cube muse = run_stage({{"stage", "flux"}}, in, obs);
  CHECK(muse.unit == "10**(-20)*erg/(s*cm**2*Angstrom)");
  CHECK(muse.at(2, 1, 15) == Approx(in.at(2, 1, 15) * factor * 1e20).epsilon(test::kCubeValue));
}

TEST_CASE("flux: a galaxy at z = 0 needs an explicit distance", "[post]") {
  const Observation obs = observation(0.0);
  REQUIRE(obs.luminosity_distance_mpc == 0.0);
  const Cube in = point_source(3, 3, 10, 1, 1);
  try {
    run_stage({{"stage", "flux"}}, in, obs);
    FAIL("a galaxy at z = 0 was given a flux");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("luminosity distance is 0") &&
                             Catch::Contains("stages[0].params.luminosity_distance_mpc"));
  }
  // 10 Mpc: F = L_sun / (4 pi (10 Mpc)^2) = 3.828e33 / (4 pi 9.5214e50) = 3.1994e-19 per L_sun,
  // 31.994 in the default unit of 1e-20 erg/s/cm2/A.
  const Cube out =
      run_stage({{"stage", "flux"}, {"params", {{"luminosity_distance_mpc", 10.0}}}}, in, obs);
  CHECK(out.at(1, 1, 0) / in.at(1, 1, 0) == Approx(3.19937e-19 / 1e-20).epsilon(1e-5));
}

// ----------------------------------------------------------------------------------------- psf

TEST_CASE(
    "psf: a source inside keeps its light, one at the field's edge loses the analytic "
    "fraction beyond it",
    "[post]") {
  // A 15 x 15 field of 0.2 arcsec spaxels simulated with the PSF stage's margin around it, as a
  // run does; aperture_mask crops the margin. The light of a point source in the middle stays
  // whole; one in the field's last column keeps, of the Gaussian integrated over spaxels and
  // truncated at R = ceil(5.26 sigma), the part up to the field's edge:
  //   [erf(1/2 s) + erf((R + 1/2) s)] / (2 erf((R + 1/2) s)),  s = 1 / (sigma sqrt 2).
  const int n = 15;
  Observation obs = observation(0.03);
  obs.axes.spaxel_arcsec = 0.2;
  for (const char* shape : {"gaussian", "moffat"}) {
    const nlohmann::json params = {{"shape", shape}, {"fwhm_arcsec", 0.6}};
    auto psf = make_stage("psf", params, "stages.psf", {});
    obs.margin = psf->margin(obs);
    const int m = obs.margin.spaxels;
    INFO(shape << ": margin " << m << " spaxels");
    CHECK(m == (std::string(shape) == "gaussian" ? 4 : 13));  // 3.03 sigma, 4.53 alpha
    auto observe = [&](int ix, int iy) {
      auto mesh = make_mesh(Backend::cpu, 1);
      RunState state(*mesh);
      state.observation = obs;
      SpaxelGrid grid;
      grid.n_side = n + 2 * m;
      state.products.put("spaxels", grid);
      state.spaxels = {n + 2 * m, n + 2 * m, 2};
      state.cube = point_source(n + 2 * m, n + 2 * m, 2, ix + m, iy + m);
      const double before = plane_total(*state.cube, 0);
      psf->run(state);
      make_stage("aperture_mask", nlohmann::json::object(), "stages.aperture_mask", {})->run(state);
      REQUIRE(state.cube->shape == (CubeShape{n, n, 2}));
      require_finite(*state.cube);
      return plane_total(*state.cube, 0) / before;
    };
    const double at_edge = observe(n - 1, 7);
    if (std::string(shape) == "moffat") {
      // The Moffat's wings reach beyond the field even from its centre: each source keeps the
      // part of its (spaxel-integrated, normalised) kernel that lands inside the field.
      const PsfParams pp = PsfParams::from_json(JsonParams(params, "stages.psf"));
      const Kernel2D kernel = moffat_pixel_kernel(pp, 0.6, pp.beta.max(), 0.2, 2 * n);
      auto inside = [&](int ix, int iy) {
        double sum = 0.0;
        for (int y = 0; y < n; ++y)
          for (int x = 0; x < n; ++x) sum += kernel.at(x - ix, y - iy);
        return sum / kernel.sum;
      };
      CHECK(inside(7, 7) < 0.99);  // the wings beyond the field are lost
      CHECK(observe(7, 7) == Approx(inside(7, 7)).epsilon(test::kCubeValue));
      CHECK(at_edge == Approx(inside(n - 1, 7)).epsilon(test::kCubeValue));
      CHECK(at_edge < 0.7);  // less than the half beyond the edge
      continue;
    }
    CHECK(observe(7, 7) == Approx(1.0).epsilon(test::kCubeValue));
    {
      const double sigma = 3.0 / std::sqrt(8.0 * std::log(2.0));  // 0.6 arcsec in spaxels
      const double s = 1.0 / (sigma * std::sqrt(2.0));
      const double reach = std::ceil(sigma * gaussian_truncation_sigmas(1e-6));
      const double kept =
          (std::erf(0.5 * s) + std::erf((reach + 0.5) * s)) / (2.0 * std::erf((reach + 0.5) * s));
      CHECK(at_edge == Approx(kept).epsilon(test::kCubeValue));
    }
  }
}

TEST_CASE("psf: a point source gets the requested FWHM, Moffat has wider wings", "[post]") {
  Observation obs = observation(0.03);
  obs.axes.spaxel_arcsec = 0.2;
  const int n = 61, c = 30;
  const Cube in = point_source(n, n, 3, c, c);
  const double fwhm_spaxels = 6.0;  // 1.2 arcsec
  auto row = [&](const Cube& cube, int k) {
    std::vector<double> r(n);
    for (int ix = 0; ix < n; ++ix) r[ix] = cube.at(ix, c, k);
    return r;
  };
  const Cube g = run_stage(
      {{"stage", "psf"}, {"params", {{"shape", "gaussian"}, {"fwhm_arcsec", 1.2}}}}, in, obs);
  const Cube m = run_stage(
      {{"stage", "psf"}, {"params", {{"shape", "moffat"}, {"fwhm_arcsec", 1.2}, {"beta", 2.5}}}},
      in, obs);
  require_finite(g);
  require_finite(m);
  for (int k = 0; k < 3; ++k) {
    // FWHM within 5% (pixel integration widens it slightly).
    CHECK(measured_fwhm(row(g, k), c) == Approx(fwhm_spaxels).epsilon(0.05));
    CHECK(measured_fwhm(row(m, k), c) == Approx(fwhm_spaxels).epsilon(0.05));
  }
  // Gaussian second moment: sigma^2 + 1/12 (the target spaxel's box), within 0.5%.
  const double sigma = fwhm_spaxels / std::sqrt(8.0 * std::log(2.0));
  double total = 0, m2 = 0;
  for (int iy = 0; iy < n; ++iy)
    for (int ix = 0; ix < n; ++ix) {
      total += g.at(ix, iy, 1);
      m2 += g.at(ix, iy, 1) * (ix - c) * (ix - c);
    }
  CHECK(m2 / total == Approx(sigma * sigma + 1.0 / 12.0).epsilon(0.005));
  // Wings at 3 FWHM (18 spaxels): the Moffat's follow (1 + (r / alpha)^2)^-beta relative to
  // the peak (within 5%: the peak is averaged over its spaxel); the Gaussian was truncated at
  // 2.23 FWHM (1e-6 of its peak) and is exactly 0 there.
  const double alpha = fwhm_spaxels / (2.0 * std::sqrt(std::pow(2.0, 1.0 / 2.5) - 1.0));
  const double expected = std::pow(1.0 + (18.0 / alpha) * (18.0 / alpha), -2.5);
  const auto mr = row(m, 1), gr = row(g, 1);
  CHECK(mr[c + 18] / mr[c] == Approx(expected).epsilon(0.05));
  CHECK(mr[c - 18] == Approx(mr[c + 18]).epsilon(1e-12));
  CHECK(gr[c + 18] == 0.0);
  // Just inside the Gaussian's truncation (13 spaxels): 2.2e-6 of its peak against 7.7e-3.
  CHECK(mr[c + 13] > 1000.0 * gr[c + 13]);
  CHECK(gr[c + 13] > 0.0);
}

TEST_CASE("psf: a FWHM that varies with wavelength gives each plane its own", "[post]") {
  // Planes at 4750, 7025 and 9300 A; the FWHM falls linearly from 1.4 arcsec at 4000 A to 0.8 at
  // 10000 A (7 to 4 spaxels of 0.2 arcsec).
  Observation obs = observation(0.03);
  obs.axes.wave_start_angstrom = 4750.0;
  obs.axes.wave_step_angstrom = 2275.0;
  const int n = 61, c = 30;
  const Cube in = point_source(n, n, 3, c, c);
  const nlohmann::json curve = {{"wavelength_angstrom", {4000.0, 10000.0}},
                                {"fwhm_arcsec", {1.4, 0.8}}};
  auto fwhm_at = [](double lambda) { return 1.4 - 0.6 * (lambda - 4000.0) / 6000.0; };
  for (const char* shape : {"gaussian", "moffat"}) {
    INFO(shape);
    const Cube out = run_stage(
        {{"stage", "psf"}, {"params", {{"shape", shape}, {"fwhm_arcsec", curve}}}}, in, obs);
    require_finite(out);
    for (int k = 0; k < 3; ++k) {
      const double fwhm = fwhm_at(obs.axes.wavelength_angstrom(k));
      INFO("plane " << k << ", FWHM " << fwhm << " arcsec");
      // The same plane as a constant PSF of that FWHM gives (the FWHM rounded to 0.1%).
      const Cube constant = run_stage(
          {{"stage", "psf"}, {"params", {{"shape", shape}, {"fwhm_arcsec", fwhm}}}}, in, obs);
      double peak = 0, worst = 0;
      for (int iy = 0; iy < n; ++iy)
        for (int ix = 0; ix < n; ++ix) {
          peak = std::max<double>(peak, constant.at(ix, iy, k));
          worst = std::max<double>(worst, std::abs(out.at(ix, iy, k) - constant.at(ix, iy, k)));
        }
      CHECK(worst <= 2e-3 * peak);
      if (std::string(shape) == "gaussian") {
        // Second moment: sigma^2 + 1/12 spaxel^2, within 0.5%.
        const double sigma = fwhm / 0.2 / std::sqrt(8.0 * std::log(2.0));
        double total = 0, m2 = 0;
        for (int iy = 0; iy < n; ++iy)
          for (int ix = 0; ix < n; ++ix) {
            total += out.at(ix, iy, k);
            m2 += out.at(ix, iy, k) * (ix - c) * (ix - c);
          }
        CHECK(m2 / total == Approx(sigma * sigma + 1.0 / 12.0).epsilon(0.005));
      }
    }
  }
}

TEST_CASE("psf: a Moffat beta that varies with wavelength gives each plane its own", "[post]") {
  // Planes at 4750, 7025 and 9300 A; beta rises linearly from 2.0 at 4000 A to 4.0 at 10000 A,
  // alone and together with a FWHM that falls from 1.4 to 0.8 arcsec: each plane must be what a
  // constant PSF of its (FWHM, beta) gives (each rounded to 0.1%: within 2e-3 of the peak), and
  // differ from the plane a constant beta of 2.5 gives (by more than 10 times that).
  Observation obs = observation(0.03);
  obs.axes.wave_start_angstrom = 4750.0;
  obs.axes.wave_step_angstrom = 2275.0;
  const int n = 61, c = 30;
  const Cube in = point_source(n, n, 3, c, c);
  const nlohmann::json beta_curve = {{"wavelength_angstrom", {4000.0, 10000.0}},
                                     {"beta", {2.0, 4.0}}};
  const nlohmann::json fwhm_curve = {{"wavelength_angstrom", {4000.0, 10000.0}},
                                     {"fwhm_arcsec", {1.4, 0.8}}};
  auto beta_at = [](double lambda) { return 2.0 + 2.0 * (lambda - 4000.0) / 6000.0; };
  auto fwhm_at = [](double lambda) { return 1.4 - 0.6 * (lambda - 4000.0) / 6000.0; };
  for (bool fwhm_varies : {false, true}) {
    INFO("FWHM " << (fwhm_varies ? "varies" : "1.0 arcsec"));
    const nlohmann::json fwhm = fwhm_varies ? fwhm_curve : nlohmann::json(1.0);
    const Cube out =
        run_stage({{"stage", "psf"},
                   {"params", {{"shape", "moffat"}, {"fwhm_arcsec", fwhm}, {"beta", beta_curve}}}},
                  in, obs);
    require_finite(out);
    for (int k = 0; k < 3; ++k) {
      const double lambda = obs.axes.wavelength_angstrom(k);
      const double plane_fwhm = fwhm_varies ? fwhm_at(lambda) : 1.0;
      INFO("plane " << k << ", beta " << beta_at(lambda) << ", FWHM " << plane_fwhm);
      auto constant = [&](double beta) {
        return run_stage(
            {{"stage", "psf"},
             {"params", {{"shape", "moffat"}, {"fwhm_arcsec", plane_fwhm}, {"beta", beta}}}},
            in, obs);
      };
      const Cube same = constant(beta_at(lambda)), fixed = constant(2.5);
      double peak = 0, worst = 0, to_fixed = 0;
      for (int iy = 0; iy < n; ++iy)
        for (int ix = 0; ix < n; ++ix) {
          peak = std::max<double>(peak, same.at(ix, iy, k));
          worst = std::max<double>(worst, std::abs(out.at(ix, iy, k) - same.at(ix, iy, k)));
          to_fixed = std::max<double>(to_fixed, std::abs(out.at(ix, iy, k) - fixed.at(ix, iy, k)));
        }
      CHECK(worst <= 2e-3 * peak);
      CHECK(to_fixed > 2e-2 * peak);
    }
  }
  // The margin is that of the smallest beta (the widest wings) with the largest FWHM.
  PsfParams p = PsfParams::from_json(
      JsonParams({{"shape", "moffat"}, {"fwhm_arcsec", fwhm_curve}, {"beta", beta_curve}}, "psf"));
  PsfParams widest = PsfParams::from_json(
      JsonParams({{"shape", "moffat"}, {"fwhm_arcsec", 1.4}, {"beta", 2.0}}, "psf"));
  CHECK(psf_margin_spaxels(p, 0.2) == psf_margin_spaxels(widest, 0.2));
  // Every tabulated beta must be > 1.
  CHECK_THROWS_WITH(
      PsfParams::from_json(
          JsonParams({{"shape", "moffat"},
                      {"fwhm_arcsec", 1.0},
                      {"beta", {{"wavelength_angstrom", {4000.0, 10000.0}}, {"beta", {0.9, 3.0}}}}},
                     "psf")),
      Catch::Contains("psf.beta: expected a number > 1"));
}

TEST_CASE("psf: the separable Gaussian equals the direct zero-padded 2-D sum", "[post]") {
  // out(t) = sum_s in(s) K(t - s) / N, with K the product of the 1-D pixel-integrated kernels and
  // N its whole sum, computed directly.
  const Observation obs = observation(0.03);
  const int nx = 9, ny = 7;
  const Cube in = make_cube(nx, ny, 2, [](int ix, int iy, int k) {
    return 1.0 + (ix * 7 + iy * 3 + k) % 5 + (ix == 0 && iy == 6 ? 100.0 : 0.0);
  });
  const Cube out = run_stage({{"stage", "psf"}, {"params", {{"fwhm_arcsec", 0.5}}}}, in, obs);
  const double sigma = 2.5 / std::sqrt(8.0 * std::log(2.0));
  const Kernel1D kx = gaussian_pixel_kernel(sigma, 1e-6, nx - 1);
  const Kernel1D ky = gaussian_pixel_kernel(sigma, 1e-6, ny - 1);
  for (int k = 0; k < 2; ++k)
    for (int ty = 0; ty < ny; ++ty)
      for (int tx = 0; tx < nx; ++tx) {
        double expected = 0;
        for (int sy = 0; sy < ny; ++sy)
          for (int sx = 0; sx < nx; ++sx)
            expected += in.at(sx, sy, k) * kx.at(tx - sx) * ky.at(ty - sy) / (kx.sum * ky.sum);
        CHECK(out.at(tx, ty, k) == Approx(expected).epsilon(test::kCubeValue));
      }
}

TEST_CASE(
    "convolution: in place (float) is bitwise the out-of-place double sum, rounded, any thread "
    "count",
    "[post]") {
  // convolve_axis (a second array, targets summed one at a time) is the reference; the in-place
  // version must give the same sums in the same order. Random data with negative values and
  // exact zeros; shapes wider and narrower than a block of lanes, an axis shorter than the
  // kernel, inner = 1 (across rows) and inner > 1, one kernel and one per source pixel.
  RandomValues next{12345};
  struct Shape {
    std::size_t outer;
    int n;
    std::size_t inner;
  };
  for (const Shape sh :
       {Shape{37, 41, 1}, Shape{3, 29, 300}, Shape{1, 7, 1000}, Shape{300, 3, 1}, Shape{2, 1, 5}}) {
    // Values a float holds exactly (the cube's type, data/datacube.h), so that the double
    // reference sees the very inputs the in-place float version does.
    std::vector<double> in(sh.outer * sh.n * sh.inner);
    for (double& v : in) v = next() < 0.0 ? 0.0 : static_cast<float>(next());
    std::vector<std::vector<Kernel1D>> cases = {{gaussian_pixel_kernel(1.7, 1e-6, sh.n - 1)},
                                                {gaussian_pixel_kernel(0.0, 1e-6, 4)}};
    std::vector<Kernel1D> per_pixel;
    for (int j = 0; j < sh.n; ++j)
      per_pixel.push_back(gaussian_pixel_kernel(0.3 + 0.11 * j, 1e-6, sh.n - 1));
    cases.push_back(per_pixel);
    for (const auto& kernels : cases) {
      std::vector<double> expected;
      convolve_axis(in, expected, sh.outer, sh.n, sh.inner, kernels);
      for (int threads : {1, 2, 3}) {
        std::vector<float> got(in.begin(), in.end());
        const int before = omp_get_max_threads();
        omp_set_num_threads(threads);
        convolve_axis_in_place(got, sh.outer, sh.n, sh.inner, kernels);
        omp_set_num_threads(before);
        INFO("outer " << sh.outer << ", n " << sh.n << ", inner " << sh.inner << ", kernels "
                      << kernels.size() << ", threads " << threads);
        REQUIRE(got.size() == expected.size());
        std::size_t differ = 0, nan = 0, nonzero = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          // Each output is the double sum rounded once to float.
          differ += got[i] != static_cast<float>(expected[i]);
          nan += std::isnan(got[i]);
          nonzero += got[i] != 0.0;
        }
        CHECK(differ == 0);
        CHECK(nan == 0);
        CHECK(nonzero > got.size() / 4);
      }
    }
  }
}

TEST_CASE(
    "convolution by lane: each plane's kernel, bitwise each group of planes convolved on its own, "
    "any thread count, and the correlation is its transpose",
    "[post]") {
  // A PSF whose FWHM changes with wavelength: the planes (a period of the inner index) fall in
  // groups that share a kernel. The reference gathers each group's lanes into an array of their
  // own and convolves it with convolve_axis_in_place (bitwise its double sum, the test above).
  // Layouts of the psf's two passes: (ny, nx, planes) and (1, ny, nx * planes); and inner = 1.
  RandomValues next{777};
  struct Shape {
    std::size_t outer;
    int n;
    std::size_t inner, period;
  };
  for (const Shape sh :
       {Shape{7, 23, 300, 300}, Shape{1, 19, 5 * 70, 70}, Shape{40, 13, 1, 1}, Shape{3, 4, 9, 9}}) {
    // Kernels from narrower than a pixel to wider than the axis (capped), and planes assigned in
    // runs and singly, as wavelength groups are.
    std::vector<Kernel1D> kernels;
    for (double sigma : {0.0, 0.6, 1.7, 3.2, 40.0})
      kernels.push_back(gaussian_pixel_kernel(sigma, 1e-6, sh.n - 1));
    std::vector<int> kernel_of_plane(sh.period);
    for (std::size_t p = 0; p < sh.period; ++p)
      kernel_of_plane[p] = static_cast<int>((p * p / 7 + p / 3) % kernels.size());
    std::vector<float> in(sh.outer * sh.n * sh.inner);
    for (float& v : in) v = next() < 0.0 ? 0.0f : static_cast<float>(next());
    // The reference: each kernel's lanes gathered, convolved, scattered.
    std::vector<float> expected = in;
    for (std::size_t q = 0; q < kernels.size(); ++q) {
      std::vector<std::size_t> lanes;
      for (std::size_t i = 0; i < sh.inner; ++i)
        if (kernel_of_plane[i % sh.period] == static_cast<int>(q)) lanes.push_back(i);
      if (lanes.empty()) continue;
      std::vector<float> group(sh.outer * sh.n * lanes.size());
      auto at = [&](std::size_t o, int j, std::size_t i) { return (o * sh.n + j) * sh.inner + i; };
      for (std::size_t o = 0; o < sh.outer; ++o)
        for (int j = 0; j < sh.n; ++j)
          for (std::size_t l = 0; l < lanes.size(); ++l)
            group[(o * sh.n + j) * lanes.size() + l] = expected[at(o, j, lanes[l])];
      convolve_axis_in_place(group, sh.outer, sh.n, lanes.size(), {kernels[q]});
      for (std::size_t o = 0; o < sh.outer; ++o)
        for (int j = 0; j < sh.n; ++j)
          for (std::size_t l = 0; l < lanes.size(); ++l)
            expected[at(o, j, lanes[l])] = group[(o * sh.n + j) * lanes.size() + l];
    }
    for (int threads : {1, 2, 3}) {
      std::vector<float> got = in;
      const int before = omp_get_max_threads();
      omp_set_num_threads(threads);
      convolve_axis_in_place_by_lane(got, sh.outer, sh.n, sh.inner, kernels, kernel_of_plane);
      omp_set_num_threads(before);
      INFO("outer " << sh.outer << ", n " << sh.n << ", inner " << sh.inner << ", threads "
                    << threads);
      std::size_t differ = 0, nan = 0, nonzero = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        differ += got[i] != expected[i];
        nan += std::isnan(got[i]);
        nonzero += got[i] != 0.0f;
      }
      CHECK(differ == 0);
      CHECK(nan == 0);
      CHECK(nonzero > got.size() / 4);
    }
    // The transpose, in double: <A x, y> = <x, A^T y>.
    std::vector<double> x(in.size()), y(in.size());
    for (double& v : x) v = next();
    for (double& v : y) v = next();
    std::vector<double> ax = x, aty = y;
    convolve_axis_in_place_by_lane(ax, sh.outer, sh.n, sh.inner, kernels, kernel_of_plane);
    correlate_axis_in_place_by_lane(aty, sh.outer, sh.n, sh.inner, kernels, kernel_of_plane);
    double lhs = 0, rhs = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      lhs += ax[i] * y[i];
      rhs += x[i] * aty[i];
    }
    CHECK(std::abs(lhs - rhs) <= 1e-12 * std::abs(lhs));
  }
}

TEST_CASE("psf: the Moffat by FFT equals the direct zero-padded 2-D sum", "[post]") {
  // 37 planes: two whole batches of 16 (8 pairs, each pair through one complex FFT), then two
  // pairs and one plane alone. Tolerance: FFT rounding, 1e-12 of the plane's largest value.
  const Observation obs = observation(0.03);
  const int nx = 11, ny = 7, n_wave = 37;
  const Cube in = make_cube(nx, ny, n_wave, [](int ix, int iy, int k) {
    return 1.0 + (ix * 7 + iy * 3 + k) % 5 + (ix == 10 && iy == 0 ? 100.0 * (k + 1) : 0.0);
  });
  const nlohmann::json params = {{"shape", "moffat"}, {"fwhm_arcsec", 0.5}, {"beta", 3.0}};
  const Cube out = run_stage({{"stage", "psf"}, {"params", params}}, in, obs);
  require_finite(out);
  const Kernel2D kernel = moffat_pixel_kernel(PsfParams::from_json(JsonParams(params, "p")), 0.5,
                                              3.0, 0.2, std::max(nx, ny) - 1);
  REQUIRE(kernel.radius == 10);  // 24.4 spaxels at 1e-6 of the peak, capped by the cube
  for (int k = 0; k < n_wave; ++k) {
    double peak = 0;
    for (int s = 0; s < nx * ny; ++s) peak = std::max<double>(peak, in.data[s * n_wave + k]);
    for (int ty = 0; ty < ny; ++ty)
      for (int tx = 0; tx < nx; ++tx) {
        double expected = 0;
        for (int sy = 0; sy < ny; ++sy)
          for (int sx = 0; sx < nx; ++sx)
            expected += in.at(sx, sy, k) * kernel.at(tx - sx, ty - sy) / kernel.sum;
        // FFT rounding (1e-12 of the peak) and the float cube's rounding of each value (relative
        // 6e-8, data/datacube.h): 1e-7 of the plane's largest value.
        CHECK(out.at(tx, ty, k) == Approx(expected).margin(1e-7 * peak));
      }
  }
  // The same for any thread count.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Cube one = run_stage({{"stage", "psf"}, {"params", params}}, in, obs);
  omp_set_num_threads(threads);
  CHECK(one.data == out.data);
}

TEST_CASE("psf: needs the spaxel size and refuses a noisy cube", "[post]") {
  Observation obs = observation(0.03);
  obs.axes.spaxel_arcsec = 0.0;
  const nlohmann::json stage = {{"stage", "psf"}, {"params", {{"fwhm_arcsec", 0.8}}}};
  CHECK_THROWS_WITH(run_stage(stage, point_source(5, 5, 4, 2, 2), obs),
                    Catch::Contains("spaxel size"));
  Cube noisy = point_source(5, 5, 4, 2, 2);
  noisy.variance.assign(noisy.data.size(), 1.0);
  CHECK_THROWS_WITH(run_stage(stage, noisy, observation(0.03)),
                    Catch::Contains("already has noise"));
}

// ----------------------------------------------------------------------------------------- lsf

TEST_CASE("lsf: quadrature subtraction of the templates' resolution", "[post]") {
  // sigma^2 = (FWHM_tel^2 - (FWHM_lib (1 + z))^2) / (8 ln 2)
  const double eight_ln2 = 8.0 * std::log(2.0);
  CHECK(lsf_kernel_sigma_angstrom(2.51, 2.51, 0.0) == 0.0);
  CHECK(lsf_kernel_sigma_angstrom(5.0, 3.0, 0.0) == Approx(std::sqrt(16.0 / eight_ln2)));
  // z = 0.5: 3 A at rest is 4.5 A observed; sqrt(25 - 20.25) = 2.1794 A FWHM.
  CHECK(lsf_kernel_sigma_angstrom(5.0, 3.0, 0.5) == Approx(2.179449 / std::sqrt(eight_ln2)));
  // z = 1: 6 A observed, coarser than 5 A.
  CHECK(lsf_kernel_sigma_angstrom(5.0, 3.0, 1.0) < 0.0);
}

TEST_CASE("lsf: conserves light inside the band, loses what leaves its ends, broadens a line",
          "[post]") {
  const int n_wave = 401, line = 200;
  Cube in = make_cube(3, 2, n_wave, [&](int ix, int iy, int k) {
    if (ix == 1 && iy == 1) return k == line ? 1.0e6 : 0.0;                    // a delta line
    if (ix == 0 && iy == 0) return (k == 0 || k == n_wave - 1) ? 5.0e5 : 0.0;  // at both ends
    return 100.0 + 0.5 * k + (k == 37 ? 1.0e4 : 0.0);                          // continuum + line
  });
  for (double z : {0.0, 0.5}) {
    Observation obs = observation(z);
    obs.axes.wave_step_angstrom = 1.25;
    obs.telescope_lsf_fwhm_angstrom = 5.0;
    obs.template_fwhm_angstrom = 3.0;
    const double sigma_angstrom = lsf_kernel_sigma_angstrom(5.0, 3.0, z);
    REQUIRE(sigma_angstrom > 0.0);
    const Cube out = run_stage({{"stage", "lsf"}}, in, obs);
    require_finite(out);
    INFO("z = " << z);
    // Zero padding (convolution.h): each pixel keeps the part of its kernel inside the band. The
    // delta in the middle (spaxel 4) keeps all of its light; a line in an end pixel (spaxel 0)
    // keeps [erf(1/2 s) + erf((R + 1/2) s)] / (2 erf((R + 1/2) s)); every spaxel keeps
    // sum_j in(j) sum_{k in band} K(k - j) / K.sum.
    const double sigma = sigma_angstrom / 1.25, s_erf = 1.0 / (sigma * std::sqrt(2.0));
    const Kernel1D kernel = gaussian_pixel_kernel(sigma, 1e-6, n_wave - 1);
    const double reach = kernel.radius;
    const double kept = (std::erf(0.5 * s_erf) + std::erf((reach + 0.5) * s_erf)) /
                        (2.0 * std::erf((reach + 0.5) * s_erf));
    for (int s = 0; s < 6; ++s) {
      double before = 0, after = 0, expected = 0;
      for (int j = 0; j < n_wave; ++j) {
        before += in.data[s * n_wave + j];
        after += out.data[s * n_wave + j];
        double inside = 0;
        for (int k = std::max(0, j - kernel.radius); k <= std::min(n_wave - 1, j + kernel.radius);
             ++k)
          inside += kernel.at(k - j);
        expected += in.data[s * n_wave + j] * inside / kernel.sum;
      }
      CHECK(after == Approx(expected).epsilon(test::kCubeValue));
      if (s == 4) CHECK(after == Approx(before).epsilon(test::kCubeValue));
      if (s == 0) CHECK(after == Approx(kept * before).epsilon(test::kCubeValue));
    }
    // Second moment of the broadened delta: sigma^2 + 1/12 pixel^2 (pixel integration).
    double total = 0, mean = 0, m2 = 0;
    for (int k = 0; k < n_wave; ++k) {
      total += out.at(1, 1, k);
      mean += out.at(1, 1, k) * k;
    }
    mean /= total;
    for (int k = 0; k < n_wave; ++k) m2 += out.at(1, 1, k) * (k - mean) * (k - mean);
    const double sigma_pixels = sigma_angstrom / 1.25;
    CHECK(mean == Approx(line).margin(1e-9));
    CHECK(std::sqrt(m2 / total - 1.0 / 12.0) == Approx(sigma_pixels).epsilon(0.005));
    // A linear continuum stays linear away from the ends (the kernel is symmetric, sums to 1).
    CHECK(out.at(2, 0, 300) == Approx(in.at(2, 0, 300)).epsilon(1e-12));
  }
}

TEST_CASE("lsf: no broadening when resolutions match, a warning when the cube is coarser",
          "[post]") {
  const Cube in = point_source(4, 3, 200, 1, 2);
  Observation obs = observation(0.0);  // FWHM_tel = FWHM_lib = 2.51 A at z = 0
  CHECK(run_stage({{"stage", "lsf"}}, in, obs).data == in.data);
  obs = observation(0.2);  // 2.51 x 1.2 = 3.01 A observed > 2.51 A
  CHECK(run_stage({{"stage", "lsf"}}, in, obs).data == in.data);
  // An override of the instrument's FWHM makes it broaden.
  const Cube wide = run_stage({{"stage", "lsf"}, {"params", {{"fwhm_angstrom", 6.0}}}}, in, obs);
  CHECK(wide.at(1, 2, 100) < 0.5 * in.at(1, 2, 100));
  obs.telescope_lsf_fwhm_angstrom = 0.0;
  CHECK_THROWS_WITH(run_stage({{"stage", "lsf"}}, in, obs),
                    Catch::Contains("stages[0].params.fwhm_angstrom"));
}

TEST_CASE("lsf: a template resolution that varies with wavelength is removed per wavelength",
          "[post]") {
  // Templates of 2 A FWHM at rest 3000 A rising linearly to 4 A at 6000 A, seen at z = 0.5 by an
  // instrument of 5 A: at observed lambda the templates have FWHM_lib(lambda / 1.5) x 1.5, and a
  // delta line there must come out with sqrt(5^2 - that^2) (within 1%). From 7500 A (rest
  // 5000 A, 3.33 A x 1.5 = 5 A) on they are coarser: left as they are, one warning with that
  // range.
  constexpr double z = 0.5;
  const ResolutionCurve lib({3000.0, 6000.0}, {2.0, 4.0});
  const int n_wave = 3601;                           // 4500 .. 9000 A
  const std::vector<int> lines = {240, 1680, 3200};  // 4800, 6600 and 8500 A
  const Cube in = make_cube(1, 1, n_wave, [&](int, int, int k) {
    return std::find(lines.begin(), lines.end(), k) != lines.end() ? 1.0e6 : 0.0;
  });
  Observation obs = observation(z);
  obs.axes.wave_start_angstrom = 4500.0;
  obs.telescope_lsf_fwhm_angstrom = 5.0;
  obs.template_fwhm_angstrom = lib;

  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  const Cube out = run_stage({{"stage", "lsf"}}, in, obs);
  spdlog::set_default_logger(previous);
  require_finite(out);

  for (int line : {240, 1680}) {
    const double lambda = obs.axes.wavelength_angstrom(line);
    const double lib_observed = lib.at(lambda / (1 + z)) * (1 + z);
    const double expected = std::sqrt(25.0 - lib_observed * lib_observed);
    double total = 0, mean = 0, m2 = 0;
    for (int k = line - 30; k <= line + 30; ++k) {
      total += out.at(0, 0, k);
      mean += out.at(0, 0, k) * k;
    }
    mean /= total;
    for (int k = line - 30; k <= line + 30; ++k) m2 += out.at(0, 0, k) * (k - mean) * (k - mean);
    const double fwhm = std::sqrt(m2 / total - 1.0 / 12.0) * 1.25 * std::sqrt(8.0 * std::log(2.0));
    INFO("line at " << lambda << " A: templates " << lib_observed << " A observed");
    CHECK(total == Approx(1.0e6).epsilon(test::kCubeValue));
    CHECK(fwhm == Approx(expected).epsilon(0.01));
  }
  // 4800 A: 3.84 A; 6600 A: 2.37 A (a constant 2 A library would give 4 A at both).
  CHECK(std::sqrt(25.0 - std::pow(lib.at(4400.0) * 1.5, 2)) < 2.4);
  CHECK(out.at(0, 0, 3200) == in.at(0, 0, 3200));  // coarser templates: untouched
  const std::string text = log.str();
  INFO(text);
  std::size_t warnings = 0;
  for (std::size_t at = text.find("lsf: from"); at != std::string::npos;
       at = text.find("lsf: from", at + 1))
    ++warnings;
  CHECK(warnings == 1);
  CHECK_THAT(text, Catch::Contains("from 7501.25 to 9000 A"));

  // The stage's override, as a table, does the same.
  Observation constant = obs;
  constant.template_fwhm_angstrom = 0.0;
  const Cube overridden =
      run_stage({{"stage", "lsf"},
                 {"params",
                  {{"template_fwhm_angstrom",
                    {{"wavelength_angstrom", {3000.0, 6000.0}}, {"fwhm_angstrom", {2.0, 4.0}}}}}}},
                in, constant);
  CHECK(overridden.data == out.data);
  CHECK_THROWS_WITH(
      run_stage({{"stage", "lsf"},
                 {"params",
                  {{"template_fwhm_angstrom",
                    {{"wavelength_angstrom", {6000.0, 3000.0}}, {"fwhm_angstrom", {2.0, 4.0}}}}}}},
                in, constant),
      Catch::Contains("stages[0].params.template_fwhm_angstrom.wavelength_angstrom"));
}

// --------------------------------------------------------------------------------------- noise

namespace {

// 40 x 40 spaxels x 100 pixels = 160000 voxels: a galaxy-like exponential disc with a line.
Cube noiseless_galaxy() {
  return make_cube(40, 40, 100, [](int ix, int iy, int k) {
    const double r = std::hypot(ix - 19.5, iy - 19.5);
    return 50.0 * std::exp(-r / 6.0) * (1.0 + 0.002 * k) +
           (k == 60 ? 30.0 * std::exp(-r / 4.0) : 0.0);
  });
}

const nlohmann::json kNoise = {{"stage", "noise"}, {"params", {{"snr", 15.0}}}};

}  // namespace

TEST_CASE("noise: reproducible per seed, independent of the thread count", "[post]") {
  const Cube clean = noiseless_galaxy();
  const Observation obs = observation(0.03);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Cube one_thread = run_stage(kNoise, clean, obs);
  omp_set_num_threads(4);
  const Cube four_threads = run_stage(kNoise, clean, obs);
  omp_set_num_threads(threads);
  const Cube again = run_stage(kNoise, clean, obs);
  require_finite(one_thread);
  CHECK(one_thread.data == four_threads.data);
  CHECK(one_thread.data == again.data);
  CHECK(one_thread.variance == again.variance);
  CHECK(one_thread.data != clean.data);

  Observation other = obs;
  other.seed = 43;
  const Cube reseeded = run_stage(kNoise, clean, other);
  const Cube by_param =
      run_stage({{"stage", "noise"}, {"params", {{"snr", 15.0}, {"seed", 43}}}}, clean, obs);
  CHECK(by_param.data == reseeded.data);
  std::size_t same = 0;
  for (std::size_t i = 0; i < clean.data.size(); ++i) same += reseeded.data[i] == again.data[i];
  CHECK(same == 0);
  CHECK(reseeded.variance == again.variance);  // the model does not depend on the seed
}

TEST_CASE("noise: pulls are standard normal and the variance follows the model", "[post]") {
  const Cube clean = noiseless_galaxy();
  const Cube noisy = run_stage(kNoise, clean, observation(0.03));
  REQUIRE(noisy.variance.size() == clean.data.size());
  const double n = static_cast<double>(clean.data.size());
  REQUIRE(n > 1e5);
  double sum = 0, sum2 = 0, beyond3 = 0;
  for (std::size_t i = 0; i < clean.data.size(); ++i) {
    REQUIRE(noisy.variance[i] > 0.0);
    const double pull = (noisy.data[i] - clean.data[i]) / std::sqrt(noisy.variance[i]);
    REQUIRE(std::isfinite(pull));
    sum += pull;
    sum2 += pull * pull;
    beyond3 += std::abs(pull) > 3.0;
  }
  const double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
  // Statistical errors for N = 160000: mean 1/sqrt(N) = 0.0025, sd 1/sqrt(2N) = 0.0018,
  // P(|z| > 3) = 0.0027 +- 0.00013; tolerances of 5 sigma.
  CHECK(std::abs(mean) < 5.0 * 0.0025);
  CHECK(std::abs(sd - 1.0) < 5.0 * 0.0018);
  CHECK(beyond3 / n == Approx(0.0027).margin(5 * 0.00013));

  // The variance is sigma_bg^2 + S a, with S_ref the median bright-spaxel mean.
  const double s_ref = noise_reference_level(clean, 0.1);
  const double var_ref = (s_ref / 15.0) * (s_ref / 15.0);
  for (std::size_t i = 0; i < clean.data.size(); i += 97)
    CHECK(noisy.variance[i] == Approx(0.5 * var_ref + clean.data[i] * 0.5 * var_ref / s_ref));
  // Every voxel bitwise the model made one voxel at a time, in double and rounded once (the stage
  // makes it in blocks, in vector registers: stages/noise/noise_blocks.h), with seed 42's draws.
  const double sigma_ref = s_ref / 15.0;
  const double var_bg = 0.5 * sigma_ref * sigma_ref, shot = 0.5 * sigma_ref * sigma_ref / s_ref;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < clean.data.size(); ++i) {
    const double signal = clean.data[i];
    const double var = var_bg + std::max(signal, 0.0) * shot;
    differ += noisy.variance[i] != static_cast<float>(var);
    differ += noisy.data[i] != static_cast<float>(signal + std::sqrt(var) * counter_normal(42, i));
  }
  CHECK(differ == 0);
}

TEST_CASE("noise: the counter-based Ziggurat draws standard normals", "[post][noise]") {
  // 2e6 draws of counter_normal (stages/noise/random.h), against the normal distribution's own
  // numbers: moments, the share beyond the Ziggurat's tail edge r = 3.6541528853610088 (drawn by
  // a path of its own) and a chi-square over 100 bins of equal probability (erfc).
  constexpr std::size_t n = 2'000'000;
  std::vector<double> z(n);
  for (std::size_t i = 0; i < n; ++i) z[i] = counter_normal(7, i);
  double m1 = 0, m2 = 0, m3 = 0, m4 = 0, beyond_r = 0, beyond_1 = 0, biggest = 0;
  constexpr int n_bins = 100;
  std::vector<double> counts(n_bins, 0.0);
  // Bin edges: the normal's quantiles at j / n_bins, found by bisection on Phi(x) = erfc(-x /
  // sqrt 2) / 2.
  auto phi = [](double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); };
  std::vector<double> edges(n_bins - 1);
  for (int j = 1; j < n_bins; ++j) {
    double lo = -10, hi = 10;
    for (int it = 0; it < 100; ++it)
      (phi(0.5 * (lo + hi)) < double(j) / n_bins ? lo : hi) = 0.5 * (lo + hi);
    edges[j - 1] = 0.5 * (lo + hi);
  }
  for (const double v : z) {
    REQUIRE(std::isfinite(v));
    m1 += v;
    m2 += v * v;
    m3 += v * v * v;
    m4 += v * v * v * v;
    beyond_r += std::abs(v) > 3.6541528853610088;
    beyond_1 += std::abs(v) > 1.0;
    biggest = std::max<double>(biggest, std::abs(v));
    counts[std::upper_bound(edges.begin(), edges.end(), v) - edges.begin()] += 1;
  }
  const double dn = static_cast<double>(n);
  m1 /= dn, m2 /= dn, m3 /= dn, m4 /= dn;
  // Statistical errors for N = 2e6 (5 sigma): mean 1/sqrt(N) = 7.1e-4, E[z^2] sqrt(2/N) = 1e-3,
  // E[z^3] sqrt(15/N) = 2.7e-3, E[z^4] sqrt(96/N) = 6.9e-3.
  CHECK(std::abs(m1) < 5 * 7.1e-4);
  CHECK(std::abs(m2 - 1.0) < 5 * 1.0e-3);
  CHECK(std::abs(m3) < 5 * 2.7e-3);
  CHECK(std::abs(m4 - 3.0) < 5 * 6.9e-3);
  // P(|z| > 1) = 0.31731 (sd 3.3e-4), P(|z| > r) = 2.581e-4 (516 expected, sd 23).
  CHECK(beyond_1 / dn == Approx(0.3173105).margin(5 * 3.3e-4));
  CHECK(beyond_r ==
        Approx(dn * std::erfc(3.6541528853610088 / std::numbers::sqrt2)).margin(5 * 23));
  CHECK(biggest > 4.5);  // the tail reaches beyond r (P(max > 4.5) = 1 - (1 - 6.8e-6)^N ~ 1)
  // Chi-square with 99 degrees of freedom: mean 99, sd 14; 99 + 5 sd.
  double chi2 = 0;
  const double expected = dn / n_bins;
  for (double c : counts) chi2 += (c - expected) * (c - expected) / expected;
  CHECK(chi2 < 99 + 5 * 14);
  // The tail's shape (its own path, Marsaglia 1964): of 2e7 draws ~5161 lie beyond r, and of
  // those a share Q(r + 0.5) / Q(r) = 0.12653 beyond r + 0.5 (sd 0.0046; an exponential tail
  // without the rejection step would give exp(-r / 2) = 0.161).
  double tail = 0, far = 0;
  for (std::size_t i = 0; i < 20'000'000; ++i) {
    const double a = std::abs(counter_normal(11, i));
    tail += a > 3.6541528853610088;
    far += a > 3.6541528853610088 + 0.5;
  }
  REQUIRE(tail > 4000);
  CHECK(far / tail == Approx(0.1265325).margin(5 * 0.0046));
  // Counter-based: a draw depends on its index alone, not on what was drawn before.
  CHECK(counter_normal(7, 123456) == z[123456]);
  CHECK(counter_normal(8, 123456) != z[123456]);
}

TEST_CASE("noise: the reference level is the median bright-spaxel mean", "[post]") {
  // Spaxel s has mean signal s + 1 (s = 0..99), brightest 100; threshold 0.1 keeps 10..100
  // (91 spaxels), whose median is 55.
  const Cube cube = make_cube(
      10, 10, 4, [](int ix, int iy, int k) { return iy * 10 + ix + 1.0 + (k % 2 ? 0.5 : -0.5); });
  CHECK(noise_reference_level(cube, 0.1) == 55.0);
  CHECK(noise_reference_level(cube, 0.0) == 50.0);  // lower middle of 1..100
  const Cube empty = make_cube(3, 3, 4, [](int, int, int) { return 0.0; });
  CHECK_THROWS_WITH(run_stage(kNoise, empty, observation(0.03)),
                    Catch::Contains("stages[0].params.reference"));
}

TEST_CASE("noise: the achieved S/N at the reference level matches the target", "[post]") {
  // A uniform cube at S = 7: S_ref = 7, and every voxel should have S/N = target.
  const Cube flat = make_cube(40, 40, 80, [](int, int, int) { return 7.0; });
  auto achieved = [&](const nlohmann::json& params) {
    const Cube noisy = run_stage({{"stage", "noise"}, {"params", params}}, flat, observation(0.03));
    double sum = 0, sum2 = 0;
    const double n = static_cast<double>(noisy.data.size());
    for (double v : noisy.data) {
      sum += v;
      sum2 += v * v;
    }
    const double mean = sum / n;
    return mean / std::sqrt(sum2 / n - mean * mean);
  };
  // 128000 voxels: the measured S/N's statistical error is 1/sqrt(2N) = 0.2%; tolerance 1%.
  CHECK(achieved({{"snr", 20.0}}) == Approx(20.0).epsilon(0.01));
  CHECK(achieved({{"snr", 20.0}, {"background_fraction", 1.0}}) == Approx(20.0).epsilon(0.01));
  CHECK(achieved({{"snr", 20.0}, {"background_fraction", 0.0}}) == Approx(20.0).epsilon(0.01));
  // Away from the reference: sigma_ref = 14 / 8 = 1.75, and at S = 7 the variance is
  // 0.5 sigma_ref^2 + 7 x 0.5 sigma_ref^2 / 14 = 2.2969, so S/N = 7 / 1.5156 = 4.6188.
  CHECK(achieved({{"snr", 8.0}, {"reference", 14.0}}) == Approx(4.6188).epsilon(0.01));
  // Per Angstrom with 1.25 A pixels: S/N per pixel = 20 sqrt(1.25) = 22.36.
  CHECK(achieved({{"snr", 20.0}, {"per", "angstrom"}}) == Approx(22.3607).epsilon(0.01));
}

// ----------------------------------------------------------------------------- order, params

TEST_CASE("post stages: parameter errors name the key path", "[post]") {
  using nlohmann::json;
  const json ok = json::parse(R"([{"stage": "flux"}, {"stage": "lsf"},
                                   {"stage": "noise", "params": {"snr": 10}}])");
  CHECK(error_of(ok) == "(no error)");
  auto with = [&](json stage) {
    json s = ok;
    s.push_back(stage);
    return error_of(s);
  };
  CHECK_THAT(with(json::parse(R"({"stage": "psf", "params": {"fwhm_arcsec": -1}})")),
             Catch::StartsWith("stages[3].params.fwhm_arcsec: expected a number > 0"));
  CHECK_THAT(with(json::parse(R"({"stage": "psf", "params": {}})")),
             Catch::StartsWith("stages[3].params.fwhm_arcsec: expected a number"));
  CHECK_THAT(with(json::parse(R"({"stage": "psf", "params": {"fwhm_arcsec": 1, "beta": 3}})")),
             Catch::StartsWith("stages[3].params.beta: only valid with \"shape\": \"moffat\""));
  CHECK_THAT(
      with(json::parse(
          R"({"stage": "psf", "params": {"shape": "moffat", "fwhm_arcsec": 1, "beta": 1}})")),
      Catch::StartsWith("stages[3].params.beta: expected a number > 1"));
  CHECK_THAT(
      with(json::parse(R"({"stage": "psf", "params": {"shape": "airy", "fwhm_arcsec": 1}})")),
      Catch::StartsWith("stages[3].params.shape: expected one of \"gaussian\", \"moffat\""));
  CHECK_THAT(with(json::parse(R"({"stage": "lsf", "params": {"fwhm": 2.5}})")),
             Catch::StartsWith("stages[3].params.fwhm: unknown key"));
  CHECK_THAT(with(json::parse(R"({"stage": "lsf", "params": {"fwhm_angstrom": 0}})")),
             Catch::StartsWith("stages[3].params.fwhm_angstrom: expected a number > 0"));
  CHECK_THAT(with(json::parse(R"({"stage": "flux", "params": {"unit_scale": 0}})")),
             Catch::StartsWith("stages[3].params.unit_scale: expected a power of ten"));
  CHECK_THAT(with(json::parse(R"({"stage": "flux", "params": {"unit_scale": 2e-20}})")),
             Catch::StartsWith("stages[3].params.unit_scale: expected a power of ten"));
  CHECK_THAT(
      with(json::parse(R"({"stage": "flux", "params": {"luminosity_distance_mpc": "far"}})")),
      Catch::StartsWith("stages[3].params.luminosity_distance_mpc: expected a finite number"));
  CHECK_THAT(with(json::parse(R"({"stage": "noise", "params": {"snr": 10, "per": "second"}})")),
             Catch::StartsWith("stages[3].params.per: expected one of \"pixel\", \"angstrom\""));
  CHECK_THAT(with(json::parse(R"({"stage": "noise", "params": {"snr": 10, "seed": 1.5}})")),
             Catch::StartsWith("stages[3].params.seed: expected an integer"));
  CHECK_THAT(
      with(json::parse(R"({"stage": "noise", "params": {"snr": 10, "background_fraction": 2}})")),
      Catch::StartsWith("stages[3].params.background_fraction: expected a number in [0, 1]"));
  CHECK_THAT(with(json::parse(R"({"stage": "noise"})")),
             Catch::StartsWith("stages[3].params.snr: expected a number"));
  // Order: nothing provides the cube before psum.
  CHECK_THAT(error_of(ok, {}), Catch::Contains("stages[0]: stage \"flux\" needs cube"));
}

TEST_CASE("post stages: the whole chain flux, psf, lsf, noise", "[post]") {
  const Observation obs = observation(0.03);
  auto mesh = make_mesh(Backend::cpu, 1);
  RunState state(*mesh);
  state.observation = obs;
  state.cube = point_source(21, 21, 300, 10, 10);
  const double before = plane_total(*state.cube, 150);
  const auto stages = make_stages(nlohmann::json::parse(R"([
      {"stage": "flux", "params": {"unit_scale": 1e-20}},
      {"stage": "psf", "params": {"shape": "gaussian", "fwhm_arcsec": 0.8}},
      {"stage": "lsf", "params": {"fwhm_angstrom": 3.0}},
      {"stage": "noise", "params": {"snr": 30, "per": "angstrom"}}])"),
                                  "stages", {"cube"});
  for (std::size_t i = 0; i + 1 < stages.size(); ++i) stages[i]->run(state);
  const double factor = flux_per_solar_luminosity(obs.luminosity_distance_mpc) / 1e-20;
  // The point source's continuum, far from the line and the ends, keeps its total: the PSF
  // (2.23 FWHM = 9 spaxels) stays inside the field, and the LSF moves light only between
  // neighbouring pixels of a smooth continuum (1e-9 relative).
  CHECK(plane_total(*state.cube, 100) ==
        Approx(1.0e6 * (1.0 + 0.1) * factor).epsilon(test::kCubeValue));
  CHECK(before > 0.0);
  CHECK(state.cube->at(10, 10, 100) < 0.5 * 1.0e6 * 1.1 * factor);  // spread by the PSF
  stages.back()->run(state);
  CHECK(state.cube->variance.size() == state.cube->data.size());
  CHECK(state.cube->unit == "10**(-20)*erg/(s*cm**2*Angstrom)");
  require_finite(*state.cube);
}

// ------------------------------------------------------------------------------- aperture_mask

TEST_CASE("aperture_mask: NaN outside a circular aperture, kept by noise, refused by psf and lsf",
          "[post]") {
  // 12 x 12 spaxels of 1 kpc seen through a circle of diameter 12 kpc: 112 spaxels have their
  // centre inside (the 32 beyond it, 8 in each corner, become NaN).
  Cube cube = make_cube(12, 12, 20, [](int ix, int iy, int k) { return 100.0 + ix + iy + k; });
  SpaxelGrid grid;
  grid.n_side = 12;
  grid.spaxel_size_kpc = 1.0;
  grid.aperture = static_cast<int>(ApertureShape::circular);
  grid.aperture_kpc = 12.0;
  std::map<std::string, SkyMap> maps;
  maps["velocity_light_kms"] = {"km/s", "", std::vector<double>(144, 7.0)};
  const Cube original = cube;
  apply_aperture_mask(grid, cube, maps);
  std::size_t masked = 0;
  for (int iy = 0; iy < 12; ++iy)
    for (int ix = 0; ix < 12; ++ix) {
      const double x = ix + 0.5 - 6, y = iy + 0.5 - 6;
      const bool inside = x * x + y * y <= 36.0;
      masked += !inside;
      const double map_value = maps["velocity_light_kms"].values[iy * 12 + ix];
      CHECK((inside ? map_value == 7.0 : std::isnan(map_value)));
      for (int k = 0; k < 20; ++k)
        CHECK((inside ? cube.at(ix, iy, k) == original.at(ix, iy, k)
                      : std::isnan(cube.at(ix, iy, k))));
    }
  CHECK(masked == 32);

  // Noise: NaN stays NaN (data and variance), the rest gets finite noise.
  const Cube noisy =
      run_stage({{"stage", "noise"}, {"params", {{"snr", 10}}}}, cube, observation(0.03));
  for (std::size_t i = 0; i < noisy.data.size(); ++i) {
    CHECK(std::isnan(noisy.data[i]) == std::isnan(cube.data[i]));
    CHECK(std::isnan(noisy.variance[i]) == std::isnan(cube.data[i]));
  }
  // A convolution after the mask would spread the NaN: refused, naming the order.
  for (const char* stage : {"psf", "lsf"}) {
    nlohmann::json params = {{"fwhm_arcsec", 0.8}};
    if (std::string(stage) == "lsf") params = {{"fwhm_angstrom", 3.0}};
    CHECK_THROWS_WITH(run_stage({{"stage", stage}, {"params", params}}, cube, observation(0.03)),
                      Catch::Contains("put aperture_mask after psf and lsf"));
  }
}

TEST_CASE("lsf: a wavelength-dependent LSF broadens each line by the FWHM at its wavelength",
          "[post]") {
  // MUSE's preset tabulates Bacon et al. (2017) eq. 8; delta lines at three wavelengths, far
  // apart, must come out with that FWHM (templates of resolution 0: nothing to subtract), within
  // 1%, and keep their light.
  auto bacon2017 = [](double l) { return 5.835e-8 * l * l - 9.080e-4 * l + 5.983; };
  const Telescope muse = load_telescope_preset("MUSE", "telescope");
  REQUIRE_FALSE(muse.lsf_fwhm_angstrom.constant());
  const int n_wave = muse.n_wave();
  const std::vector<int> lines = {40, 1840, 3680};  // 4750, 7000 and 9300 A
  const Cube in = make_cube(2, 1, n_wave, [&](int ix, int, int k) {
    if (ix == 1) return 100.0 + 0.01 * k;  // a continuum
    return std::find(lines.begin(), lines.end(), k) != lines.end() ? 1.0e6 : 0.0;
  });
  Observation obs = observation(0.0);
  obs.axes.wave_start_angstrom = muse.wave_start_angstrom;
  obs.axes.wave_step_angstrom = muse.wave_step_angstrom;
  obs.telescope_lsf_fwhm_angstrom = muse.lsf_fwhm_angstrom;
  // The second moment of a broadened delta within +-30 pixels of it: sigma^2 + 1/12 pixel^2.
  auto fwhm_of_line = [&](const Cube& out, int line) {
    double total = 0, mean = 0, m2 = 0;
    for (int k = line - 30; k <= line + 30; ++k) {
      total += out.at(0, 0, k);
      mean += out.at(0, 0, k) * k;
    }
    mean /= total;
    for (int k = line - 30; k <= line + 30; ++k) m2 += out.at(0, 0, k) * (k - mean) * (k - mean);
    CHECK(total == Approx(1.0e6).epsilon(test::kCubeValue));
    return std::sqrt(m2 / total - 1.0 / 12.0) * 1.25 * std::sqrt(8.0 * std::log(2.0));
  };
  const Cube out =
      run_stage({{"stage", "lsf"}, {"params", {{"template_fwhm_angstrom", 0.0}}}}, in, obs);
  require_finite(out);
  for (int line : lines) {
    const double lambda = obs.axes.wavelength_angstrom(line);
    INFO("line at " << lambda << " A");
    CHECK(fwhm_of_line(out, line) == Approx(bacon2017(lambda)).epsilon(0.01));
  }
  CHECK(bacon2017(4750.15) > bacon2017(7000.15) + 0.4);  // the FWHMs do differ
  // A linear continuum stays as it was, up to the drift of a kernel whose width varies (4e-6
  // seen, where the FWHM changes fastest).
  for (int k = 100; k < n_wave - 100; k += 500)
    CHECK(out.at(1, 0, k) == Approx(in.at(1, 0, k)).epsilon(1e-5));

  // Templates of 2.6 A: coarser than MUSE from ~6180 to ~9380 A, where lines are left as they
  // are; at 4750 A the kernel brings 2.6 A to the instrument's 2.99 A.
  const Cube partial =
      run_stage({{"stage", "lsf"}, {"params", {{"template_fwhm_angstrom", 2.6}}}}, in, obs);
  CHECK(partial.at(0, 0, 1840) == in.at(0, 0, 1840));
  CHECK(partial.at(0, 0, 3680) == in.at(0, 0, 3680));
  // There the line takes exactly the kernel of the quadrature difference (half a pixel: too narrow
  // for the second-moment estimate above, so compared weight by weight).
  const Kernel1D kernel = gaussian_pixel_kernel(
      lsf_kernel_sigma_angstrom(muse.lsf_fwhm_angstrom.at(4750.15), 2.6, 0.0) / 1.25, 1e-6,
      n_wave - 1);
  double kernel_sum = 0;
  for (double w : kernel.weights) kernel_sum += w;
  REQUIRE(kernel.radius >= 2);
  for (int d = -kernel.radius; d <= kernel.radius; ++d)
    CHECK(partial.at(0, 0, 40 + d) ==
          Approx(1.0e6 * kernel.at(d) / kernel_sum).epsilon(test::kCubeValue));

  // A table must be increasing in wavelength, with FWHM > 0.
  auto telescope_with = [](const nlohmann::json& lsf) {
    return parse_telescope(
        {{"name", "t"},
         {"fov_arcsec", 1.0},
         {"spaxel_arcsec", 0.5},
         {"wavelength", {{"start_angstrom", 5000}, {"end_angstrom", 6000}, {"step_angstrom", 1}}},
         {"lsf_fwhm_angstrom", lsf}},
        "telescope");
  };
  CHECK(telescope_with({{"wavelength_angstrom", {5000, 6000}}, {"fwhm_angstrom", {2.0, 3.0}}})
            .lsf_fwhm_angstrom.at(5500) == Approx(2.5));
  CHECK_THROWS_WITH(
      telescope_with({{"wavelength_angstrom", {6000, 5000}}, {"fwhm_angstrom", {2.0, 3.0}}}),
      Catch::Contains("telescope.lsf_fwhm_angstrom.wavelength_angstrom: expected wavelengths > 0, "
                      "strictly increasing"));
  CHECK_THROWS_WITH(
      telescope_with({{"wavelength_angstrom", {5000, 6000}}, {"fwhm_angstrom", {2.0}}}),
      Catch::Contains("telescope.lsf_fwhm_angstrom.fwhm_angstrom: expected an array of 2 numbers"));
  CHECK_THROWS_WITH(telescope_with(-1.0), Catch::Contains("telescope.lsf_fwhm_angstrom: expected a "
                                                          "number >= 0"));
}
