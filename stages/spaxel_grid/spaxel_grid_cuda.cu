#include "data/backend/cuda_system.cuh"
#include "stages/spaxel_grid/spaxel_grid.h"
#include "stages/spaxel_grid/kernels.inl"
