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

// The telescope back in that format (parse_telescope(to_json(t)) gives t again, less the
// description): what the runner hands the stages that inherit `telescope.*` keys
// (StageEntry::inherits), so that the runner need not know which keys they read. Parts the
// telescope does not have (a PSF of 0, no collecting area, throughput, site or fibres) are left
// out, as a preset leaves them out.
nlohmann::json to_json(const Telescope& telescope);

// A preset by name ("MUSE", "SAMI", ...); an unknown name lists the known ones.
Telescope load_telescope_preset(const std::string& name, const std::string& path);

// The run config's `telescope`: a preset name, a telescope object, or a preset with some of its
// fields replaced, {"preset": "MUSE", "spaxel_arcsec": 0.4} (what `--set telescope.KEY=V` makes
// of a preset name). Errors name `path` ("telescope") and the key.
Telescope parse_telescope_entry(const nlohmann::json& entry, const std::string& path);

}  // namespace ifusim
