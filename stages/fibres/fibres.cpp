#include "stages/fibres/fibres.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <span>
#include <stdexcept>
#include <unordered_map>

#include "data/host_memory.h"

namespace ifusim {

FibresParams FibresParams::from_json(JsonParams p) {
  FibresParams out;
  if (!p.has("bundle"))
    throw ConfigError(p.key_path("bundle") +
                      ": the fibres stage needs the telescope's fibre bundle (telescope.fibres: "
                      "n_fibres, core_diameter_arcsec, pitch_arcsec; docs/config.md); this "
                      "telescope has none");
  out.bundle = parse_fibre_bundle(p.object("bundle"));
  out.sigma_arcsec = p.number("sigma_arcsec", 0.7);
  p.require(out.sigma_arcsec > 0.0, "sigma_arcsec", "a number > 0 (arcsec)", out.sigma_arcsec);
  out.radius_limit_arcsec = p.number("radius_limit_arcsec", 1.6);
  p.require(out.radius_limit_arcsec > 0.0, "radius_limit_arcsec", "a number > 0 (arcsec)",
            out.radius_limit_arcsec);
  if (p.has("noise")) {
    // The telescope's keys the exposure model inherits (fibres_stage's `inherits`) are dropped
    // under the S/N model, as the noise stage's maker drops them.
    p.object("noise");  // an object, or an error naming the key
    out.noise =
        NoiseParams::from_json(JsonParams(noise_params_json(p.raw("noise")), p.key_path("noise")));
  }
  p.finish();
  return out;
}

namespace {

// Spaxel (ix, iy)'s centre, arcsec from the field's centre.
double spaxel_centre(int i, int n, double spaxel_arcsec) {
  return (i - 0.5 * (n - 1)) * spaxel_arcsec;
}

// The primitive of a circle's half chord sqrt(r^2 - x^2): (x sqrt(r^2 - x^2) + r^2 asin(x / r))
// / 2.
double half_chord_primitive(double x, double r) {
  x = std::clamp(x, -r, r);
  return 0.5 * (x * std::sqrt(r * r - x * x) + r * r * std::asin(x / r));
}

// The area of the circle of radius r centred on the origin inside the rectangle [x0, x1] x
// [y0, y1], exactly: over x, the chord (-c(x), c(x)), c = sqrt(r^2 - x^2), clipped to [y0, y1].
// Between the x where c meets y0 or y1 (or the circle ends) the clipped chord's ends are each
// either c, -c or an edge, and integrate in closed form.
double circle_in_rectangle(double x0, double x1, double y0, double y1, double r) {
  std::vector<double> xs = {x0, x1};
  for (double y : {y0, y1})
    if (std::abs(y) < r) {
      xs.push_back(std::sqrt(r * r - y * y));
      xs.push_back(-xs.back());
    }
  xs.push_back(r);
  xs.push_back(-r);
  std::erase_if(xs, [&](double x) { return x < x0 || x > x1; });
  std::sort(xs.begin(), xs.end());
  double area = 0.0;
  for (std::size_t i = 0; i + 1 < xs.size(); ++i) {
    const double a = xs[i], b = xs[i + 1];
    const double m = 0.5 * (a + b);
    if (!(b > a) || std::abs(m) >= r) continue;
    const double c = std::sqrt(r * r - m * m);
    if (std::min(c, y1) <= std::max(-c, y0)) continue;  // the chord misses the rectangle here
    const double chord = half_chord_primitive(b, r) - half_chord_primitive(a, r);
    const double top = c < y1 ? chord : y1 * (b - a);
    const double bottom = -c > y0 ? -chord : y0 * (b - a);
    area += top - bottom;
  }
  return area;
}

// The fraction of a square spaxel (centre cx, cy, side s) inside a fibre's core (centre fx, fy,
// radius r).
double overlap_fraction(double cx, double cy, double s, double fx, double fy, double r) {
  const double h = 0.5 * s;
  const double dx = std::abs(cx - fx), dy = std::abs(cy - fy);
  const double near_x = std::max(dx - h, 0.0), near_y = std::max(dy - h, 0.0);
  if (near_x * near_x + near_y * near_y >= r * r) return 0.0;
  const double far_x = dx + h, far_y = dy + h;
  if (far_x * far_x + far_y * far_y <= r * r) return 1.0;
  return circle_in_rectangle(cx - h - fx, cx + h - fx, cy - h - fy, cy + h - fy, r) / (s * s);
}

// The SDSS bands at whose pivot wavelengths the DRP stores correlation matrices (Doi et al.
// 2010, AJ 139, 1628, table 4: g 4702, r 6175, i 7491, z 8946 A).
struct Band {
  const char* extname;
  double wavelength_angstrom;
};
constexpr Band kCorrelationBands[] = {
    {"GCORREL", 4702.0}, {"RCORREL", 6175.0}, {"ICORREL", 7491.0}, {"ZCORREL", 8946.0}};

}  // namespace

FibreSampling fibre_sampling(const FibresParams& params, const CubeShape& shape,
                             double spaxel_arcsec) {
  const FibreBundle& b = params.bundle;
  const FibrePositions fibres = fibre_positions(b);
  const double r = 0.5 * b.core_diameter_arcsec;
  FibreSampling out;
  for (std::size_t d = 0; d < b.dither_x_arcsec.size(); ++d)
    for (std::size_t f = 0; f < fibres.x_arcsec.size(); ++f) {
      const double fx = fibres.x_arcsec[f] + b.dither_x_arcsec[d];
      const double fy = fibres.y_arcsec[f] + b.dither_y_arcsec[d];
      out.x_arcsec.push_back(fx);
      out.y_arcsec.push_back(fy);
      std::vector<std::pair<std::size_t, double>> seen;
      // The spaxels whose centres lie within r + a spaxel of the fibre's.
      const int ix0 = std::max(
          0, static_cast<int>(std::floor((fx - r) / spaxel_arcsec + 0.5 * (shape.nx - 1))) - 1);
      const int ix1 = std::min(
          shape.nx - 1,
          static_cast<int>(std::ceil((fx + r) / spaxel_arcsec + 0.5 * (shape.nx - 1))) + 1);
      const int iy0 = std::max(
          0, static_cast<int>(std::floor((fy - r) / spaxel_arcsec + 0.5 * (shape.ny - 1))) - 1);
      const int iy1 = std::min(
          shape.ny - 1,
          static_cast<int>(std::ceil((fy + r) / spaxel_arcsec + 0.5 * (shape.ny - 1))) + 1);
      for (int iy = iy0; iy <= iy1; ++iy)
        for (int ix = ix0; ix <= ix1; ++ix) {
          const double a = overlap_fraction(spaxel_centre(ix, shape.nx, spaxel_arcsec),
                                            spaxel_centre(iy, shape.ny, spaxel_arcsec),
                                            spaxel_arcsec, fx, fy, r);
          if (a > 0.0) seen.emplace_back(static_cast<std::size_t>(iy) * shape.nx + ix, a);
        }
      out.overlap.push_back(std::move(seen));
    }
  return out;
}

Cube fibre_spectra(const FibreSampling& sampling, const Cube& cube) {
  Cube out;
  out.shape = {static_cast<int>(sampling.size()), 1, cube.shape.n_wave};
  out.axes = cube.axes;
  out.unit = cube.unit;
  const std::size_t n_wave = static_cast<std::size_t>(cube.shape.n_wave);
  out.data = large_vector<float>(sampling.size() * n_wave);
  // Each fibre's sum in double, rounded once to the float cube's values (data/datacube.h).
#pragma omp parallel
  {
    std::vector<double> spectrum(n_wave);
#pragma omp for schedule(dynamic)
    for (long long f = 0; f < static_cast<long long>(sampling.size()); ++f) {
      std::fill(spectrum.begin(), spectrum.end(), 0.0);
      for (const auto& [spaxel, a] : sampling.overlap[static_cast<std::size_t>(f)]) {
        const float* in = cube.data.data() + spaxel * n_wave;
        for (std::size_t k = 0; k < n_wave; ++k) spectrum[k] += a * in[k];
      }
      std::copy(
          spectrum.begin(), spectrum.end(),
          out.data.begin() + static_cast<std::ptrdiff_t>(f) * static_cast<std::ptrdiff_t>(n_wave));
    }
  }
  return out;
}

std::vector<std::vector<std::pair<std::size_t, double>>> shepard_weights(
    const FibresParams& params, const FibreSampling& sampling, const CubeShape& shape,
    double spaxel_arcsec) {
  std::vector<std::vector<std::pair<std::size_t, double>>> out(shape.n_spaxels());
  const double r_lim2 = params.radius_limit_arcsec * params.radius_limit_arcsec;
  const double two_sigma2 = 2.0 * params.sigma_arcsec * params.sigma_arcsec;
  for (int iy = 0; iy < shape.ny; ++iy)
    for (int ix = 0; ix < shape.nx; ++ix) {
      const double x = spaxel_centre(ix, shape.nx, spaxel_arcsec);
      const double y = spaxel_centre(iy, shape.ny, spaxel_arcsec);
      auto& w = out[static_cast<std::size_t>(iy) * shape.nx + ix];
      double sum = 0.0;
      for (std::size_t f = 0; f < sampling.size(); ++f) {
        const double dx = sampling.x_arcsec[f] - x, dy = sampling.y_arcsec[f] - y;
        const double r2 = dx * dx + dy * dy;
        if (r2 >= r_lim2) continue;
        w.emplace_back(f, std::exp(-r2 / two_sigma2));
        sum += w.back().second;
      }
      for (auto& [f, weight] : w) weight /= sum;
    }
  return out;
}

std::size_t apply_fibres(const FibresParams& params, double spaxel_arcsec,
                         const std::vector<double>& plane_wavelength_angstrom,
                         double wave_step_angstrom, int margin_wavelengths, std::uint64_t seed,
                         Cube& cube, const std::string& path,
                         const std::vector<double>& plane_width_angstrom,
                         const FibreExposureInputs& exposure) {
  const CubeShape shape = cube.shape;
  const std::size_t n_wave = static_cast<std::size_t>(shape.n_wave);
  if (cube.data.size() != shape.n_voxels() || plane_wavelength_angstrom.size() != n_wave)
    throw std::logic_error("fibres: the cube's data or wavelengths do not match its shape");
  if (!cube.variance.empty())
    throw ConfigError("fibres (" + path +
                      "): the cube already has noise; the fibres draw theirs per fibre spectrum "
                      "(give " +
                      path + ".noise and no noise stage)");
  const FibreSampling sampling = fibre_sampling(params, shape, spaxel_arcsec);
  Cube fibres = fibre_spectra(sampling, cube);
  if (params.noise && params.noise->exposure_model) {
    if (!exposure.sky || !exposure.extinction || !exposure.observation)
      throw std::logic_error("fibres (" + path +
                             "): the exposure model was made without its sky files' loaders");
    apply_exposure_noise(params.noise->exposure, *exposure.sky, *exposure.extinction,
                         *exposure.observation, seed, fibres, path + ".noise",
                         fibre_core_arcsec2(params.bundle));
  } else if (params.noise) {
    apply_noise(*params.noise, wave_step_angstrom, seed, fibres, path + ".noise",
                plane_width_angstrom);
  }

  const auto weights = shepard_weights(params, sampling, shape, spaxel_arcsec);
  const double r = 0.5 * params.bundle.core_diameter_arcsec;
  // Surface brightness kept: a fibre holds the light of pi r^2, a spaxel that of s^2.
  const double area_ratio = spaxel_arcsec * spaxel_arcsec / (std::numbers::pi * r * r);
  const double nan = std::nan("");
  const bool noisy = !fibres.variance.empty();
  if (noisy) cube.variance = large_vector<float>(cube.data.size());
    // Each spaxel's sums in double, rounded once to the float cube's values.
#pragma omp parallel
  {
    std::vector<double> sum(n_wave), sum_var(noisy ? n_wave : 0);
#pragma omp for schedule(dynamic)
    for (long long t = 0; t < static_cast<long long>(shape.n_spaxels()); ++t) {
      float* out = cube.data.data() + static_cast<std::size_t>(t) * n_wave;
      float* var = noisy ? cube.variance.data() + static_cast<std::size_t>(t) * n_wave : nullptr;
      const auto& w = weights[static_cast<std::size_t>(t)];
      if (w.empty()) {
        std::fill_n(out, n_wave, static_cast<float>(nan));
        if (var) std::fill_n(var, n_wave, static_cast<float>(nan));
        continue;
      }
      std::fill(sum.begin(), sum.end(), 0.0);
      std::fill(sum_var.begin(), sum_var.end(), 0.0);
      for (const auto& [f, weight] : w) {
        const float* spectrum = fibres.data.data() + f * n_wave;
        const double a = area_ratio * weight;
        for (std::size_t k = 0; k < n_wave; ++k) sum[k] += a * spectrum[k];
        if (var) {
          const float* v = fibres.variance.data() + f * n_wave;
          for (std::size_t k = 0; k < n_wave; ++k) sum_var[k] += a * a * v[k];
        }
      }
      std::copy(sum.begin(), sum.end(), out);
      if (var) std::copy(sum_var.begin(), sum_var.end(), var);
    }
  }

  // The correlation matrices: C_st = a^2 sum_f W_sf W_tf var_f, from each fibre exposure's
  // spaxels.
  std::vector<std::vector<std::pair<std::size_t, double>>> by_fibre(sampling.size());
  for (std::size_t t = 0; t < weights.size(); ++t)
    for (const auto& [f, weight] : weights[t]) by_fibre[f].emplace_back(t, weight);
  cube.correlations.clear();
  const int k_first = margin_wavelengths, k_last = shape.n_wave - 1 - margin_wavelengths;
  for (const Band& band : kCorrelationBands) {
    if (k_last < k_first || band.wavelength_angstrom < plane_wavelength_angstrom[k_first] ||
        band.wavelength_angstrom > plane_wavelength_angstrom[k_last])
      continue;
    int k = k_first;
    for (int j = k_first; j <= k_last; ++j)
      if (std::abs(plane_wavelength_angstrom[j] - band.wavelength_angstrom) <
          std::abs(plane_wavelength_angstrom[k] - band.wavelength_angstrom))
        k = j;
    std::unordered_map<std::uint64_t, double> covariance;
    const std::uint64_t n = shape.n_spaxels();
    for (std::size_t f = 0; f < sampling.size(); ++f) {
      const double v = noisy ? fibres.variance[f * n_wave + k] : 1.0;
      const auto& list = by_fibre[f];
      for (const auto& [s, ws] : list)
        for (const auto& [t, wt] : list)
          if (s <= t) covariance[s * n + t] += ws * wt * v;
    }
    std::vector<std::pair<std::uint64_t, double>> entries(covariance.begin(), covariance.end());
    std::sort(entries.begin(), entries.end());
    SpatialCorrelation c;
    c.wavelength_angstrom = band.wavelength_angstrom;
    c.plane = k;
    for (const auto& [key, cov] : entries) {
      const std::uint64_t s = key / n, t = key % n;
      const double rho = cov / std::sqrt(covariance.at(s * n + s) * covariance.at(t * n + t));
      if (rho == 0.0 || !std::isfinite(rho)) continue;  // only the non-zero elements
      c.i_x.push_back(static_cast<int>(s % shape.nx));
      c.i_y.push_back(static_cast<int>(s / shape.nx));
      c.j_x.push_back(static_cast<int>(t % shape.nx));
      c.j_y.push_back(static_cast<int>(t / shape.nx));
      c.rho.push_back(rho);
    }
    cube.correlations[band.extname] = std::move(c);
  }
  return sampling.size();
}

double fibre_core_arcsec2(const FibreBundle& bundle) {
  const double r = 0.5 * bundle.core_diameter_arcsec;
  return std::numbers::pi * r * r;
}

namespace {

class FibresStage final : public Stage {
 public:
  FibresStage(FibresParams params, std::string path, ExposureSky sky)
      : params_(std::move(params)), path_(std::move(path)), sky_(std::move(sky)) {}
  std::string name() const override { return "fibres"; }
  std::vector<std::string> needs() const override {
    // The exposure model counts photons of a flux cube.
    if (params_.noise && params_.noise->exposure_model) return {"cube", "cube_psf", "cube_flux"};
    return {"cube", "cube_psf"};
  }
  std::vector<Provided> provides() const override {
    return {{"cube_fibres", "", "the cube observed by the fibres and reconstructed (Shepard)"},
            {"variance", "(cube unit)^2",
             "the variance of every voxel, from the fibres' noise (none without noise)"}};
  }
  std::vector<MemoryItem> memory_estimate(const PlanContext& c) const override {
    return {{"variance (float, host)", c.n_voxels() * sizeof(float), false, ""}};
  }

