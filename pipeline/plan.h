#pragma once
// The dry run (`ifusim plan`), and the check `ifusim run` makes before it reads the galaxy: how
// every field of the galaxy would be sharded, the particles per device, and each memory space's
// estimate (the particle fields it holds plus what every stage declares,
// Stage::memory_estimate) against what that memory can give.
#include <memory>
#include <string>
#include <vector>

#include "data/mesh.h"
#include "data/ssp_grid.h"
#include "io/run_config.h"
#include "stages/stage.h"

namespace ifusim {

struct RunPlan {
  std::string report;                 // the printable plan
  std::vector<std::string> problems;  // what does not fit, one sentence each
  bool fits() const { return problems.empty(); }
};

// The observation as the config and the templates give it, before the galaxy is read: all but
// the cosmology's distances and scale (which may come from the snapshot) and the margin.
Observation observation_of(const RunConfig& config, const SspGrid& ssp);

// What the run simulates beyond the field and the band: the stages' margins summed per axis.
CubeMargin run_margin(const std::vector<const Stage*>& stages, const Observation& obs);

// `read_gas`: whether the run reads the gas (some stage uses it and the config allows it);
// `margin`: run_margin of the stages.
RunPlan plan_run(const RunConfig& config, const Mesh& mesh, const std::vector<const Stage*>& stages,
                 const SspGrid& ssp, bool read_gas, const CubeMargin& margin);

}  // namespace ifusim
