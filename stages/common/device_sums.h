#pragma once
// The particle adjoints' per-particle sums on GPUs (issue 27, docs/gradients.md): a cpu device
// adds its particles' gradients straight into the host arrays; a GPU makes them in a sharded
// array of its own, one component plane per quantity, which is then added here.
#include <cstddef>
#include <vector>

#include "data/sharded_array.h"

namespace ifusim {

// Where component c of the sums goes: to[(first + i) * stride] += plane[i] for a shard's particle
// i (first: the shard's first particle); nullptr: the plane is not used.
struct GradientPlane {
  double* to = nullptr;
  std::size_t stride = 1;
};

// Adds the sums of every cuda device's shard of `sums` into the host arrays, a plane at a time.
inline void add_device_sums(const ShardedArray<double>& sums,
                            const std::vector<GradientPlane>& planes) {
  std::vector<double> plane;
  for (const auto& shard : sums.shards()) {
    if (!shard.device->is_cuda()) continue;
    const std::size_t first = shard.range.begin, count = shard.range.size();
    plane.resize(count);
    for (std::size_t c = 0; c < planes.size(); ++c) {
      if (!planes[c].to) continue;
      shard.buffer.download(plane.data(), count, c * count);
      for (std::size_t i = 0; i < count; ++i)
        planes[c].to[(first + i) * planes[c].stride] += plane[i];
    }
  }
}

}  // namespace ifusim
