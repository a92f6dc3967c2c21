#include "data/backend/cpu_system.h"
#include "stages/dust/dust.h"
#include "stages/dust/kernels.inl"