  void run(RunState& state) override {
    if (!state.cube) throw std::logic_error("fibres: no cube (psum must run first)");
    const double spaxel_arcsec = state.observation.axes.spaxel_arcsec;
    if (!(spaxel_arcsec > 0.0))
      throw ConfigError("fibres (" + path_ + "): the observation's spaxel size is " +
                        std::to_string(spaxel_arcsec) + " arcsec; expected a number > 0");
    // The fibres reach beyond the field (the margin), and NaN would spread over every fibre.
    const Cube& sky = *state.cube;
    if ((state.spaxels.nx > 0 && sky.shape.nx != state.spaxels.nx) ||
        std::any_of(sky.data.begin(), sky.data.end(), [](float v) { return std::isnan(v); }))
      throw ConfigError("fibres (" + path_ +
                        "): the cube was already cropped to the field or masked outside the "
                        "aperture; put aperture_mask after fibres");
    std::vector<double> wavelength(static_cast<std::size_t>(state.cube->shape.n_wave));
    for (int k = 0; k < state.cube->shape.n_wave; ++k)
      wavelength[k] =
          state.observation.axes.wavelength_angstrom(k - state.observation.margin.wavelengths);
    const std::uint64_t seed =
        params_.noise && params_.noise->seed ? *params_.noise->seed : state.observation.seed;
    const Observation& obs = state.observation;
    shape_ = state.cube->shape;
    spaxel_arcsec_ = spaxel_arcsec;
    const std::size_t n = apply_fibres(
        params_, spaxel_arcsec, wavelength, obs.axes.width_angstrom(0), obs.margin.wavelengths,
        seed, *state.cube, path_, noise_plane_widths(obs, state.cube->shape.n_wave),
        {sky_.sky.get(), sky_.extinction.get(), &obs});
    spdlog::info(
        "fibres: {} fibres x {} dither positions, cube reconstructed (Shepard, sigma {} "
        "arcsec, r_lim {} arcsec){}",
        params_.bundle.n_fibres, n / static_cast<std::size_t>(params_.bundle.n_fibres),
        params_.sigma_arcsec, params_.radius_limit_arcsec,
        !params_.noise                  ? ", no noise"
        : params_.noise->exposure_model ? ", exposure noise per fibre spectrum"
                                        : ", noise per fibre spectrum");
  }

