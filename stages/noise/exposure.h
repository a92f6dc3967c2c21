#pragma once
// The noise stage's exposure model (`"model": "exposure"`): photon counts of an exposure of the
// cube's source through the atmosphere, the telescope and the instrument, with the night sky,
// the detector's dark current and read noise, then the sky subtracted, as a pipeline delivers
// the cube (data: the sky-subtracted signal; STAT, cube.variance: its variance; both in the
// cube's flux units). docs/observation_model.md describes it, with what stays approximate.
//
// Electrons per voxel (spaxel, wavelength bin k of width dl, centre l_k), summed over the
// n_exposures exposures of exposure_s seconds each (t = n_exposures x exposure_s):
//   conversion  C_k = unit_scale x A x T(l_k) x 10^(-0.4 k(l_k) X) x t x dl / (h c / l_k,vac)
//                     electrons per cube unit (the cube holds F_lambda / unit_scale per spaxel,
//                     erg/s/cm^2/A: stages/flux), A the collecting area, T the end-to-end
//                     throughput (telescope + instrument + detector), k(l) the site's extinction
//                     in mag per airmass (Patat et al. 2011 for Paranal), X the airmass;
//   source      N_src = max(S, 0) x C_k;
//   sky         N_sky = s_k x A x T(l_k) x t x dl x Omega / (h c / l_k,vac), s_k the sky's
//                     f_lambda per arcsec^2 (below), Omega the spaxel's solid angle (arcsec^2;
//                     for fibre spectra the core's, pi r_core^2: stages/fibres);
//                     the sky is emitted in the atmosphere and is not extinguished;
//   dark        N_dark = dark current x exposure_s x n_exposures x pixels_per_voxel;
//   read noise  R^2 = read_noise^2 x n_exposures x pixels_per_voxel.
// The counts are n = Poisson(N_src + N_sky + N_dark) + R z (Howell 2006, "Handbook of CCD
// Astronomy", sec. 4.4, the CCD equation), and the cube gets (n - N_sky - N_dark + residual) / C_k
// with variance (N_src + N_sky + N_dark + R^2) / C_k^2: the expected counts, not the drawn ones, so
// that the variance is the model's. An optional sky-subtraction residual (sky_residual_fraction
// f) adds f N_sky z_k, z_k one standard normal per wavelength bin shared by every spaxel (a
// pipeline subtracts one sky spectrum from the whole field, so its error is common to all);
// like a real pipeline's STAT, the variance does not include it.
//
// The sky: the night-sky spectrum (../shared/data/sky/paranal_sky.fits: relative level, 0.05 A
// sampling, vacuum wavelengths) is moved to the cube's medium (Morton 2000, data/wavelength.h),
// convolved with the instrument's Gaussian LSF (FWHM at each bin) and averaged over each bin
// (exactly: each 0.05 A sample is spread by the Gaussian's integral over the bin), and scaled so
// that its mean over the Johnson-Cousins V band (Bessell 1990, PASP 102, 1181, table 2) is the
// surface brightness sky_mag_arcsec2 (Vega V mag / arcsec^2; f_lambda(V = 0) = 3.631e-9
// erg/s/cm^2/A, Bessell, Castelli & Plez 1998, A&A 333, 231, table A2). Default 21.7, Paranal's
// dark sky at zenith (Patat 2008, A&A 481, 575: V = 21.6-21.8).
//
// Random numbers: counter-based, as the snr model's: voxel i draws from its own SplitMix64 stream
// (the seed's state, jumped to i), so the cube is the same for any number of threads. Poisson
// draws are exact: Knuth's multiplication method below a mean of 10, Hormann's transformed
// rejection (PTRS, Hormann 1993, Insurance: Math. Econ. 12, 39) from 10 to kPoissonNormalAbove
// (1e9) electrons, and above that the normal approximation N(mu, mu), whose skewness 1/sqrt(mu)
// < 3e-5 there is far below any other error of the model.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/json_params.h"
#include "data/datacube.h"
#include "data/resolution_curve.h"
#include "data/sky.h"
#include "data/wavelength_axis.h"

