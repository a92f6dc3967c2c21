#include "stages/noise/noise.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>

#include "data/host_memory.h"
#include "stages/noise/noise_blocks.h"
#include "stages/noise/random.h"

namespace ifusim {

NoiseParams NoiseParams::from_json(JsonParams p) {
  NoiseParams out;
  out.exposure_model = p.choice("model", {"snr", "exposure"}, "snr") == "exposure";
  if (out.exposure_model) {
    out.exposure = ExposureParams::from_json(p);
  }
  if (p.has("seed")) {
    const long long s = p.integer("seed");
    p.require(s >= 0, "seed", "an integer >= 0", s);
    out.seed = static_cast<std::uint64_t>(s);
  }
  if (out.exposure_model) {
    p.finish();
    return out;
  }
  out.snr = p.number("snr");
  p.require(out.snr > 0.0, "snr", "a number > 0", out.snr);
  out.per_angstrom = p.choice("per", {"pixel", "angstrom"}, "pixel") == "angstrom";
  out.background_fraction = p.number("background_fraction", 0.5);
  p.require(out.background_fraction >= 0.0 && out.background_fraction <= 1.0, "background_fraction",
            "a number in [0, 1]", out.background_fraction);
  if (p.has("reference")) {
    out.reference = p.number("reference");
    p.require(*out.reference > 0.0, "reference", "a number > 0 (in the cube's units)",
              *out.reference);
  }
  out.reference_threshold = p.number("reference_threshold", 0.1);
  p.require(out.reference_threshold >= 0.0 && out.reference_threshold <= 1.0, "reference_threshold",
            "a number in [0, 1]", out.reference_threshold);
  p.finish();
  return out;
}

double counter_normal(std::uint64_t seed, std::uint64_t index) {
  return counter_normal_of_state(counter_state(seed), index);
}

void warn_tiny_variances(long long count, const std::string& unit, const std::string& path) {
  if (count > 0)
    spdlog::warn(
        "noise ({}): {} variances are below float32's normal range (1.2e-38 {}^2), in which the "
        "cube is held and written: give stages.flux.unit_scale a smaller power of ten",
        path, count, unit);
}

double noise_reference_level(const Cube& cube, double threshold) {
  const std::vector<double> mean = spaxel_means(cube);
  // Spaxels outside the aperture (NaN, see stages/aperture_mask) take no part.
  double brightest = 0.0;
  for (double m : mean)
    if (m > brightest) brightest = m;
  if (!(brightest > 0.0)) return 0.0;
  std::vector<double> bright;
  for (double m : mean)
    if (m > 0.0 && m >= threshold * brightest) bright.push_back(m);
  // The median (the lower of the two middle values for an even count: an element, exactly).
  auto mid = bright.begin() + (bright.size() - 1) / 2;
  std::nth_element(bright.begin(), mid, bright.end());
  return *mid;
}

double apply_noise(const NoiseParams& params, double wave_step_angstrom, std::uint64_t seed,
                   Cube& cube, const std::string& path,
                   const std::vector<double>& plane_width_angstrom) {
  if (cube.data.size() != cube.shape.n_voxels())
    throw std::logic_error("noise: the cube's data does not match its shape");
  if (!cube.variance.empty())
    throw ConfigError("noise (" + path + "): the cube already has noise (a second noise stage?)");
  const double s_ref = params.reference ? *params.reference
                                        : noise_reference_level(cube, params.reference_threshold);
  if (!(s_ref > 0.0))
    throw ConfigError("noise (" + path +
                      "): the cube has no positive signal to set the reference "
                      "level from (did any star fall in the field? positions must be relative "
                      "to the galaxy's centre); give " +
                      path + ".reference (a number > 0 in the cube's units)");
  double snr_pixel = params.snr;
  if (params.per_angstrom) {
    if (!(wave_step_angstrom > 0.0))
      throw ConfigError("noise (" + path +
                        "): \"per\": \"angstrom\" needs the wavelength step, "
                        "but the observation's is " +
                        std::to_string(wave_step_angstrom) + " A");
    snr_pixel = params.snr * std::sqrt(wave_step_angstrom);
  }
  const double sigma_ref = s_ref / snr_pixel;
  const double var_bg = params.background_fraction * sigma_ref * sigma_ref;
  const double shot = (1.0 - params.background_fraction) * sigma_ref * sigma_ref / s_ref;
  spdlog::debug("noise: S_ref = {}, S/N per pixel {} there, sigma_bg = {}", s_ref, snr_pixel,
                std::sqrt(var_bg));
  // A logarithmic grid's planes differ in width: a per-Angstrom S/N is sqrt(width) per pixel
  // plane by plane (per_plane empty on a linear grid, whose planes share var_bg and shot).
  std::vector<std::pair<double, double>> per_plane;
  if (params.per_angstrom && !plane_width_angstrom.empty()) {
    if (plane_width_angstrom.size() != static_cast<std::size_t>(cube.shape.n_wave))
      throw std::logic_error("noise: the plane widths do not match the cube's wavelengths");
    for (const double width : plane_width_angstrom) {
      const double sigma = s_ref / (params.snr * std::sqrt(width));
      per_plane.emplace_back(params.background_fraction * sigma * sigma,
                             (1.0 - params.background_fraction) * sigma * sigma / s_ref);
    }
  }
  const auto n_wave = static_cast<std::size_t>(cube.shape.n_wave);
  // In huge pages: 1.3 GB of 4 kB pages on MUSE-WFM is ~330,000 page faults (data/host_memory.h).
  cube.variance = large_vector<float>(cube.data.size());
  const std::uint64_t state = counter_state(seed);
  const ZigguratTables& tables = ziggurat_tables();
  const std::size_t n = cube.data.size();
  // In blocks of voxels (noise_blocks.h: in vector registers): the normals whose first word is
  // accepted, the few others one by one, then the model; each voxel's values are a function of
  // the seed and its index alone, so the blocks' split over threads does not matter.
  constexpr std::size_t kBlock = 1024;
  const long long n_blocks = static_cast<long long>((n + kBlock - 1) / kBlock);
  long long tiny = 0;  // variances below float32's normal range (they lose digits, or vanish)
#pragma omp parallel reduction(+ : tiny)
  {
    std::vector<double> z(kBlock), bg(kBlock, var_bg), shot_of(kBlock, shot);
#pragma omp for schedule(static)
    for (long long b = 0; b < n_blocks; ++b) {
      const std::size_t first = static_cast<std::size_t>(b) * kBlock;
      const std::size_t m = std::min(kBlock, n - first);
      ziggurat_first_draws(state, first, m, tables, z.data());
      for (std::size_t l = 0; l < m; ++l)
        if (std::isnan(z[l])) z[l] = counter_normal_of_state(state, first + l, tables);
      if (!per_plane.empty())
        for (std::size_t l = 0; l < m; ++l) {
          const auto& [plane_bg, plane_shot] = per_plane[(first + l) % n_wave];
          bg[l] = plane_bg;
          shot_of[l] = plane_shot;
        }
      tiny += apply_snr_model(cube.data.data() + first, cube.variance.data() + first, bg.data(),
                              shot_of.data(), z.data(), m);
    }
  }
  warn_tiny_variances(tiny, cube.unit, path);
  return s_ref;
}

namespace {

class NoiseStage final : public Stage {
 public:
  NoiseStage(NoiseParams params, std::string path, ExposureSky sky)
      : params_(std::move(params)), path_(std::move(path)), sky_(std::move(sky)) {}
  std::string name() const override { return "noise"; }
  std::vector<std::string> needs() const override {
    // The exposure model counts photons of a flux cube.
    if (params_.exposure_model) return {"cube", "cube_flux"};
    return {"cube"};
  }
  std::vector<Provided> provides() const override {
    return {{"variance", "(cube unit)^2", "the variance of every voxel (the noise drawn)"}};
  }
  std::vector<MemoryItem> memory_estimate(const PlanContext& c) const override {
    return {{"variance (float, host)", c.n_voxels() * sizeof(float), false, ""}};
  }

