// Thin backend translation unit: the stage's kernels compiled for this backend's Thrust system.
// The includes are in blocks because their order matters: the system, then the declarations,
// then the kernels.
#include "data/backend/cuda_system.cuh"

#include "data/fixed_point.h"
#include "data/wavelength.h"
#include "stages/emission_lines/emission_lines.h"

#include "stages/emission_lines/kernels.inl"
