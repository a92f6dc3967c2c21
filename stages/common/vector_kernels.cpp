#include "stages/common/vector_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ifusim {

IFUSIM_VECTOR_CLONES void add_scaled(double* __restrict y, double a, const double* __restrict x,
                                     std::size_t n) {
#pragma omp simd
  for (std::size_t k = 0; k < n; ++k) y[k] += a * x[k];
}

// Eight elements at a time (an AVX-512 register; two or four narrower ones in the other clones),
// up to four outputs' sums held in registers while each plane's eight are read once (and widened),
// then the elements left one at a time, in the same order. Out: double, or float (each sum
// rounded once); output q at out + q * out_stride.
namespace {
template <class Out>
[[gnu::always_inline]] inline void mix_planes_into(Out* __restrict out, std::size_t out_stride,
                                                   std::size_t n, const float* __restrict planes,
                                                   std::size_t n_planes,
                                                   const double* __restrict weights,
                                                   std::size_t n_out) {
  typedef double Doubles __attribute__((vector_size(64)));
  typedef float Floats8 __attribute__((vector_size(32)));
  constexpr std::size_t kLanes = 8, kOutputs = 4;
  std::size_t g = 0;
  for (; g + kLanes <= n; g += kLanes)
    for (std::size_t q0 = 0; q0 < n_out; q0 += kOutputs) {
      const std::size_t outputs = n_out - q0 < kOutputs ? n_out - q0 : kOutputs;
      Doubles sum[kOutputs];
      Floats8 narrow;
      std::memcpy(&narrow, planes + g, sizeof narrow);
      Doubles plane = __builtin_convertvector(narrow, Doubles);
      for (std::size_t q = 0; q < outputs; ++q) sum[q] = weights[(q0 + q) * n_planes] * plane;
      for (std::size_t t = 1; t < n_planes; ++t) {
        std::memcpy(&narrow, planes + t * n + g, sizeof narrow);
        plane = __builtin_convertvector(narrow, Doubles);
        for (std::size_t q = 0; q < outputs; ++q)
          sum[q] += weights[(q0 + q) * n_planes + t] * plane;
      }
      for (std::size_t q = 0; q < outputs; ++q) {
        if constexpr (std::is_same_v<Out, float>) {
          const Floats8 rounded = __builtin_convertvector(sum[q], Floats8);
          std::memcpy(out + (q0 + q) * out_stride + g, &rounded, sizeof rounded);
        } else {
          std::memcpy(out + (q0 + q) * out_stride + g, &sum[q], sizeof sum[q]);
        }
      }
    }
  for (; g < n; ++g)
    for (std::size_t q = 0; q < n_out; ++q) {
      const double* w = weights + q * n_planes;
      double sum = w[0] * static_cast<double>(planes[g]);
      for (std::size_t t = 1; t < n_planes; ++t)
        sum += w[t] * static_cast<double>(planes[t * n + g]);
      out[q * out_stride + g] = static_cast<Out>(sum);
    }
}
}  // namespace

IFUSIM_VECTOR_CLONES void mix_planes(double* __restrict out, std::size_t n,
                                     const float* __restrict planes, std::size_t n_planes,
                                     const double* __restrict weights, std::size_t n_out) {
  mix_planes_into(out, n, n, planes, n_planes, weights, n_out);
}

IFUSIM_VECTOR_CLONES void mix_planes_rounded(float* __restrict out, std::size_t out_stride,
                                             std::size_t n, const float* __restrict planes,
                                             std::size_t n_planes, const double* __restrict weights,
                                             std::size_t n_out) {
  mix_planes_into(out, out_stride, n, planes, n_planes, weights, n_out);
}