  void run(RunState& state) override {
    if (!state.cube) throw std::logic_error("noise: no cube (psum must run first)");
    shape_ = state.cube->shape;
    const std::uint64_t seed = params_.seed.value_or(state.observation.seed);
    if (params_.exposure_model) {
      if (!sky_.sky || !sky_.extinction)
        throw std::logic_error("noise (" + path_ +
                               "): the exposure model was made without its sky files' loaders");
      const ExposureParams& e = params_.exposure;
      const ExposureBins bins = apply_exposure_noise(e, *sky_.sky, *sky_.extinction,
                                                     state.observation, seed, *state.cube, path_);
      const std::size_t mid = bins.sky_electrons.size() / 2;
      spdlog::info(
          "noise: {} x {} s at airmass {}, sky V = {} mag/arcsec^2: at {:.0f} A a spaxel gets "
          "{:.3g} "
          "sky electrons per bin, {:.3g} electrons per {} (seed {})",
          e.n_exposures, e.exposure_s, e.airmass, e.sky_mag_arcsec2, bins.wavelength_angstrom[mid],
          bins.sky_electrons[mid], bins.electrons_per_unit[mid], state.cube->unit, seed);
      return;
    }
    const Observation& obs = state.observation;
    const double s_ref = apply_noise(params_, obs.axes.width_angstrom(0), seed, *state.cube, path_,
                                     noise_plane_widths(obs, state.cube->shape.n_wave));
    spdlog::info("noise: S/N {} per {} at the reference level {} {} (seed {})", params_.snr,
                 params_.per_angstrom ? "Angstrom" : "pixel", s_ref, state.cube->unit, seed);
  }

