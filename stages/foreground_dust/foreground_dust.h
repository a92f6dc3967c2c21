#pragma once
// foreground_dust: the Milky Way's dust between the galaxy and the observer. Every wavelength
// plane of the cube is dimmed by 10^(-0.4 A_lambda) with A_lambda = E(B-V) R_V k(lambda) / R_V,
// the Cardelli, Clayton & Mathis (1989, ApJ 345, 245) curve with R_V = 3.1 (the diffuse ISM's
// mean, Cardelli et al. 1989; Schlafly & Finkbeiner 2011 recalibrate E(B-V) for it) evaluated at
// the OBSERVED wavelength, where the Galaxy's dust absorbs. `ebv_mag` is the line of sight's
// colour excess, read by the user from a dust map (Schlegel, Finkbeiner & Davis 1998 as
// recalibrated by Schlafly & Finkbeiner 2011; the IRSA dust service) at the galaxy's position:
// ifusim has no dust map to look it up in (galaxy.ra_deg/dec_deg are recorded, never used for
// this). The user gives it as the run config's `galaxy.ebv_mw`, which the stage inherits as
// `ebv_mag` (StageEntry::inherits; errors then name galaxy.ebv_mw); a run with galaxy.ebv_mw > 0
// and no foreground_dust stage is refused (pipeline/runner.cpp), never silently unapplied, and
// so is an `ebv_mag` of the stage's own that differs from it.
//
// A cube stage: after flux (or anywhere after psum; the extinction is a factor per wavelength
// and commutes with the PSF, and with the LSF up to the curve's variation across a line's
// width). A variance already in the cube (noise before it) is scaled by the factor squared.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/json_params.h"
#include "stages/stage.h"

namespace ifusim {

struct ForegroundDustParams {
  double ebv_mag = 0.0;  // E(B-V) of the Milky Way towards the galaxy
  double r_v = 3.1;      // A_V / E(B-V)
  static ForegroundDustParams from_json(JsonParams params);
};

// The factor 10^(-0.4 A_lambda) that the foreground dust leaves of the light at an observed
// wavelength (Angstrom).
double foreground_transmission(const ForegroundDustParams& params, double wavelength_angstrom);

StageEntry foreground_dust_stage();

}  // namespace ifusim
