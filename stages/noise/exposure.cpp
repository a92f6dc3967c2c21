#include "stages/noise/exposure.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>
#include <stdexcept>

#include "core/config_error.h"
#include "core/constants.h"
#include "data/host_memory.h"
#include "data/resolution_curve_json.h"
#include "data/wavelength.h"
#include "stages/noise/noise.h"
#include "stages/noise/random.h"
#include "stages/stage.h"

namespace ifusim {

namespace {

// Bessell (1990, PASP 102, 1181), table 2: the Johnson-Cousins V response, 4700-7000 A every
// 100 A (normalised to a peak of 1).
constexpr double kVStartAngstrom = 4700.0;
constexpr double kVStepAngstrom = 100.0;
constexpr std::array<double, 24> kBessellV = {
    0.000, 0.030, 0.163, 0.458, 0.780, 0.967, 1.000, 0.973, 0.898, 0.792, 0.684, 0.574,
    0.461, 0.359, 0.270, 0.197, 0.135, 0.081, 0.045, 0.025, 0.017, 0.013, 0.009, 0.000};
// f_lambda of V = 0 (Bessell, Castelli & Plez 1998, A&A 333, 231, table A2), erg/s/cm^2/A.
constexpr double kVZeroPointFlambda = 3.631e-9;

double bessell_v(double lambda_angstrom) {
  const double x = (lambda_angstrom - kVStartAngstrom) / kVStepAngstrom;
  if (x <= 0.0 || x >= static_cast<double>(kBessellV.size() - 1)) return 0.0;
  const std::size_t i = static_cast<std::size_t>(x);
  const double t = x - static_cast<double>(i);
  return kBessellV[i] + t * (kBessellV[i + 1] - kBessellV[i]);
}

// FWHM of a Gaussian over its sigma: 2 sqrt(2 ln 2).
const double kFwhmPerSigma = 2.0 * std::sqrt(2.0 * std::numbers::ln2);

std::string angstrom_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

}  // namespace

ExposureParams ExposureParams::from_json(JsonParams& p) {
  ExposureParams out;
  out.exposure_s = p.number("exposure_s");
  p.require(out.exposure_s > 0.0, "exposure_s", "an exposure time > 0 (seconds)", out.exposure_s);
  const long long n = p.integer("n_exposures", 1);
  p.require(n >= 1 && n <= 1000000, "n_exposures", "an integer from 1 to 1e6", n);
  out.n_exposures = static_cast<int>(n);
  out.airmass = p.number("airmass", 1.0);
  p.require(out.airmass >= 1.0 && out.airmass <= 10.0, "airmass", "a number from 1 to 10",
            out.airmass);
  out.sky_mag_arcsec2 = p.number("sky_mag_arcsec2", kParanalDarkSkyVMagArcsec2);
  p.require(out.sky_mag_arcsec2 > 10.0 && out.sky_mag_arcsec2 < 40.0, "sky_mag_arcsec2",
            "a V surface brightness from 10 to 40 mag/arcsec^2", out.sky_mag_arcsec2);
  out.dark_e_per_pixel_s = p.number("dark_e_per_pixel_s", 3.0 / 3600.0);
  p.require(out.dark_e_per_pixel_s >= 0.0, "dark_e_per_pixel_s",
            "a dark current >= 0 (electrons per pixel per second)", out.dark_e_per_pixel_s);
  out.read_noise_e = p.number("read_noise_e", 3.0);
  p.require(out.read_noise_e >= 0.0, "read_noise_e",
            "a read noise >= 0 (electrons per pixel per exposure)", out.read_noise_e);
  out.pixels_per_voxel = p.number("pixels_per_voxel", 1.0);
  p.require(out.pixels_per_voxel > 0.0, "pixels_per_voxel", "a number of pixels > 0",
            out.pixels_per_voxel);
  out.sky_residual_fraction = p.number("sky_residual_fraction", 0.0);
  p.require(out.sky_residual_fraction >= 0.0 && out.sky_residual_fraction <= 1.0,
            "sky_residual_fraction", "a fraction in [0, 1]", out.sky_residual_fraction);
  if (!p.has("collecting_area_m2"))
    throw ConfigError(p.key_path("collecting_area_m2") +
                      ": model \"exposure\" needs the telescope's collecting area (m^2): give "
                      "telescope.collecting_area_m2 (the preset has none) or " +
                      p.key_path("collecting_area_m2"));
  out.collecting_area_m2 = p.number("collecting_area_m2");
  p.require(out.collecting_area_m2 > 0.0, "collecting_area_m2", "an area > 0 (m^2)",
            out.collecting_area_m2);
  if (!p.has("throughput"))
    throw ConfigError(p.key_path("throughput") +
                      ": model \"exposure\" needs the end-to-end throughput (a fraction in [0, 1] "
                      "or a table against wavelength): give telescope.throughput (the preset has "
                      "none) or " +
                      p.key_path("throughput"));
  out.throughput = parse_fraction_curve(p, "throughput", "throughput");
  out.sky_file = p.string("sky_file", "sky/paranal_sky.fits");
  out.sky_file_key = p.key_path("sky_file");
  // `extinction` (a site or a file) wins over the telescope's `site`.
  const std::string site = p.string("site", "");
  const std::string given = p.string("extinction", "");
  if (!given.empty()) {
    const std::string by_site = site_extinction_file(given);
    out.extinction_file = by_site.empty() ? given : by_site;
    out.extinction_key = p.key_path("extinction");
  } else if (!site.empty()) {
    out.extinction_file = site_extinction_file(site);
    p.require(!out.extinction_file.empty(), "site", "a site: paranal, kpno or apo", site);
    out.extinction_key = p.key_path("site");
  } else {
    throw ConfigError(p.key_path("extinction") +
                      ": model \"exposure\" needs the site's atmospheric extinction: give "
                      "telescope.site (paranal, kpno, apo) or " +
                      p.key_path("extinction") + " (a site or an extinction table's file)");
  }
  return out;
}

std::string site_extinction_file(const std::string& site) {
  if (site == "paranal") return "sky/paranalextinct.dat";
  if (site == "kpno" || site == "apo") return "sky/kpnoextinct.dat";
  return "";
}

double v_band_mean(const SkySpectrum& sky) {
  double weighted = 0.0, weights = 0.0;
  const auto& w = sky.wavelength_vacuum_angstrom;
  for (std::size_t j = 0; j < w.size(); ++j) {
    const double dl = 0.5 * (w[std::min(j + 1, w.size() - 1)] - w[j == 0 ? 0 : j - 1]);
    const double r = bessell_v(air_from_vacuum(w[j])) * dl;
    weighted += r * sky.flux[j];
    weights += r;
  }
  return weights > 0.0 ? weighted / weights : 0.0;
}

std::vector<double> sky_in_bins(const SkySpectrum& sky, double sky_mag_arcsec2,
                                const WaveGrid& grid, int n, const std::string& medium,
                                const ResolutionCurve& lsf_fwhm, const std::string& key) {
  const auto& wv = sky.wavelength_vacuum_angstrom;
  std::vector<double> w(wv.size());  // in the cube's medium
  for (std::size_t j = 0; j < wv.size(); ++j)
    w[j] = medium == "air" ? air_from_vacuum(wv[j]) : wv[j];
  const double v_lo = air_from_vacuum(wv.front()), v_hi = air_from_vacuum(wv.back());
  if (v_lo > kVStartAngstrom || v_hi < kVStartAngstrom + kVStepAngstrom * (kBessellV.size() - 1))
    throw ConfigError(key + ": " + sky.file + " does not cover the V band (4700-7000 A) that " +
                      "sets its level from the sky surface brightness");
  const double band_lo = grid.edge(0), band_hi = grid.edge(n);
  const double reach = 5.0 * std::max(lsf_fwhm.at(band_lo), lsf_fwhm.at(band_hi)) / kFwhmPerSigma;
  if (w.front() > band_lo - reach || w.back() < band_hi + reach)
    throw ConfigError(key + ": " + sky.file + " covers " + angstrom_text(w.front()) + "-" +
                      angstrom_text(w.back()) + " A (" + medium +
                      "), which does not hold the cube's band " + angstrom_text(band_lo) + "-" +
                      angstrom_text(band_hi) +
                      " A and 5 sigma of its LSF beyond: the sky is not extrapolated past the "
                      "file's ends; end the band (telescope.wavelength) inside them, or give a "
                      "sky file that covers it");
  const double mean_v = v_band_mean(sky);
  if (!(mean_v > 0.0)) throw ConfigError(key + ": " + sky.file + " has no light in the V band");
  const double scale = kVZeroPointFlambda * std::pow(10.0, -0.4 * sky_mag_arcsec2) / mean_v;
  std::vector<double> out(static_cast<std::size_t>(n), 0.0);
#pragma omp parallel for schedule(static)
  for (int k = 0; k < n; ++k) {
    const double lo = grid.edge(k), hi = grid.edge(k + 1);
    const double sigma = lsf_fwhm.at(grid.centre(k)) / kFwhmPerSigma;
    const double pad = sigma > 0.0 ? 6.0 * sigma : 0.0;
    std::size_t j =
        static_cast<std::size_t>(std::lower_bound(w.begin(), w.end(), lo - pad) - w.begin());
    j = j > 0 ? j - 1 : 0;
    double sum = 0.0;
    for (; j < w.size() && w[j] <= hi + pad; ++j) {
      // The sample's width: half its distance to each neighbour.
      const double dl = 0.5 * (w[std::min(j + 1, w.size() - 1)] - w[j == 0 ? 0 : j - 1]);
      double fraction;  // of the sample's light that the LSF puts into [lo, hi]
      if (sigma > 0.0) {
        const double s = std::numbers::sqrt2 * sigma;
        fraction = 0.5 * (std::erf((hi - w[j]) / s) - std::erf((lo - w[j]) / s));
      } else {
        fraction = w[j] >= lo && w[j] < hi ? 1.0 : 0.0;
      }
      sum += sky.flux[j] * dl * fraction;
    }
    out[static_cast<std::size_t>(k)] = scale * sum / (hi - lo);
  }
  return out;
}

double flux_unit_scale(const std::string& unit, const std::string& path) {
  const std::string base = "erg/(s*cm**2*Angstrom)";
  if (unit == base) return 1.0;
  const std::string prefix = "10**(";
  const std::string suffix = ")*" + base;
  if (unit.size() > prefix.size() + suffix.size() && unit.rfind(prefix, 0) == 0 &&
      unit.compare(unit.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::string power =
        unit.substr(prefix.size(), unit.size() - prefix.size() - suffix.size());
    try {
      std::size_t used = 0;
      const int k = std::stoi(power, &used);
      if (used == power.size()) return std::pow(10.0, k);
    } catch (const std::exception&) {
    }
  }
  throw ConfigError(path + ": model \"exposure\" counts photons of a flux cube (" + base +
                    " times a power of ten), but the cube is in \"" + unit +
                    "\": put the flux stage before noise");
}

ExposureBins exposure_bins(const ExposureParams& params, const SkySpectrum& sky,
                           const ExtinctionCurve& extinction, const Observation& obs,
                           double unit_scale, int n_wave, const std::string& path,
                           std::optional<double> sky_aperture_arcsec2) {
  const WaveGrid grid = obs.simulated_grid();
  if (!(grid.width(0) > 0.0) || !(grid.start_angstrom > 0.0))
    throw std::logic_error("noise (" + path + "): the observation has no wavelength grid");
  if (!sky_aperture_arcsec2 && !(obs.axes.spaxel_arcsec > 0.0))
    throw std::logic_error("noise (" + path + "): the observation has no spaxel size");
  if (sky_aperture_arcsec2 && !(*sky_aperture_arcsec2 > 0.0))
    throw std::logic_error("noise (" + path + "): a sky aperture of no area");
  const std::string& medium = obs.axes.wavelength_medium;
  const double band_lo = grid.edge(0), band_hi = grid.edge(n_wave);
  if (!extinction.covers(band_lo, band_hi))
    throw ConfigError(params.extinction_key + ": " + extinction.file + " covers " +
                      angstrom_text(extinction.wavelength_angstrom.front()) + "-" +
                      angstrom_text(extinction.wavelength_angstrom.back()) +
                      " A, not the cube's band " + angstrom_text(band_lo) + "-" +
                      angstrom_text(band_hi) + " A");
  const std::vector<double> sky_flambda =
      sky_in_bins(sky, params.sky_mag_arcsec2, grid, n_wave, medium,
                  obs.telescope_lsf_fwhm_angstrom, params.sky_file_key);
  const double area_cm2 = params.collecting_area_m2 * 1e4;
  const double time_s = params.exposure_s * params.n_exposures;
  const double aperture_arcsec2 =
      sky_aperture_arcsec2.value_or(obs.axes.spaxel_arcsec * obs.axes.spaxel_arcsec);
  const double hc_erg_angstrom = kPlanckErgS * kSpeedOfLightKms * 1e5 * 1e8;  // h c in erg A
  ExposureBins bins;
  bins.wavelength_angstrom.resize(static_cast<std::size_t>(n_wave));
  bins.electrons_per_unit.resize(static_cast<std::size_t>(n_wave));
  bins.sky_electrons.resize(static_cast<std::size_t>(n_wave));
  for (int k = 0; k < n_wave; ++k) {
    const double lambda = grid.centre(k), width = grid.width(k);
    // A photon's energy is h c / lambda in vacuum.
    const double photon_erg =
        hc_erg_angstrom / (medium == "air" ? vacuum_from_air(lambda) : lambda);
    // Photons per (erg/s/cm^2/A) collected in the bin over the exposures, before the atmosphere.
    const double collected = area_cm2 * params.throughput.at(lambda) * time_s * width / photon_erg;
    const double transmitted = std::pow(10.0, -0.4 * extinction.at(lambda) * params.airmass);
    const std::size_t i = static_cast<std::size_t>(k);
    bins.wavelength_angstrom[i] = lambda;
    bins.electrons_per_unit[i] = unit_scale * collected * transmitted;
    bins.sky_electrons[i] = sky_flambda[i] * aperture_arcsec2 * collected;
  }
  bins.dark_electrons =
      params.dark_e_per_pixel_s * time_s * params.pixels_per_voxel;  // t = n x exposure_s
  bins.read_variance =
      params.read_noise_e * params.read_noise_e * params.n_exposures * params.pixels_per_voxel;
  return bins;
}

long long counter_poisson(std::uint64_t key, double mean) {
  if (!(mean > 0.0)) return 0;
  CounterStream u(key, 2);  // draws 0 and 1 are the read noise's
  if (mean > kPoissonNormalAbove) return std::llround(mean + std::sqrt(mean) * u.normal());
  if (mean < 10.0) {
    // Knuth (TAOCP vol. 2, 3.4.1): the number of uniforms whose running product stays above
    // exp(-mean).
    const double limit = std::exp(-mean);
    long long k = 0;
    double product = u.uniform();
    while (product > limit) {
      ++k;
      product *= u.uniform();
    }
    return k;
  }
  // PTRS: Hormann 1993, "The transformed rejection method for generating Poisson random
  // variables", Insurance: Mathematics and Economics 12, 39, algorithm PTRS (valid for mean >= 10).
  const double slam = std::sqrt(mean), loglam = std::log(mean);
  const double b = 0.931 + 2.53 * slam;
  const double a = -0.059 + 0.02483 * b;
  const double inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
  const double vr = 0.9277 - 3.6224 / (b - 2.0);
  for (;;) {
    const double uu = u.uniform() - 0.5;
    const double v = u.uniform();
    const double us = 0.5 - std::abs(uu);
    const double kd = std::floor((2.0 * a / us + b) * uu + mean + 0.43);
    // Far in the tails (us near 0) kd may exceed any count: rejected (the test below would).
    if (kd < 0.0 || kd > 4.0 * kPoissonNormalAbove) continue;
    const long long k = static_cast<long long>(kd);
    if (us >= 0.07 && v <= vr) return k;
    if (us < 0.013 && v > us) continue;
    if (std::log(v) + std::log(inv_alpha) - std::log(a / (us * us) + b) <=
        -mean + static_cast<double>(k) * loglam - std::lgamma(static_cast<double>(k) + 1.0))
      return k;
  }
}

ExposureBins apply_exposure_noise(const ExposureParams& params, const SkySpectrum& sky,
                                  const ExtinctionCurve& extinction, const Observation& obs,
                                  std::uint64_t seed, Cube& cube, const std::string& path,
                                  std::optional<double> sky_aperture_arcsec2) {
  if (cube.data.size() != cube.shape.n_voxels())
    throw std::logic_error("noise: the cube's data does not match its shape");
  if (!cube.variance.empty())
    throw ConfigError("noise (" + path + "): the cube already has noise (a second noise stage?)");
  const double unit_scale = flux_unit_scale(cube.unit, path);
  const int n_wave = cube.shape.n_wave;
  ExposureBins bins =
      exposure_bins(params, sky, extinction, obs, unit_scale, n_wave, path, sky_aperture_arcsec2);
  // The sky-subtraction residual: one normal per wavelength, from a stream of its own.
  std::vector<double> residual(static_cast<std::size_t>(n_wave), 0.0);
  if (params.sky_residual_fraction > 0.0) {
    const std::uint64_t residual_state = counter_state(seed ^ 0x736b79726573ULL);  // "skyres"
    for (int k = 0; k < n_wave; ++k)
      residual[static_cast<std::size_t>(k)] =
          params.sky_residual_fraction * bins.sky_electrons[static_cast<std::size_t>(k)] *
          counter_normal_of_state(residual_state, static_cast<std::uint64_t>(k));
  }
  cube.variance = large_vector<float>(cube.data.size());
  const std::uint64_t state = counter_state(seed);
  const double read_sigma = std::sqrt(bins.read_variance);
  const long long n = static_cast<long long>(cube.data.size());
  float* data = cube.data.data();
  float* variance = cube.variance.data();
  std::size_t blind = 0;  // voxels where the throughput is 0: nothing detected
  long long tiny = 0;     // variances below float32's normal range (noise.h)
  // The counts and the variance in double; the float cube takes each result rounded once.
#pragma omp parallel for schedule(static) reduction(+ : blind, tiny)
  for (long long i = 0; i < n; ++i) {
    const std::size_t k = static_cast<std::size_t>(i % n_wave);
    const double c = bins.electrons_per_unit[k];
    const double signal = data[i];
    if (std::isnan(signal) || !(c > 0.0)) {  // outside the aperture, or no throughput
      blind += !std::isnan(signal);
      data[i] = std::numeric_limits<float>::quiet_NaN();
      variance[i] = data[i];
      continue;
    }
    const double source = std::max(signal, 0.0) * c;
    const double background = bins.sky_electrons[k] + bins.dark_electrons;
    const std::uint64_t key = counter_key(state, static_cast<std::uint64_t>(i));
    CounterStream draws(key, 0);
    const double counts = static_cast<double>(counter_poisson(key, source + background)) +
                          read_sigma * draws.normal();
    data[i] = static_cast<float>((counts - background + residual[k]) / c);
    const double var = (source + background + bins.read_variance) / (c * c);
    variance[i] = static_cast<float>(var);
    tiny += var > 0.0 && var < std::numeric_limits<float>::min();
  }
  warn_tiny_variances(tiny, cube.unit, path);
  if (blind > 0)
    spdlog::warn("noise ({}): {} voxels where the throughput is 0 are NaN (nothing detected)", path,
                 blind);
  return bins;
}

}  // namespace ifusim
