#include "data/backend/cuda_system.cuh"
#include "stages/dust/dust.h"
#include "stages/dust/kernels.inl"
