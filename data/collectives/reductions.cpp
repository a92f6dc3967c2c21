#include "data/collectives/reductions.h"

#include <algorithm>

#include "data/collectives/processes.h"

namespace ifusim {

double max_over_processes(const Mesh& mesh, double value) {
  if (!mesh.spans_processes()) return value;
  for (const std::vector<double>& theirs : processes::allgather_values(std::vector<double>{value}))
    value = std::max(value, theirs.at(0));
  return value;
}

std::int64_t sum_over_processes(const Mesh& mesh, std::int64_t value) {
  if (mesh.spans_processes()) processes::allreduce_sum(&value, 1);
  return value;
}

void sum_over_processes(const Mesh& mesh, std::vector<std::int64_t>& values) {
  if (mesh.spans_processes()) processes::allreduce_sum(values.data(), values.size());
}

StarBounds merge_over_processes(const Mesh& mesh, const StarBounds& bounds) {
  if (!mesh.spans_processes()) return bounds;
  StarBounds all;
  for (const auto& theirs : processes::allgather_values(std::vector<StarBounds>{bounds}))
    all.merge(theirs.at(0));
  return all;
}

float global_max_abs(const Mesh& mesh, const ShardedArray<float>& field, int component) {
  if (field.empty()) return 0.0f;
  std::vector<float> per_device(mesh.size(), 0.0f);
  shard_map(mesh, [&](const Device& d) {
    per_device[d.id] = IFUSIM_DISPATCH(d, max_abs_value, d, field.local(d, component));
  });
  return *std::max_element(per_device.begin(), per_device.end());
}

}  // namespace ifusim

namespace ifusim {

StarBounds measure_star_bounds(const Mesh& mesh, const Stars& stars) {
  StarBounds b;
  b.count = stars.count();
  b.max_initial_mass_msun = global_max_abs(mesh, stars.initial_mass_msun);
  b.max_mass_msun = global_max_abs(mesh, stars.mass_msun);
  for (int c = 0; c < 3; ++c)
    b.max_abs_velocity_kms[c] = global_max_abs(mesh, stars.velocity_kms, c);
  return b;
}

}  // namespace ifusim
