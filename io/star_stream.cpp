#include "io/star_stream.h"

#include <algorithm>

#include "data/collectives/reductions.h"

namespace ifusim {

StarBounds StarStream::read_bounds(const Mesh& mesh, std::size_t block_rows) const {
  StarBounds bounds;
  for (std::size_t first = 0; first < n_rows(); first += block_rows)
    bounds.merge(
        measure_star_bounds(mesh, read(mesh, first, std::min(block_rows, n_rows() - first))));
  return bounds;
}

}  // namespace ifusim
