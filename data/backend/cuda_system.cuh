#pragma once
// Thrust's CUDA system: the CUDA backend (see cpu_system.h). Each logical device has its own
// stream; every entry point finishes its work on that stream before returning.
#include <cuda_runtime.h>
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/transform_reduce.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "data/device.h"
#include "data/fixed_point.h"

#define IFUSIM_BACKEND_NS cuda

namespace ifusim::cuda {

inline cudaStream_t stream_of(const Device& device) {
  return static_cast<cudaStream_t>(device.stream);
}
inline auto policy(const Device& device) {
  return thrust::cuda::par_nosync.on(stream_of(device));
}
// The same, with Thrust's temporary storage taken from `temporaries` (algorithms.inl).
template <class Allocator>
auto policy(const Device& device, Allocator& temporaries) {
  return thrust::cuda::par_nosync(temporaries).on(stream_of(device));
}
// A kernel's launch errors Thrust reports itself (thrust::system_error); what the stream's work
// met is the synchronisation's result. Not cudaGetLastError, which can return an older error
// already handled elsewhere.
inline void finish(const Device& device) {
  const cudaError_t err = cudaStreamSynchronize(stream_of(device));
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("CUDA kernel failed on ") + device.description + ": " +
                             cudaGetErrorString(err));
}

// max over i in [0, n) of f(i), or `lowest` when n == 0; exact in any order.
template <class T, class F>
T transform_max(const Device& device, std::size_t n, F f, T lowest) {
  if (n == 0) return lowest;
  const T result = thrust::transform_reduce(
      policy(device), thrust::counting_iterator<std::size_t>(0),
      thrust::counting_iterator<std::size_t>(n), f, lowest, thrust::maximum<T>());
  finish(device);
  return result;
}

// The sum over i in [0, n) of f(i), for a T with an exact `+` (integers, or aggregates of them):
// the same value in any order.
template <class T, class F>
T transform_sum(const Device& device, std::size_t n, F f, T zero) {
  if (n == 0) return zero;
  const T result = thrust::transform_reduce(
      policy(device), thrust::counting_iterator<std::size_t>(0),
      thrust::counting_iterator<std::size_t>(n), f, zero, thrust::plus<T>());
  finish(device);
  return result;
}

}  // namespace ifusim::cuda

#include "data/backend/algorithms.inl"

namespace ifusim::cuda {

// The items that add into rows of one array (cpu_system.h's scatter_by_rows): on a GPU every
// thread adds atomically into any row (ScatterRows::owned false), so f(i, rows) is called for
// every item with all the rows; the items' spans and `shared` are not needed.
template <class F>
struct ScatterAll {
  F f;
  ScatterRows rows;
  IFUSIM_HD void operator()(std::size_t i) const { f(i, rows); }
};

template <class Span, class F>
void scatter_by_rows(const Device& device, std::size_t n_items, std::int32_t first_row,
                     std::int32_t n_rows, bool, Span, F f) {
  parallel_for(device, n_items,
               ScatterAll<F>{f, ScatterRows{first_row, first_row + n_rows, false}});
}

}  // namespace ifusim::cuda
