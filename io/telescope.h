#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/json_params.h"
#include "data/resolution_curve_json.h"  // parse_resolution_curve, to_json of a ResolutionCurve
#include "data/telescope.h"

namespace ifusim {

// The folder of telescope presets: $IFUSIM_CONFIG_DIR/telescopes, else the project's
// configs/telescopes.
std::string telescope_preset_dir();
std::vector<std::string> telescope_preset_names();

// A telescope described in JSON (the preset files' format, docs/config.md); errors name `path`.
Telescope parse_telescope(const nlohmann::json& object, const std::string& path);

// A preset by name ("MUSE", "SAMI", ...); an unknown name lists the known ones.
Telescope load_telescope_preset(const std::string& name, const std::string& path);

// The run config's `telescope`: a preset name, a telescope object, or a preset with some of its
// fields replaced, {"preset": "MUSE", "spaxel_arcsec": 0.4} (what `--set telescope.KEY=V` makes
// of a preset name). Errors name `path` ("telescope") and the key.
Telescope parse_telescope_entry(const nlohmann::json& entry, const std::string& path);

}  // namespace ifusim
