#include "data/backend/cpu_system.h"
#include "stages/spaxel_grid/spaxel_grid.h"
#include "stages/spaxel_grid/kernels.inl"
