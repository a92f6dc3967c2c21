#include "data/backend/cpu_system.h"
#include "pipeline/collectives/psum.h"
#include "pipeline/collectives/psum_kernels.inl"
