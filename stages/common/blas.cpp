#include "stages/common/blas.h"

#include <cblas.h>

namespace ifusim {

namespace {
int as_int(std::size_t v) {
  return static_cast<int>(v);
}
}  // namespace

void gemm_float(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda,
                const float* b, std::size_t ldb, float* c, std::size_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, as_int(m), as_int(n), as_int(k), 1.0f, a,
              as_int(lda), b, as_int(ldb), 0.0f, c, as_int(ldc));
}

void gemm_double_nt(std::size_t m, std::size_t n, std::size_t k, const double* a, std::size_t lda,
                    const double* b, std::size_t ldb, double* c, std::size_t ldc) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_int(m), as_int(n), as_int(k), 1.0, a,
              as_int(lda), b, as_int(ldb), 0.0, c, as_int(ldc));
}

}  // namespace ifusim
