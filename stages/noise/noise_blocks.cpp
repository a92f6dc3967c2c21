#include "stages/noise/noise_blocks.h"

#include <cmath>
#include <limits>

#include "stages/common/vector_kernels.h"

namespace ifusim {

IFUSIM_VECTOR_CLONES void ziggurat_first_draws(std::uint64_t state, std::uint64_t first_index,
                                               std::size_t n, const ZigguratTables& tables,
                                               double* __restrict z) {
  const double* x = tables.x;
#pragma omp simd
  for (std::size_t l = 0; l < n; ++l) {
    // ziggurat_normal's first step on counter_normal_of_state's first word.
    const std::uint64_t b = mix64(state + (first_index + l + 1) * kGolden);
    const int i = static_cast<int>(b & 0xff);
    const double sign = (b & 0x100) ? -1.0 : 1.0;
    const double u = static_cast<double>(b >> 11) * 0x1.0p-53;
    const double draw = u * x[i];
    z[l] = draw < x[i + 1] ? sign * draw : std::numeric_limits<double>::quiet_NaN();
  }
}

IFUSIM_VECTOR_CLONES long long apply_snr_model(float* __restrict data, float* __restrict variance,
                                               const double* __restrict bg,
                                               const double* __restrict shot,
                                               const double* __restrict z, std::size_t n) {
  long long tiny = 0;
#pragma omp simd reduction(+ : tiny)
  for (std::size_t l = 0; l < n; ++l) {
    const double signal = data[l];
    // NaN: no measurement there, no variance. (GCC inlines neither std::isnan nor std::max into a
    // function with the clones' optimize attribute: calls, and the loop left scalar.)
    const bool outside = signal != signal;
    const double var = bg[l] + (signal > 0.0 ? signal : 0.0) * shot[l];
    tiny += var > 0.0 && var < std::numeric_limits<float>::min();
    variance[l] = outside ? data[l] : static_cast<float>(var);
    data[l] = outside ? data[l] : static_cast<float>(signal + std::sqrt(var) * z[l]);
  }
  return tiny;
}

}  // namespace ifusim
