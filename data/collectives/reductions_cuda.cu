// Thin backend translation unit: the stage's kernels compiled for this backend's Thrust system.
// The includes are in blocks because their order matters: the system, then the declarations,
// then the kernels.
#include "data/backend/cuda_system.cuh"

#include "data/collectives/reductions.h"

#include "data/collectives/reductions_kernels.inl"
