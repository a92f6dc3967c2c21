#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "pipeline/registry.h"

namespace ifusim::cli {
namespace {

// A stage's registry entry: what is known of it before it is made.
nlohmann::json describe(const StageEntry& entry) {
  nlohmann::json out = {{"name", entry.name},
                        {"kind", to_string(entry.kind)},
                        {"summary", entry.summary},
                        {"crops_margin", entry.crops_margin},
                        {"repeatable", entry.repeatable},
                        {"inherits", nlohmann::json::object()},
                        {"quicklooks", nlohmann::json::array()}};
  for (const InheritedKey& key : entry.inherits) out["inherits"][key.param] = key.run_key;
  out["parameters"] = nlohmann::json::array();
  for (const ParamRecord& p : stage_parameters(entry).params) {
    nlohmann::json param = {{"key", p.key}, {"kind", p.kind}, {"required", p.required}};
    if (!p.fallback.is_null()) param["default"] = p.fallback;
    if (!p.expected.empty()) param["expected"] = p.expected;
    out["parameters"].push_back(param);
  }
  for (const QuickLook& q : entry.quicklooks) {
    nlohmann::json maps = nlohmann::json::array();
    for (const auto& [map, title] : q.maps) maps.push_back(map);
    out["quicklooks"].push_back({{"file", q.file}, {"maps", maps}});
  }
  return out;
}

}  // namespace

void add_stages_command(CLI::App& app, int& exit_code) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "stages",
      "List the stages a pipeline can name, in pipeline order: kind, summary, the "
      "run-config keys their parameters inherit, the quick-looks they draw");
  cmd->add_flag("--json", *json, "Print one JSON array");
  cmd->callback([json, &exit_code] {
    nlohmann::json all = nlohmann::json::array();
    for (const StageEntry& entry : stage_registry()) all.push_back(describe(entry));
    if (*json) {
      std::cout << all.dump(1) << "\n";
    } else {
      for (const auto& s : all) {
        std::cout << s["name"].get<std::string>() << " (" << s["kind"].get<std::string>()
                  << "): " << s["summary"].get<std::string>() << "\n";
        for (const auto& p : s["parameters"]) {
          std::cout << "    " << p["key"].get<std::string>() << ": "
                    << (p["kind"].get<std::string>().empty() ? "optional"
                                                             : p["kind"].get<std::string>());
          if (p.contains("default")) std::cout << ", default " << p["default"].dump();
          if (p["required"].get<bool>()) std::cout << ", required";
          for (const auto& e : p.value("expected", nlohmann::json::array()))
            std::cout << "; " << e.get<std::string>();
          std::cout << "\n";
        }
        for (const auto& [param, key] : s["inherits"].items())
          std::cout << "    " << param << " defaults to the run config's " << key.get<std::string>()
                    << "\n";
        for (const auto& q : s["quicklooks"])
          std::cout << "    draws " << q["file"].get<std::string>() << "\n";
        if (s["crops_margin"].get<bool>())
          std::cout << "    crops the margin the PSF and LSF simulate\n";
      }
    }
    exit_code = 0;
  });
}

}  // namespace ifusim::cli
