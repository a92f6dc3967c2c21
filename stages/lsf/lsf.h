#pragma once
// lsf: the spectrograph's line-spread function, a Gaussian along wavelength applied to every
// spaxel's spectrum of the reduced cube.
//
// The SSP templates already have a finite resolution, FWHM_lib(lambda_rest) in Angstrom in their
// REST frame (MILES: 2.51 A at every wavelength, Falcon-Barroso et al. 2011, A&A 532, A95;
// MaStar: varying, io/ssp/pypipe3d.h). Redshifting stretches it to FWHM_lib (1 + z) in the
// observed frame, at the observed wavelength lambda = lambda_rest (1 + z), so the kernel that
// brings the cube to the instrument's FWHM_tel (observed frame) is the Gaussian with (Gaussians
// add in quadrature)
//   sigma_kernel^2 = (FWHM_tel(lambda)^2 - (FWHM_lib(lambda / (1 + z)) (1 + z))^2) / (8 ln 2).
// If that is negative the templates are already coarser than the instrument: the stage warns
// and leaves the cube as it is (it cannot sharpen); if it is zero there is nothing to do.
//
// FWHM_tel may vary with wavelength (Telescope::lsf_fwhm_angstrom, a ResolutionCurve; the MUSE
// presets tabulate Bacon et al. 2017, A&A 608, A1, eq. 8: 2.99 A at 4750 A, 2.49 A at 7000 A,
// 2.59 A at 9300 A). The kernel is then set per SOURCE pixel from FWHM_tel at its wavelength,
// as the instrument responds to a line there; the subtraction above is made per wavelength, and
// the wavelengths where the templates are coarser are left as they are, with one warning naming
// their range. The same holds for a FWHM_lib that varies (per wavelength, at the rest
// wavelength of each observed one).
//
// The kernel is integrated over each target pixel (erf differences, not samples), truncated
// where it falls below `truncate_peak_fraction` (1e-6) of its peak (5.26 sigma), normalised to 1,
// and zero-padded at the band's ends (stages/common/convolution.h): the run simulates a margin of
// wavelengths at each end as wide as the widest kernel (Stage::margin), from which light comes
// into the band, and aperture_mask crops it.
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/json_params.h"
#include "stages/stage.h"

namespace ifusim {

struct LsfParams {
  std::optional<double> fwhm_angstrom;  // overrides observation.telescope_lsf_fwhm
  // Overrides observation.template_fwhm (rest frame): a number or {"wavelength_angstrom": [...],
  // "fwhm_angstrom": [...]} over rest wavelengths.
  std::optional<ResolutionCurve> template_fwhm_angstrom;
  double truncate_peak_fraction = 1e-6;
  static LsfParams from_json(JsonParams params);
};

// The Gaussian kernel's sigma (observed Angstrom) that takes templates of rest-frame FWHM
// `template_fwhm_angstrom` at `redshift` to the instrument's `telescope_fwhm_angstrom`; a
// negative value is returned as -sqrt(|difference| / 8 ln 2) (the templates are coarser).
double lsf_kernel_sigma_angstrom(double telescope_fwhm_angstrom, double template_fwhm_angstrom,
                                 double redshift);

StageEntry lsf_stage();
std::unique_ptr<Stage> make_lsf_stage(const nlohmann::json& params, const std::string& path);

}  // namespace ifusim
