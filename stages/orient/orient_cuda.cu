#include "data/backend/cuda_system.cuh"
#include "data/fixed_point.h"
#include "stages/orient/orient.h"
#include "stages/orient/kernels.inl"
