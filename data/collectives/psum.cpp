#include "data/collectives/psum.h"

#include <stdexcept>

#include "data/collectives/processes.h"
#include "data/host_memory.h"

namespace ifusim {

void psum(const Mesh& mesh, ShardedArray<std::int64_t>& partial) {
  if (partial.sharding().kind() != Sharding::Kind::partial)
    throw std::logic_error("psum of an array that is not Partial(particles)");
  const std::size_t n = partial.rows() * static_cast<std::size_t>(partial.components());
  const std::vector<const Device*> owners = mesh.memory_owners();
  if (owners.size() > 1 && n > 0) {
    std::vector<std::int64_t*> buffers;
    for (const Device* d : owners) buffers.push_back(partial.buffer_of(*d).data());
    nccl_allreduce_sum(mesh, owners, buffers, n);
  }
  if (mesh.spans_processes() && n > 0) {
    // Then over the processes, through the host (pinned where the devices are GPUs): every
    // memory space gets the total.
    const HostStaging<std::int64_t> host(*owners.front(), n);
    partial.buffer_of(*owners.front()).download(host.data(), n);
    processes::allreduce_sum(host.data(), n);
    for (const Device* d : owners) partial.buffer_of(*d).upload(host.data(), n);
  }
  partial.mark_replicated();
}

std::vector<double> reduce_to_host(const Mesh& mesh, ShardedArray<std::int64_t>& partial,
                                   const FixedPointScale& scale) {
  psum(mesh, partial);
  const std::vector<std::int64_t> sums = partial.to_host();
  std::vector<double> out = large_vector<double>(sums.size());
  const double quantum = scale.quantum();
  for (std::size_t i = 0; i < sums.size(); ++i) out[i] = static_cast<double>(sums[i]) * quantum;
  return out;
}

Cube reduce_to_cube(const Mesh& mesh, PartialCube& partial, const std::string& unit) {
  Cube cube;
  cube.shape = partial.shape;
  cube.unit = unit;
  // Each voxel's exact total in double, rounded once to the cube's float.
  psum(mesh, partial.sums);
  const std::vector<std::int64_t> sums = partial.sums.to_host();
  cube.data = large_vector<float>(sums.size());
  const double quantum = partial.scale.quantum();
  for (std::size_t i = 0; i < sums.size(); ++i)
    cube.data[i] = static_cast<float>(static_cast<double>(sums[i]) * quantum);
  return cube;
}

#ifndef IFUSIM_HAVE_NCCL
void nccl_allreduce_sum(const Mesh&, const std::vector<const Device*>&,
                        const std::vector<std::int64_t*>&, std::size_t) {
  throw std::runtime_error("psum across several GPUs needs NCCL, which this build lacks");
}
#endif

}  // namespace ifusim
