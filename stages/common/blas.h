#pragma once
// Matrix products through OpenBLAS (Debian's libopenblas-serial-dev), which picks its kernels for
// the CPU it runs on: AVX-512 or AVX2 where there are, where the project itself is built for
// baseline x86-64 (Eigen's GEMM then runs in SSE2, four floats a register; OpenBLAS's sgemm
// was 2.4x faster on a 32 x 14600 by 14600 x 336 block here). Row-major. OpenBLAS's serial build
// (CMakeLists.txt): each call runs on the calling thread (the callers spread their blocks over
// OpenMP threads, and a product whose blocking followed the thread count would not be
// reproducible), so the same inputs give the same bits on a given CPU.
#include <cstddef>

namespace ifusim {

// c (m x n, row stride ldc) = a (m x k, row stride lda) b (k x n, row stride ldb), in float.
void gemm_float(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda,
                const float* b, std::size_t ldb, float* c, std::size_t ldc);
// c (m x n, row stride ldc) = a (m x k, row stride lda) b^T, with b (n x k, row stride ldb), in
// double.
void gemm_double_nt(std::size_t m, std::size_t n, std::size_t k, const double* a, std::size_t lda,
                    const double* b, std::size_t ldb, double* c, std::size_t ldc);

}  // namespace ifusim
