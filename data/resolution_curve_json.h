#pragma once
// A ResolutionCurve in JSON: how telescope presets (io/telescope.cpp) and the psf and lsf stages'
// parameters write one, and back.
#include <nlohmann/json.hpp>

#include <string>

#include "core/json_params.h"
#include "data/resolution_curve.h"

namespace ifusim {

// A FWHM that may vary with wavelength, at `key` of `p`: a number (>= 0 when `allow_zero`, else
// > 0) or {"wavelength_angstrom": [...], "<value_key>": [...]} with at least two points,
// wavelengths strictly increasing and values > 0. Errors name the key's path.
ResolutionCurve parse_resolution_curve(JsonParams& p, const std::string& key,
                                       const std::string& value_key, bool allow_zero);
// A fraction (a throughput) that may vary with wavelength, at `key` of `p`: a number in [0, 1] or
// {"wavelength_angstrom": [...], "<value_key>": [...]} with at least two points, wavelengths
// strictly increasing and values in [0, 1]. Errors name the key's path.
ResolutionCurve parse_fraction_curve(JsonParams& p, const std::string& key,
                                     const std::string& value_key);
// The same back as JSON (a number for a constant).
nlohmann::json to_json(const ResolutionCurve& curve, const std::string& value_key);

}  // namespace ifusim
