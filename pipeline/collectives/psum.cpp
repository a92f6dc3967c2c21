#include "pipeline/collectives/psum.h"

#include <map>
#include <stdexcept>

namespace ifusim {

void psum(const Mesh& mesh, ShardedArray<std::int64_t>& partial) {
  if (partial.sharding().kind() != Sharding::Kind::partial)
    throw std::logic_error("psum of an array that is not Partial(particles)");
  const std::size_t n = partial.rows() * static_cast<std::size_t>(partial.components());

  // Groups of devices that share memory: one GPU's logical devices, or all host devices.
  std::map<int, std::vector<const Device*>> groups;
  for (std::size_t d = 0; d < mesh.size(); ++d)
    groups[mesh.device(d).is_cuda() ? mesh.device(d).gpu_ordinal : -1].push_back(&mesh.device(d));

  auto buffer = [&](const Device* d) { return partial.shard(*d).buffer.data(); };
  std::vector<int> slot(mesh.size(), 0);  // a device's position within its group
  for (const auto& [key, members] : groups)
    for (std::size_t m = 0; m < members.size(); ++m) slot[members[m]->id] = static_cast<int>(m);

  // 1. Reduce-scatter within each group into its first device: member m sums slice m.
  shard_map(mesh, [&](const Device& device) {
    const auto& members = groups.at(device.is_cuda() ? device.gpu_ordinal : -1);
    const IndexRange slice = split_evenly(n, members.size())[slot[device.id]];
    if (slice.empty()) return;
    Span<std::int64_t> target{buffer(members[0]) + slice.begin, slice.size()};
    for (std::size_t j = 1; j < members.size(); ++j)
      IFUSIM_DISPATCH(device, add_into, device, target,
                      Span<const std::int64_t>{buffer(members[j]) + slice.begin, slice.size()});
  });

  // 2. All-reduce across GPUs.
  if (groups.size() > 1) {
    std::vector<const Device*> leaders;
    std::vector<std::int64_t*> leader_buffers;
    for (const auto& [key, members] : groups) {
      leaders.push_back(members[0]);
      leader_buffers.push_back(buffer(members[0]));
    }
    nccl_allreduce_sum(leaders, leader_buffers, n);
  }

  // 3. Every other device copies its group's total.
  shard_map(mesh, [&](const Device& device) {
    const Device* leader = groups.at(device.is_cuda() ? device.gpu_ordinal : -1)[0];
    if (leader != &device && n > 0)
      memory::copy_on_device(device, buffer(&device), buffer(leader), n * sizeof(std::int64_t));
  });
  partial.mark_replicated();
}

Cube reduce_to_cube(const Mesh& mesh, PartialCube& partial, const std::string& unit) {
  psum(mesh, partial.sums);
  const std::vector<std::int64_t> sums = partial.sums.to_host();
  Cube cube;
  cube.shape = partial.shape;
  cube.unit = unit;
  cube.data.resize(sums.size());
  const double quantum = partial.scale.quantum();
  for (std::size_t i = 0; i < sums.size(); ++i)
    cube.data[i] = static_cast<double>(sums[i]) * quantum;
  return cube;
}

#ifndef IFUSIM_HAVE_NCCL
void nccl_allreduce_sum(const std::vector<const Device*>&, const std::vector<std::int64_t*>&,
                        std::size_t) {
  throw std::runtime_error("psum across several GPUs needs NCCL, which this build lacks");
}
#endif

}  // namespace ifusim
