#include "io/star_stream.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "data/collectives/reductions.h"

namespace ifusim {

StarBounds StarStream::read_bounds(const Mesh& mesh, std::size_t block_rows) const {
  StarBounds bounds;
  for_each_own_block(mesh, block_rows, [&](std::size_t first, std::size_t n) {
    bounds.merge(measure_star_bounds(mesh, read(mesh, first, n)));
  });
  return merge_over_processes(mesh, bounds);
}

Stars StarStream::empty_block(const Mesh& mesh) const {
  const std::set<std::string> optional = optional_star_fields();
  Stars stars;
  Stars::for_each_field(stars, [&](const FieldSpec& spec, auto& field) {
    // Derived fields come from the stages; of the input's, the smoothing length is optional.
    const std::string name = spec.name;
    if (spec.derived() || (name == "smoothing_length_kpc" && !optional.count(name))) return;
    field = std::decay_t<decltype(field)>(mesh, 0, spec.components, Sharding::sharded());
  });
  return stars;
}

}  // namespace ifusim