  // Linear without its noise (whose gradient is that of the expected cube, as the noise stage's):
  // the cube is R S x, S the fibres' sampling (A_fs, the area fractions) and R the reconstruction
  // (a W_tf; an uncovered spaxel is NaN, a constant: its row is 0). The adjoint is S^T R^T
  // (docs/gradients.md).
  bool adjoint(const RunState&, CubeCotangent& cotangent) const override {
    check_cotangent_shape("fibres", shape_, cotangent);
    const Maps m = maps();
    // R^T: each fibre exposure's cotangent, a sum over the spaxels it reconstructs.
    std::vector<double> fibre = gather(m.by_fibre, cotangent.values(), m.area_ratio);
    // S^T: each spaxel's, a sum over the fibre exposures whose cores overlap it.
    cotangent.replace(cotangent.shape, gather(m.by_spaxel, fibre, 1.0));
    return true;
  }
  bool tangent(const RunState&, CubeCotangent& tangent) const override {
    check_cotangent_shape("fibres", shape_, tangent);
    const Maps m = maps();
    std::vector<double> fibre = gather(m.sampling.overlap, tangent.values(), 1.0);
    tangent.replace(tangent.shape, gather(m.weights, fibre, m.area_ratio));
    return true;
  }

 private:
  using Lists = std::vector<std::vector<std::pair<std::size_t, double>>>;
  // The two matrices run() applied, made again as apply_fibres made them, with their transposes.
  struct Maps {
    FibreSampling sampling;  // overlap: fibre exposure f -> (spaxel s, A_fs)
    Lists weights;           // spaxel t -> (fibre exposure f, W_tf)
    Lists by_fibre;          // f -> (t, W_tf)
    Lists by_spaxel;         // s -> (f, A_fs)
    double area_ratio = 0.0;
  };
  Maps maps() const {
    Maps m;
    m.sampling = fibre_sampling(params_, shape_, spaxel_arcsec_);
    m.weights = shepard_weights(params_, m.sampling, shape_, spaxel_arcsec_);
    m.by_fibre.resize(m.sampling.size());
    for (std::size_t t = 0; t < m.weights.size(); ++t)
      for (const auto& [f, w] : m.weights[t]) m.by_fibre[f].emplace_back(t, w);
    m.by_spaxel.resize(shape_.n_spaxels());
    for (std::size_t f = 0; f < m.sampling.size(); ++f)
      for (const auto& [spaxel, a] : m.sampling.overlap[f]) m.by_spaxel[spaxel].emplace_back(f, a);
    const double r = 0.5 * params_.bundle.core_diameter_arcsec;
    m.area_ratio = spaxel_arcsec_ * spaxel_arcsec_ / (std::numbers::pi * r * r);
    return m;
  }
  // out[row, k] = scale sum over (i, w) in rows[row] of w in[i, k], spectra of n_wave values; a
  // row with no entries is 0.
  std::vector<double> gather(const Lists& rows, std::span<const double> in, double scale) const {
    const std::size_t n_wave = static_cast<std::size_t>(shape_.n_wave);
    const std::size_t n_rows = rows.size();
    std::vector<double> out = large_vector<double>(n_rows * n_wave, 0.0);
#pragma omp parallel for schedule(dynamic)
    for (long long r = 0; r < static_cast<long long>(n_rows); ++r) {
      double* dst = out.data() + static_cast<std::size_t>(r) * n_wave;
      for (const auto& [i, w] : rows[static_cast<std::size_t>(r)]) {
        const double a = scale * w;
        const double* src = in.data() + i * n_wave;
        for (std::size_t k = 0; k < n_wave; ++k) dst[k] += a * src[k];
      }
    }
    return out;
  }

