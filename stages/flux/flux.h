#pragma once
// flux: the cube's luminosity density per observed-frame Angstrom (L_sun / A) becomes the
// observed flux density F_lambda = L_lambda,obs / (4 pi D_L^2) in erg / s / cm^2 / A, in units of
// `unit_scale`, a power of ten (default 1e-20, MUSE's unit: values of order 1 to 1e4 for a galaxy,
// whose squares, the variance, stay far from float32's underflow).
//
// Why no further (1 + z): for a source at luminosity distance D_L, Hogg (1999,
// astro-ph/9905116, section 7) gives the observed flux density per unit wavelength as
//   f_lambda(lambda_o) = L_lambda(lambda_o / (1 + z)) / [(1 + z) 4 pi D_L^2]
// (the f_lambda form of his relation between f_nu and L_nu; D_L itself carries the two factors
// of (1 + z) for the photons' energy loss and their slower arrival). The 1 / (1 + z) there is only
// the stretch of a rest-frame Angstrom into (1 + z) observed Angstroms; the cube's convention
// (stages/stage.h) is that the spectra were already resampled conserving energy onto the
// observed grid, i.e. L_lambda,obs(lambda_o) = L_lambda(lambda_o / (1 + z)) / (1 + z). So
// F_lambda = L_lambda,obs / (4 pi D_L^2) and applying (1 + z) again would count it twice.
//
// A galaxy at z = 0 has D_L = 0 and no finite flux: the stage then needs an explicit
// `luminosity_distance_mpc`, and says so.
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/constants.h"  // kSolarLuminosityErgPerS, kCmPerMpc
#include "core/json_params.h"
#include "stages/stage.h"

namespace ifusim {

struct FluxParams {
  double unit_scale = 1e-20;                      // the cube holds F_lambda / unit_scale
  std::optional<double> luminosity_distance_mpc;  // overrides the observation's D_L
  static FluxParams from_json(JsonParams params);
};

// erg / s / cm^2 / A per (L_sun / A) at that luminosity distance: L_sun / (4 pi D_L^2).
double flux_per_solar_luminosity(double luminosity_distance_mpc);

// The FITS standard's form (FITS 4.0, section 4.3: a power of ten, then one solidus) of the unit
// of a flux cube in units of `unit_scale` = 10^k: "10**(-20)*erg/(s*cm**2*Angstrom)", or
// "erg/(s*cm**2*Angstrom)" for k = 0. MUSE writes "10**(-20)*erg/s/cm**2/Angstrom", which
// astropy's FITS format parses with a warning about its several solidi; this form parses cleanly.
std::string flux_unit(int power_of_ten);

// k when `unit_scale` is 10^k for an integer k in [-99, 99] (to 1e-12), else nothing.
std::optional<int> power_of_ten(double unit_scale);

StageEntry flux_stage();
std::unique_ptr<Stage> make_flux_stage(const nlohmann::json& params, const std::string& path);

}  // namespace ifusim
