// The fibres stage's exposure model (stages/fibres with "noise": {"model": "exposure"}): photons
// per fibre exposure through the fibre's core, the night sky through the core, and the variance
// the reconstruction carries into the cube. Expectations are worked out here from the bundle's
// geometry, the sky file and the photon count of an AB source, not from the model's code.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <numbers>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "data/wavelength.h"
#include "exposure_fixtures.h"
#include "fibre_fixtures.h"
#include "io/run_config.h"
#include "io/sky/sky_tables.h"
#include "pipeline/runner.h"
#include "stages/fibres/fibres.h"
#include "stages/noise/exposure.h"
#include "temp_dir.h"
#include "tests/cube_tolerance.h"

using namespace ifusim;
namespace fs = std::filesystem;

namespace {

using test::kpno_extinction;
using test::paranal_sky;

constexpr double kSpaxel = 0.5;  // arcsec, MaNGA's cubes

// A MaNGA bundle of n_fibres (19 or 127) with an exposure noise model in `noise`.
FibresParams manga(int n_fibres, const ExposureParams& exposure) {
  FibresParams p = test::manga_bundle(n_fibres);
  NoiseParams noise;
  noise.exposure_model = true;
  noise.exposure = exposure;
  p.noise = noise;
  return p;
}

// The Sloan telescope (3.99 m^2), a flat throughput, no detector noise unless a test adds it.
ExposureParams sloan_like(double exposure_s, int n_exposures = 1) {
  return test::flat_exposure(3.99, 0.25, exposure_s, n_exposures, "stages.fibres.noise");
}
Observation observation(double start_angstrom, const std::string& medium = "air") {
  return test::exposure_observation(kSpaxel, start_angstrom, medium);
}

Cube flat_cube(int side, int n_wave, double value) {
  Cube cube = test::flat_cube(side, n_wave, value);
  cube.axes.spaxel_arcsec = kSpaxel;
  return cube;
}

// The fibres stage on `cube` with the observation's grid; the sky and extinction given.
void run_fibres(const FibresParams& params, const Observation& obs, const ExtinctionCurve& ext,
                std::uint64_t seed, Cube& cube) {
  std::vector<double> wavelength(static_cast<std::size_t>(cube.shape.n_wave));
  for (int k = 0; k < cube.shape.n_wave; ++k) wavelength[k] = obs.axes.wavelength_angstrom(k);
  apply_fibres(params, kSpaxel, wavelength, obs.axes.wave_step_angstrom, 0, seed, cube,
               "stages.fibres", {}, {&paranal_sky(), &ext, &obs});
}

// The centre spaxel of a side x side cube (side even: the one just up and right of the centre).
std::size_t centre_spaxel(int side) {
  return static_cast<std::size_t>(side / 2) * side + side / 2;
}

using test::TempDir;

}  // namespace

