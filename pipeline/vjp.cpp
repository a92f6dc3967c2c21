#include "pipeline/vjp.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <stdexcept>
#include <string>

namespace ifusim {

namespace {

[[noreturn]] void refuse(const Stage& stage, const char* mode) {
  throw std::invalid_argument("gradient: the stage \"" + stage.name() + "\" has no " + mode +
                              " (it is not differentiable; docs/gradients.md lists those that "
                              "are): take it out of the run to differentiate it");
}

// `what` ("cotangent", "tangent") holds one value a voxel of its shape.
void check_size(const CubeCotangent& c, const char* what) {
  if (c.values().size() != c.shape.n_voxels())
    throw std::invalid_argument(std::string("gradient: the ") + what + " holds " +
                                std::to_string(c.values().size()) + " values for a " +
                                to_string(c.shape) + " cube");
}

}  // namespace

void log_adjoint_seconds(const std::string& stage, std::chrono::steady_clock::time_point start) {
  spdlog::info("adjoint {:<16} {:8.3f} s", stage,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

CubeCotangent cube_stages_vjp(const std::vector<const Stage*>& cube_stages, const RunState& state,
                              CubeCotangent cotangent) {
  check_size(cotangent, "cotangent");
  if (state.cube && !(state.cube->shape == cotangent.shape))
    throw std::invalid_argument("gradient: the cotangent is " + to_string(cotangent.shape) +
                                ", the run's cube " + to_string(state.cube->shape));
  for (auto it = cube_stages.rbegin(); it != cube_stages.rend(); ++it) {
    const auto start = std::chrono::steady_clock::now();
    if (!(*it)->adjoint(state, cotangent)) refuse(**it, "adjoint");
    log_adjoint_seconds((*it)->name(), start);
  }
  return cotangent;
}

CubeCotangent cube_stages_jvp(const std::vector<const Stage*>& cube_stages, const RunState& state,
                              CubeCotangent tangent) {
  check_size(tangent, "tangent");
  for (const Stage* stage : cube_stages)
    if (!stage->tangent(state, tangent)) refuse(*stage, "tangent");
  return tangent;
}

}  // namespace ifusim
