#include "stages/common/vector_kernels.h"

namespace ifusim {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define IFUSIM_VECTOR_CLONES \
  [[gnu::target_clones("avx512f", "avx2", "default"), gnu::optimize("fp-contract=off")]]
#else
#define IFUSIM_VECTOR_CLONES
#endif

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