namespace ifusim {

struct Observation;

inline constexpr double kPoissonNormalAbove = 1e9;

// The Paranal dark-sky V surface brightness at zenith (Patat 2008, A&A 481, 575).
inline constexpr double kParanalDarkSkyVMagArcsec2 = 21.7;

struct ExposureParams {
  double exposure_s = 0.0;  // one exposure
  int n_exposures = 1;
  double airmass = 1.0;
  double sky_mag_arcsec2 = kParanalDarkSkyVMagArcsec2;  // V (Vega) mag / arcsec^2
  // Detector: typical of MUSE's e2v deep-depletion CCDs (read noise ~3 e-, dark current
  // ~3 e-/pixel/hour; approximate, set them per instrument).
  double dark_e_per_pixel_s = 3.0 / 3600.0;
  double read_noise_e = 3.0;
  double pixels_per_voxel = 1.0;       // detector pixels whose dark and read noise a voxel holds
  double sky_residual_fraction = 0.0;  // of the sky's counts, common to all spaxels
  double collecting_area_m2 = 0.0;     // from the telescope (telescope.collecting_area_m2)
  ResolutionCurve throughput;          // fractions, from the telescope (telescope.throughput)
  std::string sky_file = "sky/paranal_sky.fits";  // relative to $IFUSIM_DATA_DIR or absolute
  std::string extinction_file;  // from `extinction` (a site or a file) or telescope.site
  // Config keys, for errors found when the cube's band is known.
  std::string sky_file_key, extinction_key;

  // Reads the model's keys of `p` (the noise stage's parameters, "model" already read).
  static ExposureParams from_json(JsonParams& p);
};

// The extinction table of a site: "paranal" -> sky/paranalextinct.dat (Patat et al. 2011);
// "kpno" and "apo" (MaNGA's Apache Point: Kitt Peak stands in) -> sky/kpnoextinct.dat; "" for
// another name.
std::string site_extinction_file(const std::string& site);

// The mean of `sky` weighted by the Bessell (1990) V response.
double v_band_mean(const SkySpectrum& sky);

// The sky's f_lambda per arcsec^2 (erg/s/cm^2/A/arcsec^2) averaged over each bin k < n of a
// linear or logarithmic grid (in `medium` "air" or "vacuum") after a Gaussian LSF of the given
// FWHM: the relative spectrum scaled to V = sky_mag_arcsec2. Throws ConfigError naming `key` when
// the spectrum does not cover the band (with 5 sigma of the LSF beyond it) or the V band.
std::vector<double> sky_in_bins(const SkySpectrum& sky, double sky_mag_arcsec2,
                                const WaveGrid& grid, int n, const std::string& medium,
                                const ResolutionCurve& lsf_fwhm, const std::string& key);

// The power of ten of a flux cube's unit ("10**(-20)*erg/(s*cm**2*Angstrom)" -> 1e-20,
// "erg/(s*cm**2*Angstrom)" -> 1); throws ConfigError (naming `path`) for any other unit.
double flux_unit_scale(const std::string& unit, const std::string& path);

// What the model computes per wavelength bin (all n_wave long).
struct ExposureBins {
  std::vector<double> wavelength_angstrom;  // bin centres, the cube's medium
  std::vector<double> electrons_per_unit;   // C_k: electrons per cube unit in one spaxel
  std::vector<double> sky_electrons;        // N_sky per spaxel
  double dark_electrons = 0.0;              // N_dark per voxel
  double read_variance = 0.0;               // R^2 per voxel (electrons^2)
};
// `sky_aperture_arcsec2` is the solid angle whose sky one spectrum collects: a spaxel's
// (obs.axes.spaxel_arcsec^2) when not given, a fibre core's (pi r_core^2) for fibre spectra
// (stages/fibres).
ExposureBins exposure_bins(const ExposureParams& params, const SkySpectrum& sky,
                           const ExtinctionCurve& extinction, const Observation& obs,
                           double unit_scale, int n_wave, const std::string& path,
                           std::optional<double> sky_aperture_arcsec2 = std::nullopt);

// A Poisson variate of mean `mean` from the counter-based stream `key` (draws 2, 3, ...).
long long counter_poisson(std::uint64_t key, double mean);

// Adds the exposure's noise to `cube` (in flux units) and fills cube.variance; returns the bins.
// Each spectrum of `cube` (a spaxel's, or a fibre's: shape {n fibres, 1, n_wave}) collects the
// sky of `sky_aperture_arcsec2` (see exposure_bins).
ExposureBins apply_exposure_noise(const ExposureParams& params, const SkySpectrum& sky,
                                  const ExtinctionCurve& extinction, const Observation& obs,
                                  std::uint64_t seed, Cube& cube, const std::string& path,
                                  std::optional<double> sky_aperture_arcsec2 = std::nullopt);

}  // namespace ifusim
