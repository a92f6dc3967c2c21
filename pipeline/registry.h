#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/ssp_grid.h"
#include "stages/resources.h"  // StageResources
#include "stages/stage.h"

namespace ifusim {

using StageFactory = std::unique_ptr<Stage> (*)(const nlohmann::json& params,
                                                const std::string& path);

using ResourceStageFactory = std::unique_ptr<Stage> (*)(const nlohmann::json& params,
                                                        const std::string& path,
                                                        const StageResources& resources);

struct StageEntry {
  const char* name;
  const char* summary;
  StageFactory make;  // one of the two is set
  ResourceStageFactory make_with_resources;
};

// Every stage the pipeline knows, in one explicit list (no static self-registration).
std::span<const StageEntry> stage_registry();

// Makes the stages of a run from a JSON array [{"stage": NAME, "params": {...}}, ...] at `path`
// (e.g. "stages"), validating every stage's parameters and the order (each stage's needs met by
// the input or an earlier stage) before anything runs. `available` is what the input provides.
std::vector<std::unique_ptr<Stage>> make_stages(const nlohmann::json& stages,
                                                const std::string& path,
                                                std::vector<std::string> available,
                                                const StageResources& resources = {});

// One stage by name, its parameters at `path` (used by make_stages and the runner).
std::unique_ptr<Stage> make_stage(const std::string& name, const nlohmann::json& params,
                                  const std::string& path, const StageResources& resources);
// Checks that every stage's needs are met by `available` or an earlier stage.
void check_stage_order(const std::vector<std::unique_ptr<Stage>>& stages,
                       const std::vector<std::string>& paths, std::vector<std::string> available);

}  // namespace ifusim
