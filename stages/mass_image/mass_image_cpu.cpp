#include "data/backend/cpu_system.h"
#include "data/fixed_point.h"
#include "stages/mass_image/mass_image.h"
#include "stages/mass_image/kernels.inl"
