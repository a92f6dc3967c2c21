#include "stages/lsf/lsf.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "data/resolution_curve_json.h"
#include "stages/common/convolution.h"

namespace ifusim {

LsfParams LsfParams::from_json(JsonParams p) {
  LsfParams out;
  if (p.has("fwhm_angstrom")) {
    out.fwhm_angstrom = p.number("fwhm_angstrom");
    p.require(*out.fwhm_angstrom > 0.0, "fwhm_angstrom", "a number > 0", *out.fwhm_angstrom);
  }
  if (p.has("template_fwhm_angstrom"))
    out.template_fwhm_angstrom =
        parse_resolution_curve(p, "template_fwhm_angstrom", "fwhm_angstrom", true);
  out.truncate_peak_fraction = p.number("truncate_peak_fraction", 1e-6);
  p.require(out.truncate_peak_fraction > 0.0 && out.truncate_peak_fraction < 0.5,
            "truncate_peak_fraction", "a number in (0, 0.5)", out.truncate_peak_fraction);
  p.finish();
  return out;
}

double lsf_kernel_sigma_angstrom(double telescope_fwhm_angstrom, double template_fwhm_angstrom,
                                 double redshift) {
  const double lib_observed = template_fwhm_angstrom * (1.0 + redshift);
  const double diff =
      telescope_fwhm_angstrom * telescope_fwhm_angstrom - lib_observed * lib_observed;
  const double sigma = std::sqrt(std::abs(diff) / (8.0 * std::log(2.0)));
  return diff < 0.0 ? -sigma : sigma;
}

namespace {

class LsfStage final : public Stage {
 public:
  LsfStage(LsfParams params, std::string path) : params_(params), path_(std::move(path)) {}
  std::string name() const override { return "lsf"; }
  std::vector<std::string> needs() const override { return {"cube"}; }
  std::vector<Provided> provides() const override {
    return {{"cube_lsf", "", "every spectrum convolved with the instrument's LSF"}};
  }
  // In place: buffers of ~1 MB per thread, no second cube.
  std::vector<MemoryItem> memory_estimate(const PlanContext&) const override { return {}; }

  // The widest kernel's reach over the band, in wavelength pixels.
  CubeMargin margin(const Observation& obs) const override {
    if (!(obs.axes.width_angstrom(0) > 0.0)) return {};  // run() says why
    const ResolutionCurve tel = instrument_fwhm(obs);
    // In pixels of the band's own width there (a logarithmic grid's pixels widen to the red).
    double widest = 0.0;
    for (int k = 0; k < obs.telescope.n_wave(); ++k) {
      const double lambda = obs.axes.wavelength_angstrom(k);
      widest = std::max(widest, lsf_kernel_sigma_angstrom(
                                    tel.at(lambda), template_fwhm_at(obs, lambda), obs.redshift) /
                                    obs.axes.width_angstrom(k));
    }
    return {0, static_cast<int>(
                   std::ceil(widest * gaussian_truncation_sigmas(params_.truncate_peak_fraction)))};
  }