  FibresParams params_;
  std::string path_;
  ExposureSky sky_;  // the exposure model's sky and extinction
  // What run() was given, for the adjoint.
  CubeShape shape_;
  double spaxel_arcsec_ = 0.0;
};

}  // namespace

std::unique_ptr<Stage> make_fibres_stage(const nlohmann::json& params, const std::string& path,
                                         const StageResources& resources) {
  FibresParams p = FibresParams::from_json(JsonParams(params, path));
  ExposureSky sky = p.noise ? load_exposure_sky(*p.noise, resources) : ExposureSky{};
  return std::make_unique<FibresStage>(std::move(p), path, std::move(sky));
}

StageEntry fibres_stage() {
  const nlohmann::json manga = {{"n_fibres", 19},
                                {"core_diameter_arcsec", 2.0},
                                {"pitch_arcsec", 2.5},
                                {"dither_x_arcsec", {0.0, -0.7217, 0.7217}},
                                {"dither_y_arcsec", {0.8333, -0.4167, -0.4167}}};
  return {.name = "fibres",
          .summary =
              "a fibre bundle samples the cube (dithered), noise per fibre, the cube "
              "rebuilt as MaNGA's DRP does (Shepard), with its spatial correlation",
          .kind = StageKind::cube,
          .make =
              [](const nlohmann::json& params, const std::string& path,
                 const StageResources& resources) {
                return make_fibres_stage(params, path, resources);
              },
          // The exposure model's telescope keys go into `noise` where it is given.
          .inherits = {{"bundle", "telescope.fibres"},
                       {"noise.collecting_area_m2", "telescope.collecting_area_m2"},
                       {"noise.throughput", "telescope.throughput"},
                       {"noise.site", "telescope.site"}},
          .examples = {{{"bundle", manga}},
                       {{"bundle", manga},
                        {"sigma_arcsec", 0.7},
                        {"radius_limit_arcsec", 1.6},
                        {"noise", {{"snr", 10}, {"reference", 1.0}, {"seed", 1}}}},
                       {{"bundle", manga},
                        {"noise",
                         {{"model", "exposure"},
                          {"exposure_s", 900},
                          {"n_exposures", 3},
                          {"collecting_area_m2", 3.99},
                          {"throughput", 0.2},
                          {"site", "apo"}}}}}};
}

}  // namespace ifusim
