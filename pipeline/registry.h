#pragma once
// The stage registry: every stage the pipeline knows, in one explicit list
// (pipeline/registry.cpp; no static self-registration), each described by its entry
// (stages/stage.h: StageEntry).
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_params.h"
#include "stages/stage.h"

namespace ifusim {

// Every stage, in pipeline order.
std::span<const StageEntry> stage_registry();

// The entry of stage `name`; a ConfigError at `path` naming the known stages otherwise.
const StageEntry& stage_entry(const std::string& name, const std::string& path);

// One stage of a run: its entry, the stage made from its parameters, and the config path of its
// parameters ("stages.psf", "stages[2].params").
struct RunStage {
  const StageEntry* entry = nullptr;
  std::unique_ptr<Stage> stage;
  std::string path;
};

// One stage by name, its parameters at `path`.
std::unique_ptr<Stage> make_stage(const std::string& name, const nlohmann::json& params,
                                  const std::string& path, const StageResources& resources);

// Checks a run's stages before anything runs, with errors naming the stage's config path:
// - every stage's needs are met by `available` (what the input provides: the field table of
//   data/galaxy_data.h) or an earlier stage;
// - a particle field a stage provides ("stars.x", "gas.x") is typed (Provided::field) and is
//   not an input field;
// - a stage is listed once unless its entry says it may repeat;
// - the particle stages come before the reduction (psum, if listed) and the cube stages after.
void check_stages(const std::vector<RunStage>& stages, std::vector<std::string> available);

// A stage's parameter schema, recorded from its own parsing of its entry's examples
// (StageEntry::examples): every key it reads, with its kind, its default or whether it is
// required, and what its checks hold it to. `error`: why an example did not make the stage
// ("" when all did; the keys read before the error are recorded all the same: the SSP library
// stellar_spectra needs is checked after its parameters).
struct StageParameters {
  std::vector<ParamRecord> params;
  std::string error;
};
StageParameters stage_parameters(const StageEntry& entry, const StageResources& resources = {});

// The particle fields every input gives (the field table's fields that no stage derives), as
// needs: "stars.position_kpc", ...
std::vector<std::string> input_fields();

// Makes the stages of a JSON array [{"stage": NAME, "params": {...}}, ...] at `path` (e.g.
// "stages"), validating every stage's parameters and checking them (check_stages) before
// anything runs. `available` is what the input provides (input_fields(): all the input fields).
std::vector<std::unique_ptr<Stage>> make_stages(const nlohmann::json& stages,
                                                const std::string& path,
                                                std::vector<std::string> available,
                                                const StageResources& resources = {});

}  // namespace ifusim
