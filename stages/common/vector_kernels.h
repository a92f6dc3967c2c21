#pragma once
// The innermost loops of the host-side cube passes (the binned product's blocks, the PSF's and
// LSF's convolutions): y[k] += a * x[k] and its kin, in double or float. The project builds for
// baseline x86-64 (SSE2: two doubles a vector register); these are compiled again for AVX2 and
// AVX-512 and the CPU's best is chosen when the program loads (GCC's target_clones). Contraction
// into fused multiply-adds is off in every clone, so each product and each sum is rounded on its
// own, as in the baseline: the same bits on any x86-64 CPU. Out of line on purpose: inlined into
// a loop over non-zeros, GCC's unroll-and-jam pairs the outer iterations and leaves the inner
// loop scalar.
#include <cstddef>
#include <cstdint>

// A host function compiled for x86-64-v4 (AVX-512), AVX2 and the baseline, the best chosen at load
// time, with contraction into fused multiply-adds off (the same bits in every clone). For loops
// that GCC vectorises; a function so marked must not be inline.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define IFUSIM_VECTOR_CLONES \
  [[gnu::target_clones("arch=x86-64-v4", "avx2", "default"), gnu::optimize("fp-contract=off")]]
#else
#define IFUSIM_VECTOR_CLONES
#endif

