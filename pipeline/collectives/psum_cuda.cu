#include "data/backend/cuda_system.cuh"
#include "pipeline/collectives/psum.h"
#include "pipeline/collectives/psum_kernels.inl"
