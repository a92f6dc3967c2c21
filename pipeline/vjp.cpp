#include "pipeline/vjp.h"

#include <stdexcept>
#include <string>

namespace ifusim {

namespace {

[[noreturn]] void refuse(const Stage& stage, const char* mode) {
  throw std::invalid_argument("gradient: the stage \"" + stage.name() + "\" has no " + mode +
                              " (it is not differentiable; docs/gradients.md lists those that "
                              "are): take it out of the run to differentiate it");
}

}  // namespace

CubeCotangent cube_stages_vjp(const std::vector<const Stage*>& cube_stages, const RunState& state,
                              CubeCotangent cotangent) {
  if (cotangent.data.size() != cotangent.shape.n_voxels())
    throw std::invalid_argument("gradient: the cotangent holds " +
                                std::to_string(cotangent.data.size()) + " values for a " +
                                to_string(cotangent.shape) + " cube");
  if (state.cube && !(state.cube->shape == cotangent.shape))
    throw std::invalid_argument("gradient: the cotangent is " + to_string(cotangent.shape) +
                                ", the run's cube " + to_string(state.cube->shape));
  for (auto it = cube_stages.rbegin(); it != cube_stages.rend(); ++it)
    if (!(*it)->adjoint(state, cotangent)) refuse(**it, "adjoint");
  return cotangent;
}

CubeCotangent cube_stages_jvp(const std::vector<const Stage*>& cube_stages, const RunState& state,
                              CubeCotangent tangent) {
  if (tangent.data.size() != tangent.shape.n_voxels())
    throw std::invalid_argument("gradient: the tangent holds " +
                                std::to_string(tangent.data.size()) + " values for a " +
                                to_string(tangent.shape) + " cube");
  for (const Stage* stage : cube_stages)
    if (!stage->tangent(state, tangent)) refuse(*stage, "tangent");
  return tangent;
}

}  // namespace ifusim
