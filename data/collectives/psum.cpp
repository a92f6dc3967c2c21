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

template <typename T>
std::vector<T> reduce_to_host(const Mesh& mesh, ShardedArray<std::int64_t>& partial,
                              const FixedPointScale& scale) {
  psum(mesh, partial);
  const std::vector<std::int64_t> sums = partial.to_host();
  std::vector<T> out = large_vector<T>(sums.size());
  const double quantum = scale.quantum();
  for (std::size_t i = 0; i < sums.size(); ++i)
    out[i] = static_cast<T>(static_cast<double>(sums[i]) * quantum);
  return out;
}
template std::vector<double> reduce_to_host(const Mesh&, ShardedArray<std::int64_t>&,
                                            const FixedPointScale&);
template std::vector<float> reduce_to_host(const Mesh&, ShardedArray<std::int64_t>&,
                                           const FixedPointScale&);

Cube reduce_to_cube(const Mesh& mesh, PartialCube& partial, const std::string& unit) {
  Cube cube;
  cube.shape = partial.shape;
  cube.unit = unit;
  cube.data = reduce_to_host<float>(mesh, partial.sums, partial.scale);
  return cube;
}

#ifndef IFUSIM_HAVE_NCCL
void nccl_allreduce_sum(const Mesh&, const std::vector<const Device*>&,
                        const std::vector<std::int64_t*>&, std::size_t) {
  throw std::runtime_error("psum across several GPUs needs NCCL, which this build lacks");
}
#endif

}  // namespace ifusim
