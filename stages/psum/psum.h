#pragma once
// The psum stage: the reduction between the particle and the cube stages. It sums every partial
// result the particle stages declared (RunState::partials) over the mesh and the processes,
// exactly (fixed point), and lets each make what it stands for: the cube, the kinematic maps,
// ... The run loop does this whether or not a config lists psum; listed, it must stand between
// the particle and the cube stages.
#include "stages/stage.h"

namespace ifusim {

StageEntry psum_stage();

}  // namespace ifusim
