#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/json_params.h"
#include "data/telescope.h"

namespace ifusim {

// The folder of telescope presets: $IFUSIM_CONFIG_DIR/telescopes, else the project's
// configs/telescopes.
std::string telescope_preset_dir();
std::vector<std::string> telescope_preset_names();

// A telescope described in JSON (the preset files' format, docs/config.md); errors name `path`.
Telescope parse_telescope(const nlohmann::json& object, const std::string& path);
// A FWHM that may vary with wavelength, at `key` of `p`: a number (>= 0 when `allow_zero`, else
// > 0) or {"wavelength_angstrom": [...], "<value_key>": [...]} with at least two points,
// wavelengths strictly increasing and values > 0. Errors name the key's path.
ResolutionCurve parse_resolution_curve(JsonParams& p, const std::string& key,
                                       const std::string& value_key, bool allow_zero);
// The same back as JSON (a number for a constant).
nlohmann::json to_json(const ResolutionCurve& curve, const std::string& value_key);

// A preset by name ("MUSE", "SAMI", ...); an unknown name lists the known ones.
Telescope load_telescope_preset(const std::string& name, const std::string& path);

}  // namespace ifusim