  // The gradient is that of the expected (noiseless) cube: the noise drawn is a constant of the
  // loss (its data term holds it), so the adjoint is the identity on the data, and the variance
  // is not differentiated (docs/gradients.md).
  bool adjoint(const RunState&, CubeCotangent& cotangent) const override {
    check_cotangent_shape("noise", shape_, cotangent);
    return true;
  }
  bool tangent(const RunState&, CubeCotangent& tangent) const override {
    check_cotangent_shape("noise", shape_, tangent);
    return true;
  }

 private:
  NoiseParams params_;
  std::string path_;
  ExposureSky sky_;  // the exposure model's sky and extinction
  CubeShape shape_;  // of the cube run() was given, for the adjoint's check
};

}  // namespace

std::vector<double> noise_plane_widths(const Observation& obs, int n_wave) {
  std::vector<double> widths;
  if (!obs.axes.is_log()) return widths;
  const WaveGrid grid = obs.simulated_grid();
  for (int k = 0; k < n_wave; ++k) widths.push_back(grid.width(k));
  return widths;
}

nlohmann::json noise_params_json(const nlohmann::json& params) {
  // What the telescope gives the exposure model, which the stage inherits from the run config,
  // is no part of the S/N model.
  nlohmann::json own = params;
  const bool snr_model = own.is_object() && (!own.contains("model") || own["model"] == "snr");
  if (snr_model)
    for (const char* key : kExposureTelescopeKeys) own.erase(key);
  return own;
}

ExposureSky load_exposure_sky(const NoiseParams& p, const StageResources& resources) {
  ExposureSky out;
  if (p.exposure_model && resources.load_sky_spectrum && resources.load_extinction_curve) {
    out.sky = resources.load_sky_spectrum(p.exposure.sky_file, p.exposure.sky_file_key);
    out.extinction =
        resources.load_extinction_curve(p.exposure.extinction_file, p.exposure.extinction_key);
  }
  return out;
}

std::unique_ptr<Stage> make_noise_stage(const nlohmann::json& params, const std::string& path,
                                        const StageResources& resources) {
  NoiseParams p = NoiseParams::from_json(JsonParams(noise_params_json(params), path));
  ExposureSky sky = load_exposure_sky(p, resources);
  return std::make_unique<NoiseStage>(std::move(p), path, std::move(sky));
}

StageEntry noise_stage() {
  return {
      .name = "noise",
      .summary =
          "add seeded noise (a target S/N, or an exposure's photon counts with the night "
          "sky), fill the variance",
      .kind = StageKind::cube,
      .make =
          [](const nlohmann::json& params, const std::string& path,
             const StageResources& resources) { return make_noise_stage(params, path, resources); },
      .inherits = {{"collecting_area_m2", "telescope.collecting_area_m2"},
                   {"throughput", "telescope.throughput"},
                   {"site", "telescope.site"}},
      .examples = {{{"snr", 20}, {"reference", 1.0}, {"seed", 1}},
                   {{"model", "exposure"},
                    {"exposure_s", 900},
                    {"collecting_area_m2", 49.3},
                    {"throughput", 0.3},
                    {"site", "paranal"}},
                   {{"model", "exposure"},
                    {"exposure_s", 900},
                    {"collecting_area_m2", 49.3},
                    {"throughput", 0.3},
                    {"extinction", "sky/kpnoextinct.dat"}}}};
}

}  // namespace ifusim
