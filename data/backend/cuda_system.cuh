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

}  // namespace ifusim::cuda

#include "data/backend/algorithms.inl"
