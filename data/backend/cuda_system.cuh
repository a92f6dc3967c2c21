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

#include <stdexcept>
#include <string>

#include "data/device.h"

#define IFUSIM_BACKEND_NS cuda

namespace ifusim::cuda {

inline cudaStream_t stream_of(const Device& device) {
  return static_cast<cudaStream_t>(device.stream);
}
inline auto policy(const Device& device) {
  return thrust::cuda::par_nosync.on(stream_of(device));
}
inline void finish(const Device& device) {
  cudaError_t err = cudaStreamSynchronize(stream_of(device));
  if (err == cudaSuccess) err = cudaGetLastError();
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

}  // namespace ifusim::cuda

#include "data/backend/algorithms.inl"
