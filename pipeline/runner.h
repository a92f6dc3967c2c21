#pragma once
// `ifusim run`: config -> galaxy -> stages -> outputs.
#include <functional>
#include <nlohmann/json.hpp>
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
  // Called before each step (reading the galaxy, then each stage) and once more at the end with
  // done == total. It replaces the progress bar, and may throw to stop the run (the Python
  // package's Ctrl-C): the run then leaves no output behind.
  std::function<void(std::size_t done, std::size_t total, const std::string& step)> on_progress;
  bool write_outputs = true;  // false: the cube comes back in the report only, no file is written
  // One galaxy across the processes mpirun started (mpirun ifusim run): its stars are streamed,
  // each process deposits every K-th block on its devices, the collectives sum over the
  // processes, and process 0 writes the outputs. The cube is bitwise the one-process run's.
  bool across_processes = false;
};

struct StageReport {
  std::string name;
  double seconds = 0.0;
  std::size_t peak_device_bytes = 0;  // device buffers allocated at the stage's peak
  std::size_t peak_rss_bytes = 0;     // process resident set at the stage's peak
};

struct RunReport {
  std::string output_dir;            // "" when no output was written
  std::vector<std::string> files;    // written, relative to output_dir
  std::vector<std::string> devices;  // descriptions
  std::vector<std::size_t> stars_per_device;
  std::vector<StageReport> stages;
  double total_seconds = 0.0;
  nlohmann::json summary;  // summary.json: devices, stages' timings and memory, the cube's shape
  Cube cube;               // the final cube (also on disk); with arms, the first arm's
  std::vector<Cube> arms;  // with arms (RunConfig::arms), every arm's cube in order
};

RunReport run_pipeline(const RunConfig& config, const RunOptions& options);

// The dry run: the plan run_pipeline checks first (pipeline/plan.h), without reading particles.
struct RunPlan;
RunPlan plan_pipeline(const RunConfig& config, const RunOptions& options);

}  // namespace ifusim
