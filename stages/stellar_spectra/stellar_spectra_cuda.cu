#include "data/backend/cuda_system.cuh"
#include "data/fixed_point.h"
#include "stages/stellar_spectra/stellar_spectra.h"
#include "stages/stellar_spectra/kernels.inl"