TEST_CASE("fibre exposure: a flat AB = 20 source's photons per fibre, worked out by hand",
          "[fibres][noise][exposure]") {
  // A source of AB = 20 per fibre core: f_nu = 10^(-0.4 (20 + 48.60)) erg/s/cm^2/Hz (Oke & Gunn
  // 1983) through the core, so each 0.5 arcsec spaxel holds the share s^2 / (pi r^2) of
  // f_lambda = f_nu c / lambda^2. Photons per second per cm^2 per Hz are f_nu / (h nu); a bin dl
  // covers d nu = c dl / lambda^2, so one fibre exposure collects
  //   N = f_nu dl / (h lambda) x area x throughput x time x 10^(-0.4 k X).
  // No sky (V = 39.9), no detector noise: (S/N)^2 of a fibre is N. Vacuum wavelengths, a constant
  // 0.15 mag/airmass at airmass 1.2; MaNGA's 3 x 900 s at each dither position.
  const Observation obs = observation(6000.0, "vacuum");
  ExposureParams e = sloan_like(900.0, 3);
  e.airmass = 1.2;
  e.sky_mag_arcsec2 = 39.9;
  const ExtinctionCurve flat = test::flat_extinction(0.15);
  const FibresParams params = manga(19, e);
  const double f_nu = std::pow(10.0, -0.4 * (20.0 + 48.60));
  const double c_angstrom_s = 2.99792458e18, h = 6.62607015e-27;
  const double core_arcsec2 = std::numbers::pi * 1.0 * 1.0;
  const int side = 32, n_wave = 40;  // +-8 arcsec: the bundle (+-6.8 arcsec with dithers) inside
  Cube cube = flat_cube(side, n_wave, 0.0);
  std::vector<double> spaxel_value(n_wave), by_hand(n_wave);
  for (int k = 0; k < n_wave; ++k) {
    const double lambda = obs.axes.wavelength_angstrom(k);
    spaxel_value[k] =
        f_nu * c_angstrom_s / (lambda * lambda) * (kSpaxel * kSpaxel / core_arcsec2) / 1e-20;
    for (std::size_t s = 0; s < cube.shape.n_spaxels(); ++s)
      cube.data[s * n_wave + k] = spaxel_value[k];
    by_hand[k] =
        f_nu * 1.25 / (h * lambda) * 3.99e4 * 0.25 * 2700.0 * std::pow(10.0, -0.4 * 0.15 * 1.2);
  }
  REQUIRE(by_hand[0] > 100.0);  // Poisson, not Knuth's small-mean regime

  SECTION("per fibre exposure") {
    const FibreSampling sampling = fibre_sampling(params, cube.shape, kSpaxel);
    REQUIRE(sampling.size() == 57);
    Cube fibres = fibre_spectra(sampling, cube);
    apply_exposure_noise(e, paranal_sky(), flat, obs, 3, fibres, "stages.fibres.noise",
                         fibre_core_arcsec2(params.bundle));
    double pulls = 0.0;
    for (std::size_t f = 0; f < sampling.size(); ++f)
      for (int k = 0; k < n_wave; ++k) {
        const std::size_t i = f * n_wave + k;
        // The fibre's true flux: AB = 20 through its core, f_lambda in 1e-20 units.
        const double lambda = obs.axes.wavelength_angstrom(k);
        const double truth = f_nu * c_angstrom_s / (lambda * lambda) / 1e-20;
        REQUIRE(std::isfinite(fibres.data[i]));
        CHECK(truth * truth / fibres.variance[i] == Approx(by_hand[k]).epsilon(1e-6));
        pulls += std::pow(fibres.data[i] - truth, 2) / fibres.variance[i];
      }
    CHECK(pulls / (57.0 * n_wave) == Approx(1.0).epsilon(0.08));  // drawn as Poisson counts
  }

  SECTION("through the reconstruction") {
    // Spaxel t gets a sum_f W_tf F_f (a = s^2 / (pi r^2)), so its variance is
    // sum_f (a W_tf)^2 F_f^2 / N = spaxel_value^2 sum_f W_tf^2 / N.
    const FibreSampling sampling = fibre_sampling(params, cube.shape, kSpaxel);
    const auto weights = shepard_weights(params, sampling, cube.shape, kSpaxel);
    const std::size_t t = centre_spaxel(side);
    double sum_w2 = 0.0;
    for (const auto& [f, w] : weights[t]) sum_w2 += w * w;
    REQUIRE(sum_w2 > 0.0);
    run_fibres(params, obs, flat, 3, cube);
    for (int k = 0; k < n_wave; ++k) {
      const double expected = spaxel_value[k] * spaxel_value[k] * sum_w2 / by_hand[k];
      CHECK(cube.variance[t * n_wave + k] == Approx(expected).epsilon(1e-6));
      CHECK(std::isfinite(cube.data[t * n_wave + k]));
    }
  }
}

