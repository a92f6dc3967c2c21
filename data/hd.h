#pragma once
// IFUSIM_HD marks functions and functors that run on the host and on CUDA devices. The CPU build
// (g++, Thrust's OpenMP system) needs no CUDA headers, so the macro is empty there.
#if defined(__CUDACC__)
#define IFUSIM_HD __host__ __device__
#else
#define IFUSIM_HD
#endif

namespace ifusim {

// a * b and a + b each rounded on its own, never fused into a multiply-add. nvcc contracts
// a * b + c into one FMA by default (-fmad=true) while the host build (x86-64 without FMA) rounds
// twice, so where the result picks a discrete cell (which spaxel a particle falls in) the two
// backends could put a particle on a cell's edge into different cells. __dmul_rn / __dadd_rn are
// never contracted (CUDA C Programming Guide, "Intrinsic Functions").
IFUSIM_HD inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
IFUSIM_HD inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
// The same in float (__fmul_rn / __fadd_rn): the binned product's dense blocks on a GPU, whose
// float sums must be the host's bits (binned_product.h). The host build is ISO C++ (CMake's
// CXX_EXTENSIONS OFF), where GCC does not contract across statements (-ffp-contract=off).
IFUSIM_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
IFUSIM_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

}  // namespace ifusim
