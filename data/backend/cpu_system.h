#pragma once
// Thrust's OpenMP system: the CPU backend. A stage's kernels (.inl) are included after this
// header in its *_cpu.cpp translation unit and after cuda_system.cuh in its *_cuda.cu one, so
// the same functors compile for both systems. Only backend translation units include this.
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/omp/execution_policy.h>

#include <cstddef>

#include "data/device.h"

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

}  // namespace ifusim::cpu

#include "data/backend/algorithms.inl"