TEST_CASE("fibre exposure: sky-dominated fibres' S/N grows as sqrt(exposure time)",
          "[fibres][noise][exposure]") {
  // A faint flat source under a dark sky (V = 21.7 mag/arcsec^2 through each 2 arcsec core), with
  // read noise and dark current: 1 x 1800 s against 4 x 1800 s. The noise is the reconstructed
  // cube's difference from the same reconstruction without noise.
  const Observation obs = observation(6000.0);
  const int side = 32, n_wave = 100;
  const double value = 0.5;  // 1e-20 erg/s/cm^2/A per 0.25 arcsec^2
  auto measured_snr = [&](int n_exposures) {
    ExposureParams e = sloan_like(1800.0, n_exposures);
    e.read_noise_e = 3.0;
    e.dark_e_per_pixel_s = 3.0 / 3600.0;
    FibresParams params = manga(19, e);
    // Sky-dominated: per fibre the source's electrons are a small part of the sky's.
    const ExposureBins bins = exposure_bins(e, paranal_sky(), kpno_extinction(), obs, 1e-20, n_wave,
                                            "t", fibre_core_arcsec2(params.bundle));
    for (int k = 0; k < n_wave; ++k)
      REQUIRE(value * 4.0 * std::numbers::pi * bins.electrons_per_unit[k] <
              0.1 * bins.sky_electrons[k]);
    Cube noisy = flat_cube(side, n_wave, value);
    run_fibres(params, obs, kpno_extinction(), 5, noisy);
    params.noise.reset();
    Cube clean = flat_cube(side, n_wave, value);
    run_fibres(params, obs, kpno_extinction(), 5, clean);
    double sum2 = 0.0, pulls = 0.0;
    std::size_t n = 0;
    for (std::size_t i = 0; i < noisy.data.size(); ++i) {
      if (std::isnan(clean.data[i])) continue;  // not covered by any fibre
      REQUIRE(std::isfinite(noisy.data[i]));
      const double d = noisy.data[i] - clean.data[i];
      sum2 += d * d;
      pulls += d * d / noisy.variance[i];
      ++n;
    }
    REQUIRE(n > 200u * n_wave);
    CHECK(pulls / static_cast<double>(n) == Approx(1.0).epsilon(0.08));  // variance as drawn
    return value / std::sqrt(sum2 / static_cast<double>(n));
  };
  const double short_snr = measured_snr(1), long_snr = measured_snr(4);
  INFO("S/N per voxel " << short_snr << " at 1800 s, " << long_snr << " at 7200 s");
  CHECK(long_snr / short_snr == Approx(2.0).epsilon(0.05));
}

