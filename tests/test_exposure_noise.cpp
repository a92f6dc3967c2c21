// The noise stage's exposure model (stages/noise/exposure.h): the night sky's lines in the
// variance, S/N against exposure time, photon counts of a flat AB source by hand, exact Poisson
// draws, and bad input refused by key with nothing written.
#include <omp.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "core/json_params.h"
#include "data/wavelength.h"
#include "exposure_fixtures.h"
#include "io/run_config.h"
#include "io/sky/sky_tables.h"
#include "io/telescope.h"
#include "pipeline/runner.h"
#include "stages/noise/exposure.h"
#include "stages/noise/noise.h"
#include "stages/noise/random.h"
#include "stages/stage.h"
#include "temp_dir.h"

using namespace ifusim;
namespace fs = std::filesystem;

namespace {

using test::paranal_extinction;
using test::paranal_sky;

// A MUSE-like exposure: VLT area, a flat throughput, no detector noise unless a test adds it.
ExposureParams muse_like(double exposure_s, int n_exposures = 1) {
  return test::flat_exposure(49.29, 0.3, exposure_s, n_exposures, "stages.noise");
}
Observation observation(double start_angstrom, const std::string& medium = "air") {
  return test::exposure_observation(0.2, start_angstrom, medium);
}

Cube flat_cube(int side, int n_wave, double value) {
  return test::flat_cube(side, n_wave, value);
}

// The variance of plane k of `cube` about `truth`, over all spaxels.
double plane_variance(const Cube& cube, int k, double truth) {
  double sum = 0.0;
  const std::size_t n = cube.shape.n_spaxels();
  for (std::size_t s = 0; s < n; ++s) {
    const double d = cube.data[s * cube.shape.n_wave + k] - truth;
    REQUIRE(std::isfinite(d));
    sum += d * d;
  }
  return sum / static_cast<double>(n);
}

// The raw sky file's integral of f over [lo, hi] (vacuum A), by its samples (0.05 A apart).
double raw_sky_integral(double lo, double hi) {
  const SkySpectrum& sky = paranal_sky();
  double sum = 0.0;
  for (std::size_t j = 0; j < sky.flux.size(); ++j)
    if (sky.wavelength_vacuum_angstrom[j] >= lo && sky.wavelength_vacuum_angstrom[j] < hi)
      sum += sky.flux[j] * 0.05;
  return sum;
}

std::string example(const std::string& name) {
  return std::string(IFUSIM_SOURCE_DIR) + "/configs/examples/" + name + ".json";
}

using test::TempDir;

// The synthetic example, small (3000 stars, no gas), with `overrides`: the error it stops with.
std::string run_error(std::vector<std::string> overrides, const fs::path& out) {
  overrides.insert(overrides.begin(), {"input.synthetic.stars=3000", "input.synthetic.gas=0"});
  try {
    const RunConfig config = load_run_config(example("muse_synthetic"), overrides);
    RunOptions options;
    options.output_dir = out.string();
    options.progress = false;
    run_pipeline(config, options);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("exposure noise: the presets' areas and throughputs recomputed from their sources",
          "[noise][exposure][telescopes]") {
  // The VLT UT's 8.0 m entrance pupil less M2's 1.116 m; ESO's MUSE overview: WFM throughput 14%
  // at 480 nm, 35% at 750 nm, 14% at 930 nm. The Sloan 2.5 m primary less its 1.08 m secondary
  // (Gunn et al. 2006).
  const double vlt = std::numbers::pi / 4.0 * (8.0 * 8.0 - 1.116 * 1.116);
  for (const char* name : {"MUSE", "MUSE-WFM", "MUSE-WFM-N", "MUSE-WFM-E"}) {
    INFO(name);
    const Telescope t = load_telescope_preset(name, "telescope");
    CHECK(t.collecting_area_m2 == Approx(vlt).epsilon(1e-3));
    REQUIRE(t.has_throughput());
    CHECK(t.throughput.at(4800.0) == Approx(0.14));
    CHECK(t.throughput.at(7500.0) == Approx(0.35));
    CHECK(t.throughput.at(9300.0) == Approx(0.14));
    CHECK(t.site == "paranal");
  }
  for (const char* name : {"MaNGA-12", "MaNGA-32"}) {
    INFO(name);
    const Telescope t = load_telescope_preset(name, "telescope");
    CHECK(t.collecting_area_m2 ==
          Approx(std::numbers::pi / 4.0 * (2.5 * 2.5 - 1.08 * 1.08)).epsilon(1e-3));
    CHECK_FALSE(t.has_throughput());  // not yet: a run must give telescope.throughput
    CHECK(t.site == "apo");
  }
  CHECK_FALSE(load_telescope_preset("SAMI", "telescope").has_throughput());
}

TEST_CASE("sky files: PypeIt's Paranal sky and extinction tables read as their README says",
          "[noise][exposure]") {
  // ../shared/data/sky/README.md: 3000-10000 A every 0.05 A (140001 values), vacuum, the
  // 5577.34 A air line peaking at 5578.9 A; Paranal's extinction (Patat et al. 2011) in A.
  const SkySpectrum& sky = paranal_sky();
  REQUIRE(sky.flux.size() == 140001);
  CHECK(sky.wavelength_vacuum_angstrom.front() == Approx(3000.0));
  CHECK(sky.wavelength_vacuum_angstrom.back() == Approx(10000.0));
  std::size_t peak = 0;
  for (std::size_t j = 0; j < sky.flux.size(); ++j) {
    const double w = sky.wavelength_vacuum_angstrom[j];
    if (w > 5570.0 && w < 5590.0 && (peak == 0 || sky.flux[j] > sky.flux[peak])) peak = j;
  }
  CHECK(sky.wavelength_vacuum_angstrom[peak] == Approx(5578.9).margin(0.1));
  const ExtinctionCurve& ext = paranal_extinction();
  CHECK(ext.wavelength_angstrom.front() == 3100.0);
  CHECK(ext.mag_per_airmass.front() == Approx(1.53));
  CHECK(ext.at(5000.0) > 0.1);
  CHECK(ext.at(5000.0) < 0.2);
  const ExtinctionCurve kpno = read_extinction_curve(data_dir() + "/sky/kpnoextinct.dat");
  CHECK(kpno.wavelength_angstrom.front() == 3200.0);  // its trailing comment lines are skipped
  // A broken table: the file and the line named.
  TempDir dir;
  fs::create_directories(dir.path);
  const std::string bad = (dir.path / "bad.dat").string();
  {
    std::ofstream out(bad);
    out << "# wavelength extinction\n4000 0.3\n5000 0.2 0.1\n";
  }
  CHECK_THROWS_WITH(read_extinction_curve(bad), Catch::Contains(bad) && Catch::Contains("line 3"));
  CHECK_THROWS_WITH(read_sky_spectrum(bad), Catch::Contains(bad));
}

TEST_CASE("exposure noise: the 5577 A airglow line's excess variance is the sky file's",
          "[noise][exposure]") {
  // Blank sky: 20 x 20 spaxels, 5500-5650 A in air. Without detector noise the variance is the
  // sky's counts, so the line's excess over the continuum, summed over the bins the LSF spreads
  // it into, is the line's integral over the continuum per bin in the raw file (0.05 A samples,
  // vacuum: the bin edges converted).
  const Observation obs = observation(5500.0);
  Cube cube = flat_cube(20, 120, 0.0);
  const ExposureBins bins = apply_exposure_noise(muse_like(1800.0), paranal_sky(),
                                                 paranal_extinction(), obs, 11, cube, "noise");
  auto in = [&](int k, double lo, double hi) {
    const double l = obs.axes.wavelength_angstrom(k);
    return l >= lo && l <= hi;
  };
  double var_cont = 0.0, emp_cont = 0.0;
  int n_cont = 0;
  for (int k = 0; k < 120; ++k)
    if (in(k, 5535.0, 5555.0)) {
      var_cont += cube.variance[k];  // the same in every blank spaxel
      emp_cont += plane_variance(cube, k, 0.0);
      ++n_cont;
    }
  var_cont /= n_cont;
  emp_cont /= n_cont;
  double excess = 0.0, emp_excess = 0.0, peak = 0.0;
  int first = -1, last = -1;
  for (int k = 0; k < 120; ++k)
    if (in(k, 5565.0, 5590.0)) {
      if (first < 0) first = k;
      last = k;
      excess += cube.variance[k] / var_cont - 1.0;
      emp_excess += plane_variance(cube, k, 0.0) / emp_cont - 1.0;
      peak = std::max(peak, cube.variance[k] / var_cont);
    }
  // The raw file: continuum per A over the continuum bins' span, the line over the line bins'.
  const double step = 1.25;
  auto vac = [](double air) { return vacuum_from_air(air); };
  double cont_lo = 1e9, cont_hi = 0.0;
  for (int k = 0; k < 120; ++k)
    if (in(k, 5535.0, 5555.0)) {
      cont_lo = std::min(cont_lo, obs.axes.wavelength_angstrom(k) - 0.5 * step);
      cont_hi = std::max(cont_hi, obs.axes.wavelength_angstrom(k) + 0.5 * step);
    }
  const double cont_per_angstrom =
      raw_sky_integral(vac(cont_lo), vac(cont_hi)) / (vac(cont_hi) - vac(cont_lo));
  const double line_lo = vac(obs.axes.wavelength_angstrom(first) - 0.5 * step);
  const double line_hi = vac(obs.axes.wavelength_angstrom(last) + 0.5 * step);
  const double line = raw_sky_integral(line_lo, line_hi) - cont_per_angstrom * (line_hi - line_lo);
  // In units of one bin's continuum (per vacuum A: a bin spans step x n(lambda) vacuum A).
  const double expected = line / (cont_per_angstrom * (line_hi - line_lo) / (last - first + 1));
  INFO("expected " << expected << ", model " << excess << ", drawn " << emp_excess);
  REQUIRE(expected > 20.0);  // the line is strong: the comparison can fail
  CHECK(excess == Approx(expected).epsilon(0.03));
  CHECK(emp_excess == Approx(expected).epsilon(0.10));  // 400 spaxels a bin
  CHECK(peak > 10.0);
  // The line's profile in the variance is the LSF's Gaussian (FWHM 2.5 A) seen through 1.25 A
  // bins: second moment sigma^2 + step^2 / 12 (the sky file's own lines are ~0.1 A wide).
  // Within 5 sigma of the line, where the continuum's slope weighs little.
  double m0 = 0.0, m1 = 0.0, m2 = 0.0;
  for (int k = first; k <= last; ++k) {
    const double x = obs.axes.wavelength_angstrom(k), e = cube.variance[k] / var_cont - 1.0;
    if (std::abs(x - 5577.34) > 5.5) continue;
    m0 += e;
    m1 += e * x;
    m2 += e * x * x;
  }
  const double centre = m1 / m0, second = m2 / m0 - centre * centre;
  const double sigma_lsf = 2.5 / (2.0 * std::sqrt(2.0 * std::log(2.0)));
  CHECK(centre == Approx(5577.34).margin(0.1));  // the O I line's air wavelength
  CHECK(second == Approx(sigma_lsf * sigma_lsf + 1.25 * 1.25 / 12.0).epsilon(0.05));
  // The sky dominates nothing else here: the continuum's counts are the sky's.
  CHECK(bins.sky_electrons[static_cast<std::size_t>(first - 20)] > 1.0);
}

TEST_CASE("exposure noise: S/N of a faint source on the sky grows as sqrt(exposure time)",
          "[noise][exposure]") {
  // 1 x 1800 s against 4 x 1800 s with the default detector (read noise, dark current): the
  // sky, the dark and the read noise's variance all grow with the number of exposures.
  const Observation obs = observation(6000.0);
  auto measured_snr = [&](int n_exposures) {
    ExposureParams p = muse_like(1800.0, n_exposures);
    p.read_noise_e = 3.0;
    p.dark_e_per_pixel_s = 3.0 / 3600.0;
    Cube cube = flat_cube(20, 100, 2.0);
    const ExposureBins bins =
        apply_exposure_noise(p, paranal_sky(), paranal_extinction(), obs, 5, cube, "noise");
    // Faint and sky-dominated: the source's counts are a small part of the variance.
    for (std::size_t k = 0; k < 100; ++k)
      REQUIRE(2.0 * bins.electrons_per_unit[k] < 0.2 * bins.sky_electrons[k]);
    double sum2 = 0.0;
    for (double v : cube.data) {
      REQUIRE(std::isfinite(v));
      sum2 += (v - 2.0) * (v - 2.0);
    }
    return 2.0 / std::sqrt(sum2 / static_cast<double>(cube.data.size()));
  };
  const double short_snr = measured_snr(1), long_snr = measured_snr(4);
  INFO("S/N per voxel " << short_snr << " at 1800 s, " << long_snr << " at 7200 s");
  CHECK(long_snr / short_snr == Approx(2.0).epsilon(0.05));
  CHECK(long_snr / short_snr == Approx(2.0).epsilon(0.02));  // 40000 voxels: 0.5% expected
}

TEST_CASE("exposure noise: a flat AB source gives the photon count worked out by hand",
          "[noise][exposure]") {
  // f_nu of AB = 20 (Oke & Gunn 1983: f_nu = 10^(-0.4 (m + 48.60)) erg/s/cm^2/Hz) in each spaxel;
  // the cube holds f_lambda = f_nu c / lambda^2 in 1e-20 units. Photons per second per cm^2 per
  // Hz are f_nu / (h nu); a bin of dl covers d nu = c dl / lambda^2, so a bin collects
  // f_nu dl / (h lambda) x area x throughput x time x 10^(-0.4 k X) photons. Vacuum wavelengths;
  // a constant 0.12 mag/airmass at airmass 1.3; no sky (V = 39.9), no detector noise.
  const Observation obs = observation(6000.0, "vacuum");
  ExposureParams p = muse_like(900.0, 3);
  p.airmass = 1.3;
  p.sky_mag_arcsec2 = 39.9;
  const ExtinctionCurve flat = test::flat_extinction(0.12);
  const double f_nu = std::pow(10.0, -0.4 * (20.0 + 48.60));
  const double c_angstrom_s = 2.99792458e18;
  const double h = 6.62607015e-27;  // erg s
  Cube cube = flat_cube(10, 40, 0.0);
  std::vector<double> truth(40);
  for (int k = 0; k < 40; ++k) {
    const double lambda = obs.axes.wavelength_angstrom(k);
    truth[k] = f_nu * c_angstrom_s / (lambda * lambda) / 1e-20;
    for (std::size_t s = 0; s < cube.shape.n_spaxels(); ++s) cube.data[s * 40 + k] = truth[k];
  }
  apply_exposure_noise(p, paranal_sky(), flat, obs, 3, cube, "noise");
  double pulls = 0.0;
  for (int k = 0; k < 40; ++k) {
    const double lambda = obs.axes.wavelength_angstrom(k);
    const double by_hand =
        f_nu * 1.25 / (h * lambda) * 49.29e4 * 0.3 * 2700.0 * std::pow(10.0, -0.4 * 0.12 * 1.3);
    // Photon noise only: (S/N)^2 is the count.
    const double snr2 = truth[k] * truth[k] / cube.variance[k];
    CHECK(snr2 == Approx(by_hand).epsilon(1e-4));
    for (std::size_t s = 0; s < cube.shape.n_spaxels(); ++s) {
      const std::size_t i = s * 40 + k;
      pulls += (cube.data[i] - truth[k]) * (cube.data[i] - truth[k]) / cube.variance[i];
    }
  }
  CHECK(pulls / 4000.0 == Approx(1.0).epsilon(0.06));  // Poisson draws: unit mean squared pull
  // About 4e3 photons a bin at 6000 A (PTRS territory, far from the normal approximation).
  CHECK(truth[0] * truth[0] / cube.variance[0] > 3000.0);
}

TEST_CASE("exposure noise: Poisson draws are exact, the cube independent of the thread count",
          "[noise][exposure]") {
  for (double mean : {0.3, 3.7, 25.0, 800.0}) {
    double sum = 0.0, sum2 = 0.0, zeros = 0.0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
      const double x = static_cast<double>(
          counter_poisson(counter_key(counter_state(1), static_cast<std::uint64_t>(i)), mean));
      sum += x;
      sum2 += x * x;
      zeros += x == 0.0;
    }
    const double m = sum / n, var = sum2 / n - m * m;
    INFO("mean " << mean << ": drawn mean " << m << ", variance " << var);
    CHECK(m == Approx(mean).epsilon(5.0 * std::sqrt(mean / n) / mean));
    CHECK(var == Approx(mean).epsilon(0.02));
    CHECK(zeros / n == Approx(std::exp(-mean)).margin(0.004));  // P(0) of a Poisson, not a normal
  }
  const Observation obs = observation(7000.0);
  ExposureParams p = muse_like(600.0, 2);
  p.read_noise_e = 3.0;
  p.sky_residual_fraction = 0.02;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  Cube one = flat_cube(12, 60, 5.0);
  apply_exposure_noise(p, paranal_sky(), paranal_extinction(), obs, 9, one, "noise");
  omp_set_num_threads(4);
  Cube four = flat_cube(12, 60, 5.0);
  apply_exposure_noise(p, paranal_sky(), paranal_extinction(), obs, 9, four, "noise");
  omp_set_num_threads(threads);
  CHECK(one.data == four.data);
  CHECK(one.variance == four.variance);
  Cube other = flat_cube(12, 60, 5.0);
  apply_exposure_noise(p, paranal_sky(), paranal_extinction(), obs, 10, other, "noise");
  CHECK(other.data != one.data);
}

TEST_CASE("exposure noise: bad input names the key, and a failed run writes nothing",
          "[noise][exposure]") {
  auto error = [](const nlohmann::json& params) -> std::string {
    try {
      make_noise_stage(params, "stages.noise");
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(no error)";
  };
  const nlohmann::json good = {{"model", "exposure"},
                               {"exposure_s", 900},
                               {"collecting_area_m2", 49.29},
                               {"throughput", 0.3},
                               {"site", "paranal"}};
  CHECK(error(good) == "(no error)");
  auto with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json p = good;
    p[key] = value;
    return p;
  };
  CHECK_THAT(error(with("exposure_s", 0)), Catch::Contains("stages.noise.exposure_s"));
  CHECK_THAT(error(with("exposure_s", -5)), Catch::Contains("stages.noise.exposure_s"));
  CHECK_THAT(error(with("throughput", 1.5)), Catch::Contains("stages.noise.throughput"));
  CHECK_THAT(error(with("throughput",
                        {{"wavelength_angstrom", {5000, 9000}}, {"throughput", {0.3, -0.1}}})),
             Catch::Contains("stages.noise.throughput"));
  CHECK_THAT(error(with("site", "mars")), Catch::Contains("stages.noise.site"));
  nlohmann::json no_area = good;
  no_area.erase("collecting_area_m2");
  CHECK_THAT(error(no_area), Catch::Contains("stages.noise.collecting_area_m2") &&
                                 Catch::Contains("telescope.collecting_area_m2"));
  nlohmann::json no_throughput = good;
  no_throughput.erase("throughput");
  CHECK_THAT(error(no_throughput), Catch::Contains("telescope.throughput"));
  CHECK_THAT(error(with("snr", 10)), Catch::Contains("stages.noise.snr"));  // not this model's

  // A sky file that does not reach the band: named by its key.
  CHECK_THROWS_WITH(sky_in_bins(paranal_sky(), 21.7, WaveGrid{9500.0, 1.25, 0.0}, 800, "air", 2.5,
                                "stages.noise.sky_file"),
                    Catch::Contains("stages.noise.sky_file") && Catch::Contains("band"));

  // Whole runs: each error names the key the user wrote, and no output folder is left behind.
  TempDir out;
  const std::string exposure =
      R"(stages.noise={"model": "exposure", "exposure_s": 900, "n_exposures": 2})";
  CHECK_THAT(run_error({R"(stages.noise={"model": "exposure", "exposure_s": 0})"}, out.path),
             Catch::Contains("stages.noise.exposure_s"));
  CHECK_FALSE(fs::exists(out.path));
  CHECK_THAT(run_error({exposure, "telescope.throughput=1.5"}, out.path),
             Catch::Contains("telescope.throughput"));
  CHECK_FALSE(fs::exists(out.path));
  CHECK_THAT(run_error({exposure,
                        "telescope.wavelength={\"start_angstrom\": 9000, "
                        "\"end_angstrom\": 10300, \"step_angstrom\": 1.25}"},
                       out.path),
             Catch::Contains("stages.noise.sky_file"));
  CHECK_FALSE(fs::exists(out.path));
  // MaNGA's preset has no throughput: refused with the key to give.
  CHECK_THAT(run_error({exposure, "telescope=MaNGA-12"}, out.path),
             Catch::Contains("telescope.throughput"));
  CHECK_FALSE(fs::exists(out.path));
}
