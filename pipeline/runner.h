#pragma once
// `ifusim run`: config -> galaxy -> stages -> outputs.
#include <optional>
#include <string>
#include <vector>

#include "data/datacube.h"
#include "io/run_config.h"

namespace ifusim {

struct RunOptions {
  std::optional<Backend> backend;         // overrides devices.backend
  std::optional<int> n_devices;           // overrides devices.count
  std::optional<std::string> output_dir;  // overrides output.dir
  bool progress = true;                   // a progress bar on stderr when it is a terminal
};

struct StageReport {
  std::string name;
  double seconds = 0.0;
  std::size_t peak_device_bytes = 0;  // device buffers allocated at the stage's peak
  std::size_t peak_rss_bytes = 0;     // process resident set at the stage's peak
};

struct RunReport {
  std::string output_dir;
  std::vector<std::string> files;    // written, relative to output_dir
  std::vector<std::string> devices;  // descriptions
  std::vector<std::size_t> stars_per_device;
  std::vector<StageReport> stages;
  double total_seconds = 0.0;
  Cube cube;  // the final cube (also on disk)
};

RunReport run_pipeline(const RunConfig& config, const RunOptions& options);

// The dry run: the plan run_pipeline checks first (pipeline/plan.h), without reading particles.
struct RunPlan;
RunPlan plan_pipeline(const RunConfig& config, const RunOptions& options);

}  // namespace ifusim
