#pragma once
// Exact reductions over sharded fields. Stages use them to choose fixed-point scales
// (data/fixed_point.h) that do not depend on how the particles are split: a maximum is exact
// in any order.
#include <cstdint>
#include <vector>

#include "data/buffer.h"
#include "data/collectives/processes.h"
#include "data/dispatch.h"
#include "data/galaxy_data.h"
#include "data/keyed_sums.h"
#include "data/sharded_array.h"

namespace ifusim {

// max |x| over every device's shard of one component of `field` (0 for an empty field).
float global_max_abs(const Mesh& mesh, const ShardedArray<float>& field, int component = 0);

// Over the processes of a run that spans them (Mesh::spans_processes), else `value` itself: the
// largest, and the sum, of every process's value.
double max_over_processes(const Mesh& mesh, double value);
std::int64_t sum_over_processes(const Mesh& mesh, std::int64_t value);
void sum_over_processes(const Mesh& mesh, std::vector<std::int64_t>& values);  // in place
StarBounds merge_over_processes(const Mesh& mesh, const StarBounds& bounds);

// What every process of a run that spans them found, on every process, folded in rank order:
// merge(merge(merge({}, rank 0's), rank 1's), ...). `mine` itself where the run is one process.
// The stages' passes gather this way (the dust deposits, the stars' positions for kNN, the
// sparse histogram's entries), so that every process ends with the same, split-independent set.
template <class T, class Merge>
std::vector<T> merge_over_processes(const Mesh& mesh, std::vector<T> mine, Merge merge) {
  if (!mesh.spans_processes()) return mine;
  std::vector<T> merged;
  for (std::vector<T>& theirs : processes::allgather_values(mine))
    merged = merge(std::move(merged), std::move(theirs));
  return merged;
}

// The same, the processes' values one after another in rank order.
template <class T>
std::vector<T> concatenate_over_processes(const Mesh& mesh, std::vector<T> mine) {
  return merge_over_processes(mesh, std::move(mine), [](std::vector<T> all, std::vector<T> theirs) {
    all.insert(all.end(), theirs.begin(), theirs.end());
    return all;
  });
}

// The bounds of the stars held (data/galaxy_data.h).
StarBounds measure_star_bounds(const Mesh& mesh, const Stars& stars);

}  // namespace ifusim

IFUSIM_DECLARE_BACKENDS(
    float max_abs_value(const Device& device, Span<const float> values);
    // The values of equal keys summed, the pairs consumed (algorithms.inl's sort_reduce_by_key,
    // which the sparse histogram uses): sorted unique keys and their sums.
    KeyedSums sum_by_key(const Device& device, DeviceBuffer<std::uint64_t> keys,
                         DeviceBuffer<std::int64_t> values);)
