#pragma once
// psum: sums a Partial(particles) array over the mesh and leaves every device the same total
// (jax.lax.psum). The elements are 64-bit fixed-point integers (data/fixed_point.h), so the sum
// is exact and the result bitwise identical for any number of devices.
#include <cstdint>

#include "data/buffer.h"
#include "data/datacube.h"
#include "data/sharded_array.h"
#include "stages/dispatch.h"

namespace ifusim {

// Devices sharing memory (one GPU's logical devices, or all host devices) first reduce among
// themselves, each adding up its own slice of the elements from every member (a reduce-scatter
// into the group's first device); the groups' first devices then all-reduce with NCCL when
// there are several GPUs; every device finally copies the total.
void psum(const Mesh& mesh, ShardedArray<std::int64_t>& partial);

// psum, then the one conversion of the fixed-point total to floating point, on the host.
Cube reduce_to_cube(const Mesh& mesh, PartialCube& partial, const std::string& unit);

// Internal: all-reduce (sum) of int64 buffers, one per GPU, through NCCL.
void nccl_allreduce_sum(const std::vector<const Device*>& devices,
                        const std::vector<std::int64_t*>& buffers, std::size_t count);

}  // namespace ifusim

IFUSIM_DECLARE_BACKENDS(void add_into(const Device& device, Span<std::int64_t> target,
                                      Span<const std::int64_t> addend);)
