#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stages/stage.h"

namespace ifusim {

using StageFactory = std::unique_ptr<Stage> (*)(const nlohmann::json& params,
                                                const std::string& path);

struct StageEntry {
  const char* name;
  const char* summary;
  StageFactory make;
};

// Every stage the pipeline knows, in one explicit list (no static self-registration).
std::span<const StageEntry> stage_registry();

// Makes the stages of a run from a JSON array [{"stage": NAME, "params": {...}}, ...] at `path`
// (e.g. "stages"), validating every stage's parameters and the order (each stage's needs met by
// the input or an earlier stage) before anything runs. `available` is what the input provides.
std::vector<std::unique_ptr<Stage>> make_stages(const nlohmann::json& stages,
                                                const std::string& path,
                                                std::vector<std::string> available);

}  // namespace ifusim
