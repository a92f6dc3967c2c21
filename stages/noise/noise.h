#pragma once
// noise: observational noise, drawn once on the reduced cube after psum (noise drawn per shard
// and then summed would be wrong), with the model variance stored in cube.variance. It must be
// the last stage that changes the cube's data (psf and lsf refuse a cube that has noise).
//
// Model (the CCD equation, e.g. Howell 2006, "Handbook of CCD Astronomy", sec. 4.4, written in
// the cube's own units): each voxel's variance is a background term (sky, dark current and read
// noise: independent of the source) plus the source's own photon (shot) noise, proportional to
// its signal S:
//   sigma^2(voxel) = sigma_bg^2 + max(S(voxel), 0) * a.
// The two constants are set from a target signal-to-noise `snr` reached at a reference signal
// level S_ref, and the fraction `background_fraction` (f, default 0.5) of the variance that the
// background contributes at S_ref:
//   sigma_ref = S_ref / snr,   sigma_bg^2 = f sigma_ref^2,   a = (1 - f) sigma_ref^2 / S_ref.
// f = 1 is the sky-dominated (constant sigma) limit, f = 0 pure shot noise.
//
// The target is per wavelength pixel (`per`: "pixel", default) or per Angstrom ("angstrom"):
// n = 1 A / step pixels make up one Angstrom, and independent pixels of equal S/N add to
// sqrt(n) times it, so snr_pixel = snr_angstrom sqrt(step / 1 A).
//
// S_ref: the `reference` parameter (in the cube's units) if given; otherwise the median, over
// the spaxels whose mean signal (over wavelength) is at least `reference_threshold` (0.1) times
// the brightest spaxel's, of those spaxels' mean signals: a typical level across the bright
// body of the galaxy.
//
// The cube's data gets sigma(voxel) * z(voxel), z a standard normal. Random numbers are
// counter-based: z(voxel) is a Ziggurat draw (Marsaglia & Tsang 2000) from position `voxel` of
// the SplitMix64 stream (Steele, Lea & Flood 2014, OOPSLA) of the seed, with its rare retries
// from a stream keyed by the voxel (stages/noise/random.h), so the cube is the same for any
// number of threads and any schedule. The seed is `seed` if given, else the
// observation's.
//
// That is the default model, `"model": "snr"`, for presets without exposure data. `"model":
// "exposure"` counts photons instead: exposure time, telescope area and throughput, the site's
// extinction, the night sky, dark current and read noise (stages/noise/exposure.h).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_params.h"
#include "stages/noise/exposure.h"
#include "stages/stage.h"

namespace ifusim {

struct NoiseParams {
  bool exposure_model = false;  // "model": "exposure" (else "snr")
  ExposureParams exposure;      // the exposure model's
  double snr = 0.0;
  bool per_angstrom = false;
  double background_fraction = 0.5;
  std::optional<double> reference;
  double reference_threshold = 0.1;
  std::optional<std::uint64_t> seed;
  static NoiseParams from_json(JsonParams params);
};

// The reference signal level of a cube (see above), without `reference`: 0 if no spaxel has a
// positive mean.
double noise_reference_level(const Cube& cube, double threshold);

// A standard normal for counter `index` of the stream of `seed`: the same for any thread count.
double counter_normal(std::uint64_t seed, std::uint64_t index);

// Warns (naming stages.flux.unit_scale) where `count` variances fell below float32's normal
// range: the cube holds them as float32 (data/datacube.h), so a flux in too large a unit (1
// erg/s/cm^2/A: variances of 1e-40) loses their digits.
void warn_tiny_variances(long long count, const std::string& unit, const std::string& path);

// Adds the noise to `cube.data` and fills `cube.variance`; `seed` as resolved by the stage.
// `wave_step_angstrom` is needed for per-Angstrom targets; on a logarithmic grid
// `plane_width_angstrom` gives each plane's width instead. Returns S_ref.
double apply_noise(const NoiseParams& params, double wave_step_angstrom, std::uint64_t seed,
                   Cube& cube, const std::string& path = "noise",
                   const std::vector<double>& plane_width_angstrom = {});

// The plane widths apply_noise takes for `obs`: each simulated plane's (margin included) on a
// logarithmic grid, none (its constant step is used) on a linear one.
std::vector<double> noise_plane_widths(const Observation& obs, int n_wave);

// The telescope keys the exposure model inherits from the run config (telescope.X, see
// noise_stage's `inherits`; the fibres stage's `noise` inherits them too).
inline constexpr const char* kExposureTelescopeKeys[] = {"collecting_area_m2", "throughput",
                                                         "site"};
// `params` (a noise stage's, or the fibres stage's `noise`) without those keys under the S/N
// model, which reads none of them: what NoiseParams::from_json takes.
nlohmann::json noise_params_json(const nlohmann::json& params);

// The exposure model's sky spectrum and extinction table, read with the resources' loaders; null
// under the S/N model or without loaders (a stage made outside a run, which refuses to run).
struct ExposureSky {
  std::shared_ptr<const SkySpectrum> sky;
  std::shared_ptr<const ExtinctionCurve> extinction;
};
ExposureSky load_exposure_sky(const NoiseParams& params, const StageResources& resources);

StageEntry noise_stage();
// The exposure model reads its sky spectrum and extinction table with the resources' loaders
// when they are set (a run's); without them it is made, and refuses to run.
std::unique_ptr<Stage> make_noise_stage(const nlohmann::json& params, const std::string& path,
                                        const StageResources& resources = {});

}  // namespace ifusim