// Tiles of 64 elements of y: a group's float sums in four AVX-512 registers, y's in eight, then
// the elements left one at a time, in the same order.
IFUSIM_VECTOR_CLONES void add_scaled_rows(double* __restrict y, std::size_t n,
                                          const double* __restrict a,
                                          const std::int32_t* __restrict rows, std::size_t count,
                                          const float* __restrict x, std::size_t x_stride) {
  typedef float Floats __attribute__((vector_size(64)));
  typedef float Floats8 __attribute__((vector_size(32)));
  typedef double Doubles __attribute__((vector_size(64)));
  constexpr std::size_t kLanes = 16, kVectors = 4, kTile = kLanes * kVectors;
  std::size_t k = 0;
  for (; k + kTile <= n; k += kTile) {
    Doubles total[2 * kVectors];
    std::memcpy(total, y + k, sizeof total);
    for (std::size_t g = 0; g < count; g += kScaledRowsGroup) {
      const std::size_t g1 = g + kScaledRowsGroup < count ? g + kScaledRowsGroup : count;
      Floats sum[kVectors] = {};
      for (std::size_t e = g; e < g1; ++e) {
        const float* xe = x + static_cast<std::size_t>(rows[e]) * x_stride + k;
        const auto ae = static_cast<float>(a[e]);
        for (std::size_t v = 0; v < kVectors; ++v) {
          Floats f;
          std::memcpy(&f, xe + v * kLanes, sizeof f);
          sum[v] += ae * f;
        }
      }
      for (std::size_t v = 0; v < kVectors; ++v) {
        Floats8 half[2];
        std::memcpy(half, &sum[v], sizeof half);
        total[2 * v] += __builtin_convertvector(half[0], Doubles);
        total[2 * v + 1] += __builtin_convertvector(half[1], Doubles);
      }
    }
    std::memcpy(y + k, total, sizeof total);
  }
  for (; k < n; ++k) {
    double total = y[k];
    for (std::size_t g = 0; g < count; g += kScaledRowsGroup) {
      const std::size_t g1 = g + kScaledRowsGroup < count ? g + kScaledRowsGroup : count;
      float sum = 0.0f;
      for (std::size_t e = g; e < g1; ++e)
        sum += static_cast<float>(a[e]) * x[static_cast<std::size_t>(rows[e]) * x_stride + k];
      total += static_cast<double>(sum);
    }
    y[k] = total;
  }
}

IFUSIM_VECTOR_CLONES void widen(double* __restrict out, const float* __restrict in, std::size_t n) {
#pragma omp simd
  for (std::size_t k = 0; k < n; ++k) out[k] = in[k];
}

IFUSIM_VECTOR_CLONES void narrow(float* __restrict out, const double* __restrict in,
                                 std::size_t n) {
#pragma omp simd
  for (std::size_t k = 0; k < n; ++k) out[k] = static_cast<float>(in[k]);
}

IFUSIM_VECTOR_CLONES void convolve_contiguous(double* __restrict out, const double* __restrict src,
                                              std::size_t n, std::size_t taps,
                                              const double* __restrict weights) {
  for (std::size_t k0 = 0; k0 < n; k0 += kContiguousTargets) {
    double sum[kContiguousTargets] = {};
    for (std::size_t t = 0; t < taps; ++t) {
      const double* w = weights + t * n + k0;
      const double* s = src + k0 + t;
#pragma omp simd
      for (std::size_t l = 0; l < kContiguousTargets; ++l) sum[l] += w[l] * s[l];
    }
    for (std::size_t l = 0; l < kContiguousTargets; ++l) out[k0 + l] = sum[l];
  }
}

namespace {

// convolve_rows_by_lane and _by_target: kAxisRows sums of kAxisLanes lanes in registers.
template <bool kByLane>
[[gnu::always_inline]] inline void convolve_rows(double* __restrict out,
                                                 const double* __restrict src, std::size_t lanes,
                                                 std::size_t width, int n, int k0, int reach,
                                                 const double* __restrict weights) {
  const std::size_t padded = axis_padded_taps(reach);
  const int j_first = std::max(0, k0 - reach);
  const int j_last = std::min(n - 1, k0 + kAxisRows - 1 + reach);
  for (std::size_t l0 = 0; l0 < width; l0 += kAxisLanes) {
    double sum[kAxisRows][kAxisLanes] = {};
    for (int j = j_first; j <= j_last; ++j) {
      const double* s = src + static_cast<std::size_t>(j) * lanes + l0;
#pragma GCC unroll 4
      for (int r = 0; r < kAxisRows; ++r) {
        const auto u = static_cast<std::size_t>(j - k0 - r + reach + kAxisRows - 1);
        if constexpr (kByLane) {
          const double* w = weights + u * lanes + l0;
#pragma omp simd
          for (std::size_t l = 0; l < kAxisLanes; ++l) sum[r][l] += w[l] * s[l];
        } else {
          const double w = weights[static_cast<std::size_t>(k0 + r) * padded + u];
#pragma omp simd
          for (std::size_t l = 0; l < kAxisLanes; ++l) sum[r][l] += w * s[l];
        }
      }
    }
    for (int r = 0; r < kAxisRows; ++r)
      for (std::size_t l = 0; l < kAxisLanes; ++l)
        out[static_cast<std::size_t>(r) * lanes + l0 + l] = sum[r][l];
  }
}

}  // namespace

IFUSIM_VECTOR_CLONES void convolve_rows_by_lane(double* __restrict out,
                                                const double* __restrict src, std::size_t lanes,
                                                std::size_t width, int n, int k0, int reach,
                                                const double* __restrict weights) {
  convolve_rows<true>(out, src, lanes, width, n, k0, reach, weights);
}

