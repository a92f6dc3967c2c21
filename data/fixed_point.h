#pragma once
// Reproducible accumulation: every contribution is rounded once to a 64-bit fixed-point integer
// and all sums (atomics inside a device, psum across devices) are integer sums, which are
// associative and exact. The reduced cube is therefore bitwise identical whatever the number
// of devices, the split of particles or the order in which threads add.
//
// Precision: the scale is a power of two chosen from an upper bound B on the magnitude of any
// element's total (bound * scale <= 2^62, so no sum can overflow). One quantum is
// 1 / scale <= B * 2^-61; each contribution is off by at most half a quantum, so an element
// made of k contributions is within k / 2 quanta of the exact sum. With B = N * (largest
// contribution), an element's relative error is at most about N * 2^-62 times the ratio of the
// largest to the typical contribution: ~2e-10 of it at N = 1e9, far below float32 rounding.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "data/hd.h"

#if !defined(__CUDA_ARCH__) && defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace ifusim {

struct FixedPointScale {
  double counts_per_unit = 1.0;  // a power of two

  // The scale for sums bounded in magnitude by `bound`; `what` names the sums and the fields the
  // bound comes from. A zero bound (nothing to add) gives scale 1. A NaN, negative or infinite
  // bound cannot give a scale (it comes from a non-finite input value): an error, naming them.
  static FixedPointScale for_bound(double bound, std::string_view what) {
    if (!(bound >= 0.0) || !std::isfinite(bound))
      throw std::invalid_argument(std::string(what) + ": no fixed-point scale for a bound of " +
                                  std::to_string(bound) +
                                  " on its sums (expected finite and >= 0: is an input value "
                                  "NaN or infinite?)");
    if (bound == 0.0) return {1.0};
    int exponent = 0;
    std::frexp(bound, &exponent);  // bound < 2^exponent
    return {std::ldexp(1.0, 62 - exponent)};
  }
  double quantum() const { return 1.0 / counts_per_unit; }
  bool operator==(const FixedPointScale&) const = default;
};

IFUSIM_HD inline std::int64_t to_fixed(double value, double counts_per_unit) {
#if defined(__CUDA_ARCH__)
  return __double2ll_rn(value * counts_per_unit);
#elif defined(__x86_64__)
  // cvtsd2si: what glibc's llrint does on x86-64 (the current rounding mode, to nearest even by
  // default; 2^63 out of range), inline. GCC keeps std::llrint a library call unless math errno is
  // off, and the deposits make a billion of them in a smoothed run.
  return _mm_cvtsd_si64(_mm_set_sd(value * counts_per_unit));
#else
  return std::llrint(value * counts_per_unit);
#endif
}

// Integer atomics: two's complement addition is associative, so the order is irrelevant.
IFUSIM_HD inline void atomic_add_fixed(std::int64_t* target, std::int64_t value) {
#if defined(__CUDA_ARCH__)
  atomicAdd(reinterpret_cast<unsigned long long*>(target), static_cast<unsigned long long>(value));
#else
  __atomic_fetch_add(target, value, __ATOMIC_RELAXED);
#endif
}

// The rows [first, end) of an array of fixed-point sums that one task of a scatter adds into
// (scatter_by_rows, data/backend), and how it adds: on the host's threads each task owns its rows
// and adds plainly (a locked add costs ~5 times a plain one where the rows are in cache:
// docs/benchmarks.md), on a GPU every thread may add into any row, atomically. The sums are the
// same either way: integer additions in any order.
// On the host the items are taken kScatterChunk at a time, with about kScatterItemBytes of lists
// each (their rows, their keys, their two orders, and a place in each band's list, most meeting
// one or two bands).
inline constexpr std::size_t kScatterChunk = std::size_t(1) << 22;
inline constexpr std::size_t kScatterItemBytes = 28;

struct ScatterRows {
  std::int32_t first = 0, end = 0;
  bool owned = false;
  IFUSIM_HD void add(std::int64_t* target, std::int64_t value) const {
    if (owned)
      *target += value;
    else
      atomic_add_fixed(target, value);
  }
};

}  // namespace ifusim
