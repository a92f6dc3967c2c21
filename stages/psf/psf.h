#pragma once
// psf: the atmosphere's and telescope's point-spread function, applied to every wavelength
// plane of the reduced cube on the spaxel grid (observation.axes.spaxel_arcsec). Its FWHM may vary
// with wavelength (a table; the MUSE presets' seeing follows Kolmogorov turbulence, FWHM
// proportional to lambda^(-1/5), Roddier 1981, Prog. Opt. 19, 281), and so may the Moffat's beta
// (the wings of a PSF corrected by adaptive optics change with wavelength, e.g. MUSE WFM-AO,
// Fusco et al. 2020, A&A 635, A208): planes are then grouped by (FWHM, beta), each to
// 0.1%, and each group gets its own kernel.
//
// Profiles, with FWHM in arcsec:
//  - gaussian: I(r) = exp(-r^2 / 2 sigma^2), sigma = FWHM / sqrt(8 ln 2);
//  - moffat (Moffat 1969, A&A 3, 455): I(r) = (1 + (r / alpha)^2)^(-beta),
//    alpha = FWHM / (2 sqrt(2^(1/beta) - 1)); beta = 2.5 by default (Trujillo et al. 2001,
//    MNRAS 328, 977 find beta ~ 2.5 to 4.765 for atmospheric turbulence; lower beta = wider
//    wings).
//
// Each spaxel's light is treated as a point source at the spaxel's centre, and the PSF is
// integrated over each target spaxel (not sampled at its centre), so that a FWHM comparable to
// the spaxel is handled correctly: exactly for the Gaussian (products of erf differences; the
// Gaussian is separable and is applied as two 1-D passes), by `supersample` x `supersample`
// midpoint sub-spaxels for the Moffat (not separable, and wide: applied by FFT, see psf.cpp;
// it agrees with the direct sum to ~1e-16 of a plane's peak).
//
// Truncation: the kernel is cut where the profile falls below `truncate_peak_fraction` of its
// peak (1e-6 by default): the Gaussian at sqrt(2 ln 1e6) sigma = 2.23 FWHM (a square of that
// half-width, as the two 1-D passes give), the Moffat on a circle of radius
// alpha sqrt(f^(-1/beta) - 1), i.e. 14 FWHM for beta = 2.5. The Moffat's wings hold much light:
// the fraction beyond radius R is (1 + (R / alpha)^2)^(1 - beta) = f^((beta - 1) / beta), 2.5e-4
// for beta = 2.5 and f = 1e-6; the kernel is normalised to a total of 1 inside R, so that light
// stays in the core. A kernel never extends beyond the cube's size (nothing more could be
// reached); its normalisation is that of the whole kernel.
//
// Edges, as on the sky (stages/common/convolution.h): the convolution is zero-padded, so a source
// near the edge loses the part of its PSF beyond it, and the run simulates a margin around the
// field (Stage::margin) from which light scatters in; aperture_mask crops it. The margin is the
// radius outside which the PSF holds less than `margin_light_fraction` (1e-2) of its light, or the
// kernel's radius if smaller: a Gaussian's 3.03 sigma, a beta = 2.5 Moffat's 4.5 alpha (for
// MUSE's 0.7 arcsec, 15 spaxels of 0.2 arcsec), for the largest FWHM and the smallest beta over
// the band. Light that sources farther out would scatter into
// the field, at most that fraction of theirs, is not simulated.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_params.h"
#include "stages/stage.h"

namespace ifusim {

struct PsfParams {
  enum class Shape { gaussian, moffat };
  Shape shape = Shape::gaussian;
  ResolutionCurve fwhm_arcsec;  // a number or {"wavelength_angstrom": [...], "fwhm_arcsec": [...]}
  // Moffat only: a number or {"wavelength_angstrom": [...], "beta": [...]}, every value > 1.
  ResolutionCurve beta = 2.5;
  int supersample = 5;                   // Moffat only: sub-spaxels per side
  double truncate_peak_fraction = 1e-6;  // kernel cut where profile < this x peak
  double margin_light_fraction = 1e-2;   // the margin simulated around the field: see above
  static PsfParams from_json(JsonParams params);
};

// The 2-D kernel on integer spaxel offsets (dx, dy), |dx|, |dy| <= radius, row-major
// weights[(dy + radius) * (2 radius + 1) + dx + radius], each the profile integrated over the
// target spaxel, unnormalised (the convolution divides by `sum`). `max_radius` caps the radius
// (the cube's size); `sum` is that of the whole kernel.
struct Kernel2D {
  int radius = 0;
  std::vector<double> weights;
  double sum = 1.0;  // of the weights of the whole kernel, before any cap on its radius
  double at(int dx, int dy) const {
    return weights[static_cast<std::size_t>(dy + radius) * (2 * radius + 1) + dx + radius];
  }
};
Kernel2D moffat_pixel_kernel(const PsfParams& params, double fwhm_arcsec, double beta,
                             double spaxel_arcsec, int max_radius);

// The margin (spaxels) the PSF needs around the field: see above.
int psf_margin_spaxels(const PsfParams& params, double spaxel_arcsec);

// Applies the PSF to a host cube (spaxel-major), in place; plane k is at
// plane_wavelength_angstrom[k] (for a FWHM that varies with wavelength).
void apply_psf(const PsfParams& params, double spaxel_arcsec,
               const std::vector<double>& plane_wavelength_angstrom, Cube& cube);
// The same map on the double values of a cube of `shape` (a tangent), or with `transpose` its
// transpose (a cotangent, reverse mode: the correlation with the same kernels, docs/gradients.md).
void apply_psf(const PsfParams& params, double spaxel_arcsec,
               const std::vector<double>& plane_wavelength_angstrom, const CubeShape& shape,
               std::vector<double>& values, bool transpose);

StageEntry psf_stage();
std::unique_ptr<Stage> make_psf_stage(const nlohmann::json& params, const std::string& path);

}  // namespace ifusim
