#pragma once
// The backward pass over a run's cube stages (issue 27, docs/gradients.md, "The backward pass"):
// the cotangent of the final cube, dL/d voxel, taken back through every cube stage's adjoint, last
// stage first, to the cotangent of the reduced cube the reduction (psum) made, where the particle
// stages' adjoints take over.
#include <chrono>
#include <string>
#include <vector>

#include "data/cotangent.h"
#include "stages/stage.h"

namespace ifusim {

// `cube_stages`: the run's cube stages in run order, each of which has run on `state` (as the
// forward run left it, its cube still there or moved out). `cotangent`: dL/d the final cube,
// shaped as it. Returns dL/d the reduced cube (its shape: the margin-included one where a stage
// cropped it). std::invalid_argument naming the stage where one has no adjoint, and where the
// cotangent is not shaped as the state's cube.
CubeCotangent cube_stages_vjp(const std::vector<const Stage*>& cube_stages, const RunState& state,
                              CubeCotangent cotangent);

// Forward mode over the same stages, first to last (the stages' tangent()): a change of the
// reduced cube to the change of the final cube, in double. What the backward pass is checked
// against (<J x, y> = <x, J^T y>, tests/test_adjoints.cpp); std::invalid_argument as above.
CubeCotangent cube_stages_jvp(const std::vector<const Stage*>& cube_stages, const RunState& state,
                              CubeCotangent tangent);

// Logs (info) a stage's adjoint's seconds since `start`, as the forward run logs each stage's.
void log_adjoint_seconds(const std::string& stage, std::chrono::steady_clock::time_point start);

}  // namespace ifusim
