#include "stages/common/vector_kernels.h"

namespace ifusim {

IFUSIM_VECTOR_CLONES void add_scaled(double* __restrict y, double a, const double* __restrict x,
                                     std::size_t n) {
#pragma omp simd
  for (std::size_t k = 0; k < n; ++k) y[k] += a * x[k];
}

IFUSIM_VECTOR_CLONES void add_scaled(double* __restrict y, double a, const float* __restrict x,
                                     std::size_t n) {
#pragma omp simd
  for (std::size_t k = 0; k < n; ++k) y[k] += a * static_cast<double>(x[k]);
}

IFUSIM_VECTOR_CLONES void add_products(double* __restrict y, const double* __restrict a,
                                       const double* __restrict x, std::size_t n) {
#pragma omp simd
  for (std::size_t k = 0; k < n; ++k) y[k] += a[k] * x[k];
}

}  // namespace ifusim
