#pragma once
// psum: sums a Partial(particles) array over the mesh (jax.lax.psum). The elements are 64-bit
// fixed-point integers (data/fixed_point.h), so the sum is exact and the result bitwise identical
// for any number of devices.
#include <cstdint>
#include <vector>

#include "data/buffer.h"
#include "data/datacube.h"
#include "data/sharded_array.h"

namespace ifusim {

// Devices sharing a memory space already hold one buffer between them (ShardedArray allocates a
// partial array once per space and they add into it with integer atomics), so the only
// reduction left is across GPUs: the spaces' buffers are all-reduced with NCCL (and, where the
// mesh spans processes, over them with MPI). Afterwards every memory space holds the total and
// the array is Replicated.
void psum(const Mesh& mesh, ShardedArray<std::int64_t>& partial);

// psum, then the one conversion of the fixed-point total to floating point, on the host: each
// value's exact total in double, rounded once to T (float for the cube, data/datacube.h).
Cube reduce_to_cube(const Mesh& mesh, PartialCube& partial, const std::string& unit);
template <typename T = double>
std::vector<T> reduce_to_host(const Mesh& mesh, ShardedArray<std::int64_t>& partial,
                              const FixedPointScale& scale);

// Internal: all-reduce (sum) of int64 buffers, one per GPU, through NCCL; the communicators are
// created on the first call and kept in mesh.collective_state.
void nccl_allreduce_sum(const Mesh& mesh, const std::vector<const Device*>& devices,
                        const std::vector<std::int64_t*>& buffers, std::size_t count);

}  // namespace ifusim