TEST_CASE(
    "fibre exposure: the 5577 A airglow line's excess variance in blank fibres is the "
    "sky file's",
    "[fibres][noise][exposure]") {
  // Blank sky through MaNGA's 127-fibre bundle, 5500-5650 A in air, no detector noise: the
  // variance is the sky's counts through each core, so the line's excess over the continuum,
  // summed over the bins the LSF (2.5 A) spreads it into, is the line's integral over the
  // continuum per bin in the raw file (0.05 A samples, vacuum: the bin edges converted).
  const Observation obs = observation(5500.0);
  const int side = 72, n_wave = 120;  // +-18 arcsec: the 127 fibres (+-16.8 with dithers)
  Cube cube = flat_cube(side, n_wave, 0.0);
  run_fibres(manga(127, sloan_like(1800.0)), obs, kpno_extinction(), 11, cube);
  const std::size_t t = centre_spaxel(side);
  // Empirical: plane k's mean d^2 over the covered spaxels (each spaxel's variance is its
  // geometry's factor times the fibres' variance at k, the same factor at every k).
  auto pooled = [&](int k) {
    double sum = 0.0;
    std::size_t n = 0;
    for (std::size_t s = 0; s < cube.shape.n_spaxels(); ++s) {
      const double d = cube.data[s * n_wave + k];
      if (std::isnan(d)) continue;
      sum += d * d;
      ++n;
    }
    REQUIRE(n > 2000u);
    return sum / static_cast<double>(n);
  };
  auto in = [&](int k, double lo, double hi) {
    const double l = obs.axes.wavelength_angstrom(k);
    return l >= lo && l <= hi;
  };
  double var_cont = 0.0, emp_cont = 0.0;
  int n_cont = 0;
  for (int k = 0; k < n_wave; ++k)
    if (in(k, 5535.0, 5555.0)) {
      var_cont += cube.variance[t * n_wave + k];
      emp_cont += pooled(k);
      ++n_cont;
    }
  var_cont /= n_cont;
  emp_cont /= n_cont;
  REQUIRE(var_cont > 0.0);
  double excess = 0.0, emp_excess = 0.0;
  int first = -1, last = -1;
  for (int k = 0; k < n_wave; ++k)
    if (in(k, 5565.0, 5590.0)) {
      if (first < 0) first = k;
      last = k;
      excess += cube.variance[t * n_wave + k] / var_cont - 1.0;
      emp_excess += pooled(k) / emp_cont - 1.0;
    }
  // The raw file: continuum per A over the continuum bins' span, the line over the line bins'.
  const SkySpectrum& sky = paranal_sky();
  auto raw = [&](double lo, double hi) {
    double sum = 0.0;
    for (std::size_t j = 0; j < sky.flux.size(); ++j)
      if (sky.wavelength_vacuum_angstrom[j] >= lo && sky.wavelength_vacuum_angstrom[j] < hi)
        sum += sky.flux[j] * 0.05;
    return sum;
  };
  const double step = 1.25;
  auto edge = [&](int k, double side_sign) {
    return vacuum_from_air(obs.axes.wavelength_angstrom(k) + side_sign * 0.5 * step);
  };
  double cont_lo = 1e9, cont_hi = 0.0;
  for (int k = 0; k < n_wave; ++k)
    if (in(k, 5535.0, 5555.0)) {
      cont_lo = std::min(cont_lo, edge(k, -1.0));
      cont_hi = std::max(cont_hi, edge(k, 1.0));
    }
  const double cont_per_angstrom = raw(cont_lo, cont_hi) / (cont_hi - cont_lo);
  const double line_lo = edge(first, -1.0), line_hi = edge(last, 1.0);
  const double line = raw(line_lo, line_hi) - cont_per_angstrom * (line_hi - line_lo);
  const double expected = line / (cont_per_angstrom * (line_hi - line_lo) / (last - first + 1));
  INFO("expected " << expected << ", model " << excess << ", drawn " << emp_excess);
  REQUIRE(expected > 20.0);  // the line is strong: the comparison can fail
  CHECK(excess == Approx(expected).epsilon(0.03));
  CHECK(emp_excess == Approx(expected).epsilon(0.15));  // 381 fibre exposures a plane

  // The sky enters through each 2 arcsec core: a fibre's sky counts are pi (1 arcsec)^2 / (0.5
  // arcsec)^2 = 4 pi times a 0.5 arcsec spaxel's under the same sky and exposure, so the centre
  // spaxel's variance is sum_f (a W_tf)^2 4 pi var_spaxel (a = s^2 / pi r^2), var_spaxel from
  // the square-spaxel model (the noise stage's).
  Cube spaxels = flat_cube(2, n_wave, 0.0);
  apply_exposure_noise(sloan_like(1800.0), paranal_sky(), kpno_extinction(), obs, 11, spaxels,
                       "stages.noise");
  const FibresParams params = manga(127, sloan_like(1800.0));
  const auto weights =
      shepard_weights(params, fibre_sampling(params, cube.shape, kSpaxel), cube.shape, kSpaxel);
  const double a = kSpaxel * kSpaxel / std::numbers::pi;
  double sum_aw2 = 0.0;
  for (const auto& [f, w] : weights[t]) sum_aw2 += a * a * w * w;
  for (int k = 0; k < n_wave; ++k)
    CHECK(cube.variance[t * n_wave + k] ==
          Approx(sum_aw2 * 4.0 * std::numbers::pi * spaxels.variance[k]).epsilon(test::kCubeValue));
}