IFUSIM_VECTOR_CLONES void convolve_rows_by_target(double* __restrict out,
                                                  const double* __restrict src, std::size_t lanes,
                                                  std::size_t width, int n, int k0, int reach,
                                                  const double* __restrict weights) {
  convolve_rows<false>(out, src, lanes, width, n, k0, reach, weights);
}

// Register tiles of 4 rows x 64 columns (16 accumulators of 16 floats: AVX-512's 32 registers
// hold them and a row of b), or 4 x 16 for the columns left, over panels of the depth: a panel's
// strip of b (kDepthPanel x 64 floats, 128 kB) stays in the core's cache while every row group
// passes over it, where whole columns of b (the block's thousands of populated columns) would be
// read from memory once per row group. A tile's sums carry over from one panel to the next
// through c (a float stored and loaded as it was), so every element is still one ordered sum
// over the depth. The rows left (fewer than 4) and the columns left (fewer than 16) are summed
// one element at a time, in the same order.
IFUSIM_VECTOR_CLONES void multiply_rows(const float* __restrict a, std::size_t rows,
                                        std::size_t depth, const float* __restrict b,
                                        std::size_t b_stride, const std::int32_t* b_rows,
                                        std::size_t width, float* __restrict c) {
  auto b_row = [&](std::size_t q) {
    return b + (b_rows ? static_cast<std::size_t>(b_rows[q]) : q) * b_stride;
  };
  typedef float Vector __attribute__((vector_size(64)));
  constexpr std::size_t kLanes = 16, kVectors = 4, kColumns = kLanes * kVectors;
  constexpr std::size_t kDepthPanel = 512;
  const std::size_t row_groups = rows / 4 * 4;
  std::size_t k = 0;
  for (; k + kColumns <= width; k += kColumns)
    for (std::size_t q0 = 0; q0 < depth; q0 += kDepthPanel) {
      const std::size_t q1 = q0 + kDepthPanel < depth ? q0 + kDepthPanel : depth;
      for (std::size_t r = 0; r < row_groups; r += 4) {
        Vector sum[4][kVectors] = {};
        if (q0 > 0)
          for (std::size_t i = 0; i < 4; ++i)
            std::memcpy(sum[i], c + (r + i) * width + k, sizeof sum[i]);
        for (std::size_t q = q0; q < q1; ++q) {
          Vector bq[kVectors];
          std::memcpy(bq, b_row(q) + k, sizeof bq);
          for (std::size_t i = 0; i < 4; ++i) {
            const float aiq = a[(r + i) * depth + q];
            for (std::size_t v = 0; v < kVectors; ++v) sum[i][v] += aiq * bq[v];
          }
        }
        for (std::size_t i = 0; i < 4; ++i)
          std::memcpy(c + (r + i) * width + k, sum[i], sizeof sum[i]);
      }
    }
  for (; k + kLanes <= width; k += kLanes)
    for (std::size_t q0 = 0; q0 < depth; q0 += kDepthPanel) {
      const std::size_t q1 = q0 + kDepthPanel < depth ? q0 + kDepthPanel : depth;
      for (std::size_t r = 0; r < row_groups; r += 4) {
        Vector sum[4] = {};
        if (q0 > 0)
          for (std::size_t i = 0; i < 4; ++i)
            std::memcpy(&sum[i], c + (r + i) * width + k, sizeof(Vector));
        for (std::size_t q = q0; q < q1; ++q) {
          Vector bq;
          std::memcpy(&bq, b_row(q) + k, sizeof bq);
          for (std::size_t i = 0; i < 4; ++i) sum[i] += a[(r + i) * depth + q] * bq;
        }
        for (std::size_t i = 0; i < 4; ++i)
          std::memcpy(c + (r + i) * width + k, &sum[i], sizeof(Vector));
      }
    }
  // The columns left on the row groups, then every column on the rows left.
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = r < row_groups ? k : 0; j < width; ++j) {
      float s = 0.0f;
      for (std::size_t q = 0; q < depth; ++q) s += a[r * depth + q] * b_row(q)[j];
      c[r * width + j] = s;
    }
}

// Inlined into the clones of the functions below (the same attributes, so GCC may).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define IFUSIM_VECTOR_INLINE [[gnu::always_inline, gnu::optimize("fp-contract=off")]] inline
#else
#define IFUSIM_VECTOR_INLINE inline
#endif

