#pragma once
// `ifusim run`: config -> galaxy -> stages -> outputs.
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/cotangent.h"
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

// A forward run kept for its backward pass (issue 27, docs/gradients.md "A forward kept for its
// backward"): the run of `config` forward, as run_pipeline makes it (no file written), holding
// what its stages left (the run's set-up, its RunState: the particles and what the stages derived,
// and each stage's own forward state), so that a gradient costs one forward and one backward, not
// a second forward. run_pipeline_vjp is this and one backward().
//
// Refused as run_pipeline_vjp refuses (arms, a streamed galaxy, across processes), when made.
// Move-only; not to be used from two threads at once. Its memory: everything the forward held
// at its end but the cube's partials (reduced) and the cube itself (in report(), movable out):
// the particles as the stages left them (every input field, float32, and the derived ones) and
// the stages' tables (SSP templates, basis layout, PSF/LSF kernels); the plan's estimate of the
// forward's particle and table memory, less the histogram tiles.
class ForwardSession {
 public:
  ForwardSession(const RunConfig& config, const RunOptions& options);
  ForwardSession(ForwardSession&&) noexcept;
  ForwardSession& operator=(ForwardSession&&) noexcept;
  ~ForwardSession();

  // The forward run's report: its cube (bitwise run_pipeline's, the noise included), summary and
  // times. The cube may be moved out: backward() does not read it.
  RunReport& report();
  const RunReport& report() const;
  const CubeShape& cube_shape() const;  // the final cube's, as the forward made it
  double forward_seconds() const;       // set-up, reading the galaxy and every stage
  std::size_t n_stars() const;
  std::size_t n_gas() const;

  // dL/d each particle field for `cotangent`, dL/d the final cube (shaped as Cube::data:
  // spaxel-major, cube_shape().n_voxels() values; std::invalid_argument otherwise), read in
  // place (copied only where a stage's adjoint works in place, CubeCotangent): the cube
  // stages' adjoints, last first, then the particle stages' particle_adjoint, last first. May be
  // called again, with the same or another cotangent: every adjoint reads its stage's forward
  // state without changing it, so each call's gradients are bitwise those of a fresh
  // run_pipeline_vjp. A stage without an adjoint: ConfigError naming it.
  ParticleGradients backward(std::span<const double> cotangent);

 private:
  struct Held;
  std::unique_ptr<Held> held_;
};

// Reverse mode (issue 27, docs/gradients.md "The entry point"): the run of `config` forward, as
// run_pipeline makes it (its stages kept, no file written), then its vector-Jacobian product:
// `cotangent`, dL/d the final cube (shaped as Cube::data: spaxel-major, nx x ny x n_wave values),
// taken back through every cube stage's adjoint, last first, then every particle stage's
// particle_adjoint, last first, to dL/d each particle field. Refused with a ConfigError naming
// the key or the stage: a spectrograph's arms, a streamed galaxy, a run across processes, a stage
// with no adjoint; std::invalid_argument where the cotangent is not shaped as the cube.
struct VjpReport {
  RunReport forward;             // the forward run's cube (with the noise, where a stage adds it)
  ParticleGradients gradients;   // keyed by the names Galaxy.from_arrays takes, in its order
  double forward_seconds = 0.0;  // the stages forward (reading the galaxy included)
  double backward_seconds = 0.0;
};
VjpReport run_pipeline_vjp(const RunConfig& config, const RunOptions& options,
                           const std::vector<double>& cotangent);
// The same, the cotangent asked for once the forward run has made the cube (its shape given):
// the Python package checks the user's array against that shape there, and may throw. The values
// are read in place and must outlive the call.
VjpReport run_pipeline_vjp(
    const RunConfig& config, const RunOptions& options,
    const std::function<std::span<const double>(const CubeShape&)>& cotangent);

// The dry run: the plan run_pipeline checks first (pipeline/plan.h), without reading particles.
struct RunPlan;
RunPlan plan_pipeline(const RunConfig& config, const RunOptions& options);

}  // namespace ifusim