  void run(RunState& state) override {
    if (!state.cube) throw std::logic_error("lsf: no cube (psum must run first)");
    Cube& cube = *state.cube;
    refuse_cropped_cube(state, "lsf (" + path_ + ")");
    const Observation& obs = state.observation;
    const ResolutionCurve tel = instrument_fwhm(obs);
    if (!(tel.min() > 0.0))
      throw ConfigError("lsf (" + path_ + "): the telescope's LSF FWHM is " +
                        std::to_string(tel.min()) + " A; set the telescope's or give " + path_ +
                        ".fwhm_angstrom (a number > 0)");
    const double step = obs.axes.width_angstrom(0);
    if (!(step > 0.0))
      throw ConfigError("lsf (" + path_ + "): the observation's wavelength step is " +
                        std::to_string(step) + " A; expected a number > 0");
    if (!cube.variance.empty())
      throw ConfigError("lsf (" + path_ +
                        "): the cube already has noise; put the noise stage "
                        "after lsf (convolving noise would correlate it)");
    // The kernel of each source pixel, from the instrument's FWHM at its wavelength less the
    // templates' (observed) in quadrature; where the templates are already coarser, none.
    const int n_wave = cube.shape.n_wave;
    shape_ = cube.shape;
    kernels_.clear();  // none: the identity
    std::vector<double> sigma_pixels(n_wave, 0.0);
    double coarse_lo = 0, coarse_hi = -1, coarse_tel = 0, coarse_lib_lo = 0, coarse_lib_hi = 0;
    bool any = false;
    for (int k = 0; k < n_wave; ++k) {
      const double lambda = obs.axes.wavelength_angstrom(k - obs.margin.wavelengths);
      const double lib = template_fwhm_at(obs, lambda);
      const double sigma = lsf_kernel_sigma_angstrom(tel.at(lambda), lib, obs.redshift);
      if (sigma < 0.0) {
        // One warning for all such wavelengths: the first to the last (they may not be
        // contiguous when both curves vary), the templates' FWHM over them.
        if (coarse_hi < coarse_lo) {
          coarse_lo = lambda;
          coarse_lib_lo = coarse_lib_hi = lib;
        }
        coarse_hi = lambda;
        coarse_tel = std::max(coarse_tel, tel.at(lambda));
        coarse_lib_lo = std::min(coarse_lib_lo, lib);
        coarse_lib_hi = std::max(coarse_lib_hi, lib);
        continue;
      }
      // Pixels of the source's own width: the same on a linear grid, and on a logarithmic one
      // a pixel's neighbours within the kernel's reach are as wide within 0.1% (dlog10 = 1e-4
      // changes the width by 0.023% a pixel).
      sigma_pixels[k] = sigma / obs.axes.width_angstrom(k - obs.margin.wavelengths);
      any = any || sigma_pixels[k] >= 1e-6;  // a kernel far narrower than a pixel is the identity
    }
    if (coarse_hi >= coarse_lo) {
      const std::string lib_fwhm = coarse_lib_lo == coarse_lib_hi
                                       ? fmt::format("{} A", coarse_lib_lo)
                                       : fmt::format("{} to {} A", coarse_lib_lo, coarse_lib_hi);
      spdlog::warn(
          "lsf: from {} to {} A the templates' resolution, {} FWHM at rest = {} observed at "
          "z = {}, is already coarser than the instrument's (at most {} A there): those "
          "wavelengths are left as they are",
          coarse_lo, coarse_hi, lib_fwhm,
          coarse_lib_lo == coarse_lib_hi
              ? fmt::format("{} A", coarse_lib_lo * (1.0 + obs.redshift))
              : fmt::format("{} to {} A", coarse_lib_lo * (1.0 + obs.redshift),
                            coarse_lib_hi * (1.0 + obs.redshift)),
          obs.redshift, coarse_tel);
    }
    if (!any) {
      if (coarse_hi < coarse_lo)
        spdlog::info("lsf: the templates' resolution equals the instrument's; nothing to do");
      return;
    }
    std::vector<Kernel1D> kernels;
    const bool one_kernel = tel.constant() && template_fwhm(obs).constant();
    for (int k = 0; k < (one_kernel ? 1 : n_wave); ++k)
      kernels.push_back(gaussian_pixel_kernel(sigma_pixels[k] >= 1e-6 ? sigma_pixels[k] : 0.0,
                                              params_.truncate_peak_fraction, n_wave - 1));
    spdlog::debug("lsf: Gaussian kernels, sigma {} to {} pixels",
                  *std::min_element(sigma_pixels.begin(), sigma_pixels.end()),
                  *std::max_element(sigma_pixels.begin(), sigma_pixels.end()));
    convolve_axis_in_place(cube.data, cube.shape.n_spaxels(), n_wave, 1, kernels);
    kernels_ = std::move(kernels);
  }

  // The convolution's transpose: the correlation with the same kernels (per source pixel), the
  // band's ends zero-padded as in the forward (docs/gradients.md).
  bool adjoint(const RunState&, CubeCotangent& cotangent) const override {
    check_cotangent_shape("lsf", shape_, cotangent);
    if (!kernels_.empty())
      correlate_axis_in_place(cotangent.values_to_change(), shape_.n_spaxels(), shape_.n_wave, 1,
                              kernels_);
    return true;
  }
  bool tangent(const RunState&, CubeCotangent& tangent) const override {
    check_cotangent_shape("lsf", shape_, tangent);
    if (!kernels_.empty())
      convolve_axis_in_place(tangent.values_to_change(), shape_.n_spaxels(), shape_.n_wave, 1,
                             kernels_);
    return true;
  }

 private:
  ResolutionCurve instrument_fwhm(const Observation& obs) const {
    return params_.fwhm_angstrom ? ResolutionCurve(*params_.fwhm_angstrom)
                                 : obs.telescope_lsf_fwhm_angstrom;
  }
  ResolutionCurve template_fwhm(const Observation& obs) const {
    return params_.template_fwhm_angstrom.value_or(obs.template_fwhm_angstrom);
  }
  // The templates' FWHM (rest frame) for the light observed at lambda: at lambda / (1 + z).
  double template_fwhm_at(const Observation& obs, double lambda_angstrom) const {
    const ResolutionCurve& lib = params_.template_fwhm_angstrom ? *params_.template_fwhm_angstrom
                                                                : obs.template_fwhm_angstrom;
    return lib.at(lambda_angstrom / (1.0 + obs.redshift));
  }

  LsfParams params_;
  std::string path_;
  // What run() applied, for the adjoint: the kernel per source pixel (or one), none where it
  // left the cube as it was.
  CubeShape shape_;
  std::vector<Kernel1D> kernels_;
};

}  // namespace

std::unique_ptr<Stage> make_lsf_stage(const nlohmann::json& params, const std::string& path) {
  return std::make_unique<LsfStage>(LsfParams::from_json(JsonParams(params, path)), path);
}

StageEntry lsf_stage() {
  return {.name = "lsf",
          .summary = "convolve every spectrum with the instrument's Gaussian LSF",
          .kind = StageKind::cube,
          .make = &from_params<&make_lsf_stage>,
          .examples = {{{"fwhm_angstrom", 2.5}, {"template_fwhm_angstrom", 2.5}}}};
}

}  // namespace ifusim