// Each element's sum over the depth in eight partial sums, lane l taking q = l, l + 8, ... (each
// product and sum rounded on its own), the lanes added in one fixed tree, then the depth's last
// (depth mod 8) products in order: the same bits for any instruction set (eight lanes whatever
// the register width: one AVX-512 register, two AVX2 ones, four SSE2 ones), tile or row. Tiles of
// 4 rows x 4 columns (16 accumulators) read each row of a and b once a tile.
namespace {
typedef double Lanes __attribute__((vector_size(64)));
constexpr std::size_t kDotLanes = 8;
IFUSIM_VECTOR_INLINE double finish_dot(const Lanes& sum, const double* __restrict a,
                                       const double* __restrict b, std::size_t q0,
                                       std::size_t depth) {
  double out = ((sum[0] + sum[1]) + (sum[2] + sum[3])) + ((sum[4] + sum[5]) + (sum[6] + sum[7]));
  for (std::size_t q = q0; q < depth; ++q) out += a[q] * b[q];
  return out;
}
}  // namespace

IFUSIM_VECTOR_CLONES void multiply_by_transpose(const double* __restrict a, std::size_t a_stride,
                                                std::size_t rows, std::size_t depth,
                                                const double* __restrict b, std::size_t b_stride,
                                                const std::int32_t* __restrict b_rows,
                                                std::size_t columns, double* __restrict c) {
  const std::size_t whole = depth / kDotLanes * kDotLanes;
  auto b_row = [&](std::size_t j) {
    return b + (b_rows ? static_cast<std::size_t>(b_rows[j]) : j) * b_stride;
  };
  const std::size_t row_groups = rows / 4 * 4, column_groups = columns / 4 * 4;
  for (std::size_t r = 0; r < row_groups; r += 4)
    for (std::size_t j = 0; j < column_groups; j += 4) {
      const double* ar[4] = {a + r * a_stride, a + (r + 1) * a_stride, a + (r + 2) * a_stride,
                             a + (r + 3) * a_stride};
      const double* bj[4] = {b_row(j), b_row(j + 1), b_row(j + 2), b_row(j + 3)};
      Lanes sum[4][4] = {};
      for (std::size_t q = 0; q < whole; q += kDotLanes) {
        Lanes av[4], bv[4];
        for (int i = 0; i < 4; ++i) {
          std::memcpy(&av[i], ar[i] + q, sizeof(Lanes));
          std::memcpy(&bv[i], bj[i] + q, sizeof(Lanes));
        }
        for (int i = 0; i < 4; ++i)
          for (int k = 0; k < 4; ++k) sum[i][k] += av[i] * bv[k];
      }
      for (int i = 0; i < 4; ++i)
        for (int k = 0; k < 4; ++k)
          c[(r + i) * columns + j + k] = finish_dot(sum[i][k], ar[i], bj[k], whole, depth);
    }
  // The columns left on the row groups, then every column on the rows left: one element at a
  // time, the same lanes.
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = r < row_groups ? column_groups : 0; j < columns; ++j) {
      const double* ar = a + r * a_stride;
      const double* bj = b_row(j);
      Lanes sum = {};
      for (std::size_t q = 0; q < whole; q += kDotLanes) {
        Lanes av, bv;
        std::memcpy(&av, ar + q, sizeof(Lanes));
        std::memcpy(&bv, bj + q, sizeof(Lanes));
        sum += av * bv;
      }
      c[r * columns + j] = finish_dot(sum, ar, bj, whole, depth);
    }
}

IFUSIM_VECTOR_CLONES void dots_with_row(const double* const* __restrict a_rows, std::size_t count,
                                        const double* __restrict b, std::size_t depth,
                                        double* __restrict out) {
  const std::size_t whole = depth / kDotLanes * kDotLanes;
  std::size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    Lanes sum[4] = {};
    for (std::size_t q = 0; q < whole; q += kDotLanes) {
      Lanes bv;
      std::memcpy(&bv, b + q, sizeof(Lanes));
      for (int k = 0; k < 4; ++k) {
        Lanes av;
        std::memcpy(&av, a_rows[i + k] + q, sizeof(Lanes));
        sum[k] += av * bv;
      }
    }
    for (int k = 0; k < 4; ++k) out[i + k] = finish_dot(sum[k], a_rows[i + k], b, whole, depth);
  }
  for (; i < count; ++i) {
    Lanes sum = {};
    for (std::size_t q = 0; q < whole; q += kDotLanes) {
      Lanes av, bv;
      std::memcpy(&av, a_rows[i] + q, sizeof(Lanes));
      std::memcpy(&bv, b + q, sizeof(Lanes));
      sum += av * bv;
    }
    out[i] = finish_dot(sum, a_rows[i], b, whole, depth);
  }
}

}  // namespace ifusim
