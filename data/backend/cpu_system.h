#pragma once
// Thrust's OpenMP system: the CPU backend. A stage's kernels (.inl) are included after this
// header in its *_cpu.cpp translation unit and after cuda_system.cuh in its *_cuda.cu one, so
// the same functors compile for both systems. Only backend translation units include this.
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/omp/execution_policy.h>

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/device.h"
#include "data/fixed_point.h"

#define IFUSIM_BACKEND_NS cpu

namespace ifusim::cpu {

// The OpenMP team size is this device's share, set on the calling thread by shard_map.
inline auto policy(const Device&) {
  return thrust::omp::par;
}
// The same, with Thrust's temporary storage taken from `temporaries` (algorithms.inl).
template <class Allocator>
auto policy(const Device&, Allocator& temporaries) {
  return thrust::omp::par(temporaries);
}
inline void finish(const Device&) {}

// max over i in [0, n) of f(i), or `lowest` when n == 0; exact in any order. An OpenMP
// reduction rather than thrust::transform_reduce: Thrust's OpenMP reduce writes its result
// through a reference bound to a null system pointer (tag dispatch in thrust/detail/reference.h),
// which UBSan rightly reports as undefined behaviour.
template <class T, class F>
T transform_max(const Device&, std::size_t n, F f, T lowest) {
  T result = lowest;
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for reduction(max : result)
  for (std::ptrdiff_t i = 0; i < count; ++i) {
    const T v = f(static_cast<std::size_t>(i));
    result = v > result ? v : result;
  }
  return result;
}

// The sum over i in [0, n) of f(i), for a T with an exact `+` (integers, or aggregates of them):
// the same value in any order. Per-thread partial sums, then added one thread at a time (no
// Thrust reduce, for the reason above).
template <class T, class F>
T transform_sum(const Device&, std::size_t n, F f, T zero) {
  T result = zero;
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel
  {
    T local = zero;
#pragma omp for nowait
    for (std::ptrdiff_t i = 0; i < count; ++i) local = local + f(static_cast<std::size_t>(i));
#pragma omp critical(ifusim_transform_sum)
    result = result + local;
  }
  return result;
}

// The items that add into rows of one array, without atomic adds (ScatterRows, data/fixed_point.h):
// the rows [first_row, first_row + n_rows) split into one band per thread of about equal numbers
// of items, f(i, rows) called for every item i whose rows meet a band, on that band's thread, with
// the band's rows (f adds into those alone), the items in the order of their first row, so that
// consecutive ones add into nearby memory. span(i, first, last): item i adds only into rows
// [first, last] (none where first > last; rows outside [first_row, first_row + n_rows) are
// ignored). `shared`: other devices add into the same array at the same time (the CPU devices'
// partial arrays are one a memory space), so the adds stay atomic and the bands only order the
// items. Items are taken kScatterChunk at a time, which bounds the lists' memory. A span that
// also has `n_keys` and `key(i)` (below n_keys) orders the items of one first row by key: items
// that add into the same places of their rows (the stars of one velocity node) come together.
template <class Span, class F>
void scatter_by_rows(const Device&, std::size_t n_items, std::int32_t first_row,
                     std::int32_t n_rows, bool shared, Span span, F f) {
  if (n_items == 0 || n_rows <= 0) return;
  const auto rows = static_cast<std::size_t>(n_rows);
  const std::size_t n_bands =
      std::min<std::size_t>(static_cast<std::size_t>(omp_get_max_threads()), rows);
  std::vector<std::int32_t> lo, hi;
  std::vector<std::uint32_t> order, count(rows + 1), band_end(n_bands), list_start(n_bands + 1),
      list, key, key_count, by_key;
  for (std::size_t chunk = 0; chunk < n_items; chunk += kScatterChunk) {
    const std::size_t n = std::min(kScatterChunk, n_items - chunk);
    // Each item's rows in the tile, relative to first_row.
    lo.assign(n, 0);
    hi.assign(n, -1);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t k = 0; k < static_cast<std::ptrdiff_t>(n); ++k) {
      std::int32_t a = 1, b = 0;
      span(chunk + static_cast<std::size_t>(k), a, b);
      a = std::max(a, first_row) - first_row;
      b = std::min(b, first_row + n_rows - 1) - first_row;
      if (a <= b) lo[k] = a, hi[k] = b;
    }
    // The items by key where the span gives keys (a counting sort), then by first row (a stable
    // counting sort), the empty ones left out.
    if constexpr (requires { span.n_keys; }) {
      key.resize(n);
      by_key.resize(n);
      key_count.assign(span.n_keys + 1, 0u);
#pragma omp parallel for schedule(static)
      for (std::ptrdiff_t k = 0; k < static_cast<std::ptrdiff_t>(n); ++k)
        key[k] = span.key(chunk + static_cast<std::size_t>(k));
      for (std::size_t k = 0; k < n; ++k) ++key_count[key[k] + 1];
      for (std::size_t q = 0; q < span.n_keys; ++q) key_count[q + 1] += key_count[q];
      for (std::size_t k = 0; k < n; ++k)
        by_key[key_count[key[k]]++] = static_cast<std::uint32_t>(k);
    }
    auto item = [&](std::size_t j) {
      return by_key.empty() ? static_cast<std::uint32_t>(j) : by_key[j];
    };
    std::fill(count.begin(), count.end(), 0u);
    for (std::size_t k = 0; k < n; ++k)
      if (lo[k] <= hi[k]) ++count[static_cast<std::size_t>(lo[k]) + 1];
    for (std::size_t r = 0; r < rows; ++r) count[r + 1] += count[r];
    const std::size_t placed = count[rows];
    order.resize(placed);
    for (std::size_t j = 0; j < n; ++j) {
      const std::uint32_t k = item(j);
      if (lo[k] <= hi[k]) order[count[static_cast<std::size_t>(lo[k])]++] = k;
    }
    // count[r] is now the number of items whose first row is <= r: each band ends (exclusive) at
    // the first row where that reaches its share, every band at least one row.
    std::size_t end = 0;
    for (std::size_t b = 0; b < n_bands; ++b) {
      const std::size_t share = placed * (b + 1) / n_bands;
      std::size_t e = end + 1;
      while (e < rows - (n_bands - 1 - b) && count[e - 1] < share) ++e;
      end = b + 1 == n_bands ? rows : e;
      band_end[b] = static_cast<std::uint32_t>(end);
    }
    auto band_of = [&](std::int32_t row) {
      return static_cast<std::size_t>(
          std::upper_bound(band_end.begin(), band_end.end(), static_cast<std::uint32_t>(row)) -
          band_end.begin());
    };
    // Each band's items, in that order: an item once for every band it meets.
    std::fill(list_start.begin(), list_start.end(), 0u);
    for (const std::uint32_t k : order)
      for (std::size_t b = band_of(lo[k]), e = band_of(hi[k]); b <= e; ++b) ++list_start[b + 1];
    for (std::size_t b = 0; b < n_bands; ++b) list_start[b + 1] += list_start[b];
    list.resize(list_start[n_bands]);
    std::vector<std::uint32_t> at(list_start.begin(), list_start.end() - 1);
    for (const std::uint32_t k : order)
      for (std::size_t b = band_of(lo[k]), e = band_of(hi[k]); b <= e; ++b) list[at[b]++] = k;
#pragma omp parallel for schedule(dynamic, 1)
    for (std::ptrdiff_t b = 0; b < static_cast<std::ptrdiff_t>(n_bands); ++b) {
      const ScatterRows band{
          first_row +
              static_cast<std::int32_t>(b == 0 ? 0 : band_end[static_cast<std::size_t>(b) - 1]),
          first_row + static_cast<std::int32_t>(band_end[static_cast<std::size_t>(b)]), !shared};
      for (std::uint32_t j = list_start[static_cast<std::size_t>(b)];
           j < list_start[static_cast<std::size_t>(b) + 1]; ++j)
        f(chunk + list[j], band);
    }
  }
}

}  // namespace ifusim::cpu

#include "data/backend/algorithms.inl"
