#include "stages/psf/psf.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "stages/convolution.h"

namespace ifusim {

PsfParams PsfParams::from_json(JsonParams p) {
  PsfParams out;
  out.shape = p.choice("shape", {"gaussian", "moffat"}, "gaussian") == "moffat" ? Shape::moffat
                                                                                : Shape::gaussian;
  out.fwhm_arcsec = p.number("fwhm_arcsec");
  p.require(out.fwhm_arcsec > 0.0, "fwhm_arcsec", "a number > 0", out.fwhm_arcsec);
  if (out.shape == Shape::moffat) {
    out.beta = p.number("beta", 2.5);
    // beta <= 1: the profile's integral diverges.
    p.require(out.beta > 1.0, "beta", "a number > 1 (the Moffat profile's total must be finite)",
              out.beta);
    const long long n = p.integer("supersample", 5);
    p.require(n >= 1 && n <= 64, "supersample", "an integer in [1, 64]", n);
    out.supersample = static_cast<int>(n);
  } else {
    for (const char* key : {"beta", "supersample"})
      if (p.has(key))
        throw ConfigError(p.key_path(key) + ": only valid with \"shape\": \"moffat\"");
  }
  out.truncate_peak_fraction = p.number("truncate_peak_fraction", 1e-6);
  p.require(out.truncate_peak_fraction > 0.0 && out.truncate_peak_fraction < 0.5,
            "truncate_peak_fraction", "a number in (0, 0.5)", out.truncate_peak_fraction);
  p.finish();
  return out;
}

Kernel2D moffat_pixel_kernel(const PsfParams& params, double spaxel_arcsec, int max_radius) {
  const double beta = params.beta;
  const double alpha =
      params.fwhm_arcsec / (2.0 * std::sqrt(std::pow(2.0, 1.0 / beta) - 1.0)) / spaxel_arcsec;
  const double reach_spaxels =
      alpha * std::sqrt(std::pow(params.truncate_peak_fraction, -1.0 / beta) - 1.0);
  Kernel2D k;
  k.radius = static_cast<int>(std::min<double>(std::ceil(reach_spaxels), std::max(max_radius, 0)));
  const int side = 2 * k.radius + 1;
  k.weights.assign(static_cast<std::size_t>(side) * side, 0.0);
  const int n = params.supersample;
  const double inv_alpha2 = 1.0 / (alpha * alpha);
  const double reach2 = reach_spaxels * reach_spaxels;
#pragma omp parallel for schedule(static)
  for (int dy = -k.radius; dy <= k.radius; ++dy)
    for (int dx = -k.radius; dx <= k.radius; ++dx) {
      // Circular truncation on the spaxel centre's distance.
      if (static_cast<double>(dx) * dx + static_cast<double>(dy) * dy > reach2) continue;
      double sum = 0.0;
      for (int sy = 0; sy < n; ++sy) {
        const double y = dy - 0.5 + (sy + 0.5) / n;
        for (int sx = 0; sx < n; ++sx) {
          const double x = dx - 0.5 + (sx + 0.5) / n;
          sum += std::pow(1.0 + (x * x + y * y) * inv_alpha2, -beta);
        }
      }
      k.weights[static_cast<std::size_t>(dy + k.radius) * side + dx + k.radius] = sum / (n * n);
    }
  return k;
}

namespace {

void apply_moffat(const PsfParams& params, double spaxel_arcsec, Cube& cube) {
  const int nx = cube.shape.nx, ny = cube.shape.ny;
  const std::size_t n_wave = static_cast<std::size_t>(cube.shape.n_wave);
  const Kernel2D kernel = moffat_pixel_kernel(params, spaxel_arcsec, std::max(nx, ny) - 1);
  const int r = kernel.radius;
  // 1 / N(source): the part of the kernel that lands inside the cube.
  std::vector<double> inv_norm(cube.shape.n_spaxels());
#pragma omp parallel for schedule(static)
  for (int sy = 0; sy < ny; ++sy)
    for (int sx = 0; sx < nx; ++sx) {
      double norm = 0.0;
      for (int ty = std::max(0, sy - r); ty <= std::min(ny - 1, sy + r); ++ty)
        for (int tx = std::max(0, sx - r); tx <= std::min(nx - 1, sx + r); ++tx)
          norm += kernel.at(tx - sx, ty - sy);
      inv_norm[static_cast<std::size_t>(sy) * nx + sx] = 1.0 / norm;
    }
  // Gather per target spaxel (no write conflicts, the same sum order for any thread count),
  // in wavelength blocks that stay in cache across the taps.
  std::vector<double> out(cube.data.size(), 0.0);
  constexpr std::size_t kBlock = 512;
  const long long targets = static_cast<long long>(cube.shape.n_spaxels());
#pragma omp parallel for schedule(dynamic, 4)
  for (long long t = 0; t < targets; ++t) {
    const int tx = static_cast<int>(t % nx), ty = static_cast<int>(t / nx);
    double* dst = out.data() + static_cast<std::size_t>(t) * n_wave;
    for (std::size_t k0 = 0; k0 < n_wave; k0 += kBlock) {
      const std::size_t k1 = std::min(n_wave, k0 + kBlock);
      for (int sy = std::max(0, ty - r); sy <= std::min(ny - 1, ty + r); ++sy)
        for (int sx = std::max(0, tx - r); sx <= std::min(nx - 1, tx + r); ++sx) {
          const double kw = kernel.at(tx - sx, ty - sy);
          if (kw == 0.0) continue;
          const std::size_t s = static_cast<std::size_t>(sy) * nx + sx;
          const double w = kw * inv_norm[s];
          const double* src = cube.data.data() + s * n_wave;
#pragma omp simd
          for (std::size_t k = k0; k < k1; ++k) dst[k] += w * src[k];
        }
    }
  }
  cube.data = std::move(out);
}

void apply_gaussian(const PsfParams& params, double spaxel_arcsec, Cube& cube) {
  const double sigma_spaxels = params.fwhm_arcsec / std::sqrt(8.0 * std::log(2.0)) / spaxel_arcsec;
  const int nx = cube.shape.nx, ny = cube.shape.ny;
  const std::size_t n_wave = static_cast<std::size_t>(cube.shape.n_wave);
  // Separable: the pixel-integrated 2-D Gaussian is the product of two 1-D kernels, and the
  // in-cube normalisation of a source is the product of its two 1-D normalisations, so the two
  // flux-conserving 1-D passes give exactly the flux-conserving 2-D convolution.
  std::vector<double> tmp;
  // Along x: layout (iy, ix, k).
  convolve_axis_conserving(
      cube.data, tmp, ny, nx, n_wave,
      gaussian_pixel_kernel(sigma_spaxels, params.truncate_peak_fraction, nx - 1));
  // Along y: layout (1, iy, ix * k).
  convolve_axis_conserving(
      tmp, cube.data, 1, ny, static_cast<std::size_t>(nx) * n_wave,
      gaussian_pixel_kernel(sigma_spaxels, params.truncate_peak_fraction, ny - 1));
}

}  // namespace

void apply_psf(const PsfParams& params, double spaxel_arcsec, Cube& cube) {
  if (cube.data.size() != cube.shape.n_voxels())
    throw std::logic_error("psf: the cube's data does not match its shape");
  if (cube.data.empty()) return;
  if (params.shape == PsfParams::Shape::gaussian)
    apply_gaussian(params, spaxel_arcsec, cube);
  else
    apply_moffat(params, spaxel_arcsec, cube);
}

namespace {

class PsfStage final : public Stage {
 public:
  PsfStage(PsfParams params, std::string path) : params_(params), path_(std::move(path)) {}
  std::string name() const override { return "psf"; }
  std::vector<std::string> needs() const override { return {"cube"}; }
  std::vector<std::string> provides() const override { return {"cube_psf"}; }

  void run(RunState& state) const override {
    if (!state.cube) throw std::logic_error("psf: no cube (psum must run first)");
    const double spaxel_arcsec = state.observation.axes.spaxel_arcsec;
    if (!(spaxel_arcsec > 0.0))
      throw ConfigError("psf (" + path_ + "): the observation's spaxel size is " +
                        std::to_string(spaxel_arcsec) + " arcsec; expected a number > 0");
    if (!state.cube->variance.empty())
      throw ConfigError("psf (" + path_ +
                        "): the cube already has noise; put the noise stage "
                        "after psf (convolving noise would correlate it)");
    apply_psf(params_, spaxel_arcsec, *state.cube);
  }

 private:
  PsfParams params_;
  std::string path_;
};

}  // namespace

std::unique_ptr<Stage> make_psf_stage(const nlohmann::json& params, const std::string& path) {
  return std::make_unique<PsfStage>(PsfParams::from_json(JsonParams(params, path)), path);
}

}  // namespace ifusim