TEST_CASE("fibre exposure: bad keys are refused naming them, before anything is written",
          "[fibres][noise][exposure]") {
  const nlohmann::json bundle = {
      {"n_fibres", 19}, {"core_diameter_arcsec", 2.0}, {"pitch_arcsec", 2.5}};
  const nlohmann::json good = {{"model", "exposure"},
                               {"exposure_s", 900},
                               {"collecting_area_m2", 3.99},
                               {"throughput", 0.25},
                               {"site", "apo"}};
  auto error = [&](const nlohmann::json& noise) -> std::string {
    try {
      make_fibres_stage({{"bundle", bundle}, {"noise", noise}}, "stages.fibres");
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(no error)";
  };
  auto with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json p = good;
    p[key] = value;
    return p;
  };
  CHECK(error(good) == "(no error)");
  CHECK_THAT(error(with("exposure_s", 0)), Catch::Contains("stages.fibres.noise.exposure_s"));
  CHECK_THAT(error(with("n_exposures", 0)), Catch::Contains("stages.fibres.noise.n_exposures"));
  CHECK_THAT(error(with("pixels_per_voxel", -1)),
             Catch::Contains("stages.fibres.noise.pixels_per_voxel"));
  CHECK_THAT(error(with("site", "mars")), Catch::Contains("stages.fibres.noise.site"));
  CHECK_THAT(error(with("snr", 10)), Catch::Contains("stages.fibres.noise.snr"));
  nlohmann::json no_throughput = good;
  no_throughput.erase("throughput");
  CHECK_THAT(error(no_throughput), Catch::Contains("stages.fibres.noise.throughput") &&
                                       Catch::Contains("telescope.throughput"));
  // Made outside a run (no sky loaders), the exposure model refuses to run.
  auto stage = make_fibres_stage({{"bundle", bundle}, {"noise", good}}, "stages.fibres");
  CHECK(stage->needs() == std::vector<std::string>{"cube", "cube_psf", "cube_flux"});

  // Whole runs: MaNGA-12 over 4600-4800 A; each error names the key the user wrote (an
  // inherited telescope key by its telescope.* name), and no output folder is left behind.
  const std::string config =
      std::string(IFUSIM_SOURCE_DIR) + "/configs/examples/muse_synthetic.json";
  TempDir out;
  const std::string band_4600_4800 = R"(, "wavelength": {"start_angstrom": 4600,
           "end_angstrom": 4800, "step_angstrom": 1.0, "medium": "vacuum"})";
  auto run_error = [&](const std::string& telescope_extra, const std::string& noise,
                       const std::string& band) {
    const std::vector<std::string> overrides = {
        "input.synthetic.stars=3000", "input.synthetic.gas=0",
        R"(telescope={"preset": "MaNGA-12")" + band + telescope_extra + "}",
        R"(pipeline=["orient", "aperture", "stellar_spectra", "psum", "flux", "psf", "lsf",
                     "fibres", "aperture_mask"])",
        R"(stages={"flux": {"unit_scale": 1e-20}, "psf": {"fwhm_arcsec": 1.5},
                   "fibres": {"noise": )" +
            noise + "}}"};
    try {
      RunOptions options;
      options.output_dir = out.path.string();
      options.progress = false;
      run_pipeline(load_run_config(config, overrides), options);
    } catch (const std::runtime_error& e) {  // ConfigError, or InputError naming a file
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string exposure = R"({"model": "exposure", "exposure_s": 900, "n_exposures": 3})";
  CHECK_THAT(run_error("", R"({"model": "exposure", "exposure_s": -1})", band_4600_4800),
             Catch::Contains("stages.fibres.noise.exposure_s"));
  CHECK_FALSE(fs::exists(out.path));
  // MaNGA's preset gives area and site; a throughput out of range is the telescope's key.
  CHECK_THAT(run_error(R"(, "throughput": 1.5)", exposure, band_4600_4800),
             Catch::Contains("telescope.throughput"));
  CHECK_FALSE(fs::exists(out.path));
  CHECK_THAT(run_error(R"(, "throughput": 0.25, "site": "mars")", exposure, band_4600_4800),
             Catch::Contains("telescope.site"));
  CHECK_FALSE(fs::exists(out.path));
  CHECK_THAT(run_error(R"(, "throughput": 0.25)",
                       R"({"model": "exposure", "exposure_s": 900, "sky_mag_arcsec2": 5})",
                       band_4600_4800),
             Catch::Contains("stages.fibres.noise.sky_mag_arcsec2"));
  CHECK_FALSE(fs::exists(out.path));

  // MaNGA's whole LOGCUBE band (3621.6-10353.8 A, the preset's) runs past the sky file's end
  // (10000 A, ../shared/data/README.md): refused naming the sky file's key, not extrapolated.
  CHECK_THAT(run_error(R"(, "throughput": 0.25)", exposure, ""),
             Catch::Contains("stages.fibres.noise.sky_file") &&
                 Catch::Contains("3000.0-10000.0 A") && Catch::Contains("not extrapolated"));
  CHECK_FALSE(fs::exists(out.path));
  // stages.fibres.noise.sky_file is a path relative to the config's folder, as the config's
  // other *_file keys (not to the data folder, where the default sky file is).
  CHECK_THAT(run_error(R"(, "throughput": 0.25)",
                       R"({"model": "exposure", "exposure_s": 900, "sky_file": "no_sky.fits"})",
                       band_4600_4800),
             Catch::Contains((fs::path(config).parent_path() / "no_sky.fits").string()));
  CHECK_FALSE(fs::exists(out.path));

  // And the same run with a valid throughput goes through, with a variance everywhere covered.
  CHECK(run_error(R"(, "throughput": 0.25)", exposure, band_4600_4800) == "(no error)");
  CHECK(fs::exists(out.path / "cube.fits"));
}
