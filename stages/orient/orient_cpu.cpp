#include "data/backend/cpu_system.h"
#include "data/fixed_point.h"
#include "stages/orient/orient.h"
#include "stages/orient/kernels.inl"
