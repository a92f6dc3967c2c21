#pragma once
// The particle adjoints' per-particle sums on GPUs (issue 27, docs/gradients.md): a cpu device
// adds its particles' gradients straight into the host arrays; a GPU makes them in a sharded
// array of its own, one component plane per quantity, which is then added here.
#include <cstddef>
#include <vector>

#include "data/host_memory.h"
#include "data/sharded_array.h"

namespace ifusim {

// Where component c of the sums goes: to[(first + i) * stride] += plane[i] for a shard's particle
// i (first: the shard's first particle); nullptr: the plane is not used.
struct GradientPlane {
  double* to = nullptr;
  std::size_t stride = 1;
};

// Adds the sums of every cuda device's shard of `sums` into the host arrays, a plane at a time,
// each particle's value on its own (in parallel: 1e8 stars' five planes took 1.4 s on one
// thread).
inline void add_device_sums(const ShardedArray<double>& sums,
                            const std::vector<GradientPlane>& planes) {
  std::vector<double> plane;
  for (const auto& shard : sums.shards()) {
    if (!shard.device->is_cuda()) continue;
    const std::size_t first = shard.range.begin, count = shard.range.size();
    if (plane.size() < count) plane = large_vector<double>(count);
    for (std::size_t c = 0; c < planes.size(); ++c) {
      if (!planes[c].to) continue;
      shard.buffer.download(plane.data(), count, c * count);
      double* to = planes[c].to + first * planes[c].stride;
      const std::size_t stride = planes[c].stride;
      const double* from = plane.data();
#pragma omp parallel for schedule(static)
      for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(count); ++i)
        to[static_cast<std::size_t>(i) * stride] += from[i];
    }
  }
}

}  // namespace ifusim