namespace ifusim {

// y[k] += a * x[k], k < n. y and x must not overlap.
void add_scaled(double* y, double a, const double* x, std::size_t n);
// y[k] += the sum over e < count of float(a[e]) * x[rows[e] * x_stride + k], in groups of
// kScaledRowsGroup consecutive e: each group's terms summed in float from +0 in order, each
// group's sum then added to y[k] in double, in order; each product and sum rounded on its own.
// Float products and sums run at twice double's rate (and need no widening of x), and the groups
// keep the float rounding to a few terms' worth, where one float sum over a row's hundreds of
// entries would carry it through them all. y's elements stay in registers over all the rows (a
// sparse block's row of the binned product, whose rows are its non-zeros' rows of B). y must not
// overlap a or x. Groups of 4: the gradient tests' finite differences (tests/test_stellar_vjp.cpp,
// test_vjp_entry.cpp), which the cube's rounding already limits, stay within their targets; with
// 8 (2026-11-27) the velocity's did not, and one float sum a row missed metallicity's by 10x. A
// dusty MaNGA-32 run's sparse sums took 1.5 s in double, 1.06 s in groups of 4, 0.87 s of 8.
inline constexpr std::size_t kScaledRowsGroup = 4;
void add_scaled_rows(double* y, std::size_t n, const double* a, const std::int32_t* rows,
                     std::size_t count, const float* x, std::size_t x_stride);
// out[q * n + g] = sum over t < n_planes of weights[q * n_planes + t] * planes[t * n + g] (the
// float planes widened), for q < n_out and g < n: in double, the sum from t = 0 in order, each
// product and sum rounded on its own (the binned product's dust segments mix a row's terms, held
// plane by plane in float, into fewer). out must overlap neither planes nor weights.
void mix_planes(double* out, std::size_t n, const float* planes, std::size_t n_planes,
                const double* weights, std::size_t n_out);
// The same sums, each rounded to float once, output q at out + q * out_stride (a dense block's
// rows mixed straight into the float planes its product reads). out must overlap neither.
void mix_planes_rounded(float* out, std::size_t out_stride, std::size_t n, const float* planes,
                        std::size_t n_planes, const double* weights, std::size_t n_out);
// out[k] = in[k] widened to double, or rounded to float, k < n (the convolutions' blocks of a
// float cube). out must not overlap in.
void widen(double* out, const float* in, std::size_t n);
void narrow(float* out, const double* in, std::size_t n);

// Rows of a convolution along the axis of a block (stages/common/convolution.cpp): the block holds
// n rows of `lanes` values, row j the lanes' sources at pixel j of the axis; lanes is a multiple
// of kAxisLanes and width <= lanes. For the kAxisRows targets k = k0 + r (r < kAxisRows) and the
// lanes l < width rounded up to kAxisLanes:
//   out[r * lanes + l] = sum over j ascending of w(k, u, l) * src[j * lanes + l],
// j from max(0, k0 - reach) to min(n - 1, k0 + kAxisRows - 1 + reach), u = j - k + reach +
// kAxisRows - 1: a tap of a table padded with kAxisRows - 1 zero taps at each end
// (axis_padded_taps), so that all kAxisRows targets take the same sources. Each sum starts from +0
// and each product and sum is rounded on its own: a zero weight adds a zero, which changes no sum
// (beyond the sign of a zero), so each target's sum is the one over its own taps alone, in the
// same order. The targets are summed together in vector registers, each source loaded once for
// all of them, where a target at a time reloaded and stored its sums for every tap (MUSE-WFM's
// PSF, 21 taps: 2.05 s -> 1.29 s; with convolution.cpp's bands and strides 0.80 s).
inline constexpr int kAxisRows = 4;
inline constexpr std::size_t kAxisLanes = 8;
inline constexpr std::size_t axis_padded_taps(int reach) {
  return 2 * static_cast<std::size_t>(reach) + 1 + 2 * (kAxisRows - 1);
}
// A convolution along a contiguous axis (a spectrum), kContiguousTargets targets at a time in
// vector registers: for k < n (a whole number of kContiguousTargets),
//   out[k] = sum over t ascending (t < taps) of weights[t * n + k] * src[k + t],
// src holding the axis's sources shifted by (taps - 1) / 2 (src[k + t] is source j = k + t -
// reach, zeros beyond the axis's ends; n + taps - 1 values). Each sum starts from +0, each product
// and sum rounded on its own (as convolve_rows_by_*). out must overlap neither src nor weights.
inline constexpr std::size_t kContiguousTargets = kAxisRows * kAxisLanes;
void convolve_contiguous(double* out, const double* src, std::size_t n, std::size_t taps,
                         const double* weights);
// The weight of each lane: w(k, u, l) = weights[u * lanes + l] (the same at every target).
void convolve_rows_by_lane(double* out, const double* src, std::size_t lanes, std::size_t width,
                           int n, int k0, int reach, const double* weights);
// The weight of each target: w(k, u, l) = weights[k * axis_padded_taps(reach) + u] (rows up to
// k0 + kAxisRows - 1, the ones past the axis all zero).
void convolve_rows_by_target(double* out, const double* src, std::size_t lanes, std::size_t width,
                             int n, int k0, int reach, const double* weights);

// c = a b in float: a is rows x depth, row-major and dense; b's rows are b + b_rows[q] b_stride
// (q where b_rows is null), each `width` long; c is rows x width, row-major. Each element of c is
// summed over the depth in order (q = 0, 1, ...), each product and sum rounded on its own: its
// bits do not depend on the instruction set, the rows or the width (the binned product's dense
// blocks, whose cube must be the same for any thread count, tile and chunk of bins). c must
// overlap neither a nor b.
void multiply_rows(const float* a, std::size_t rows, std::size_t depth, const float* b,
                   std::size_t b_stride, const std::int32_t* b_rows, std::size_t width, float* c);
// c = a b^T in double (the binned product's transpose, dL/dH = G B^T, in its dense blocks): a is
// rows x depth (row r at a + r a_stride), b's rows are b + b_rows[j] b_stride (j + 0, 1, ... where
// b_rows is null), each `depth` long; c is rows x columns, row-major. Each element is summed over
// the depth in eight lanes (q mod 8), added in a fixed tree, then the last depth mod 8 products
// in order: its bits depend neither on the instruction set nor on the rows or columns around it.
// c must overlap neither a nor b.
void multiply_by_transpose(const double* a, std::size_t a_stride, std::size_t rows,
                           std::size_t depth, const double* b, std::size_t b_stride,
                           const std::int32_t* b_rows, std::size_t columns, double* c);
// out[i] = the dot of a_rows[i][0, depth) with b[0, depth), i < count, each summed as
// multiply_by_transpose sums one element (a_rows[i] its row of a, b its row of b): bitwise that
// element. For the transpose's sparse blocks, whose entries are taken by their row of B (one
// row of B against the cotangent rows of the block's entries in its column, which stay in cache),
// four at a time (four chains of sums, b read once for them). out must overlap none of the rows.
void dots_with_row(const double* const* a_rows, std::size_t count, const double* b,
                   std::size_t depth, double* out);

}  // namespace ifusim
