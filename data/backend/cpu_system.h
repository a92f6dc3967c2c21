#pragma once
// Thrust's OpenMP system: the CPU backend. A stage's kernels (.inl) are included after this
// header in its *_cpu.cpp translation unit and after cuda_system.cuh in its *_cuda.cu one, so
// the same functors compile for both systems. Only backend translation units include this.
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/omp/execution_policy.h>
#include <thrust/transform_reduce.h>

#include "data/device.h"

#define IFUSIM_BACKEND_NS cpu

namespace ifusim::cpu {

// The OpenMP team size is this device's share, set on the calling thread by shard_map.
inline auto policy(const Device&) {
  return thrust::omp::par;
}
inline void finish(const Device&) {}

}  // namespace ifusim::cpu

#include "data/backend/algorithms.inl"
