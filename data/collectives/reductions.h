#pragma once
// Exact reductions over sharded fields. Stages use them to choose fixed-point scales
// (data/fixed_point.h) that do not depend on how the particles are split: a maximum is exact
// in any order.
#include <cstdint>
#include <vector>

#include "data/buffer.h"
#include "data/dispatch.h"
#include "data/galaxy_data.h"
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

// The bounds of the stars held (data/galaxy_data.h).
StarBounds measure_star_bounds(const Mesh& mesh, const Stars& stars);

}  // namespace ifusim

IFUSIM_DECLARE_BACKENDS(float max_abs_value(const Device& device, Span<const float> values);)
