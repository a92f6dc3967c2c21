#pragma once
// A galaxy whose stars are read block by block and never held all at once (a streamed run,
// input.stream_block_stars, docs/streaming.md). Rows are the source's: a block of rows may hold
// fewer stars (a TNG snapshot's wind cells are dropped), never more.
#include <algorithm>
#include <cstddef>
#include <set>
#include <string>

#include "data/galaxy_data.h"
#include "data/mesh.h"

namespace ifusim {

class StarStream {
 public:
  virtual ~StarStream() = default;
  virtual std::size_t n_rows() const = 0;
  // The galaxy record, with its stellar half-mass radius, and the bounds of its stars
  // (GalaxyData::star_bounds); no particles. One pass over all the rows, block_rows at a time.
  virtual GalaxyData first_pass(const Mesh& mesh, std::size_t block_rows) const = 0;
  // The stars of rows [first_row, first_row + n_rows), sharded over the mesh: each device reads
  // (or makes) its share. Bitwise the rows of the galaxy read at once.
  virtual Stars read(const Mesh& mesh, std::size_t first_row, std::size_t n_rows) const = 0;
  // All the galaxy's gas, sharded over the mesh, in the frame of the stars' blocks (after
  // first_pass), bitwise the gas of the galaxy read at once; none where the input has none. A
  // streamed run holds its gas (the gas stages need every cell at once) and streams its stars.
  virtual Gas read_gas(const Mesh& mesh) const = 0;
  // The optional Stars fields every block carries (FieldSpec names: "smoothing_length_kpc" where
  // a TNG file has StellarHsml), known before any row is read.
  virtual std::set<std::string> optional_star_fields() const { return {}; }
  // A block of no star with the fields every block has, zero rows on every device: what a
  // process of a run across processes deposits when no block with stars falls to it.
  Stars empty_block(const Mesh& mesh) const;

 protected:
  // The bounds of all the stars, read block_rows rows at a time (a file's first pass), the
  // blocks shared among the processes of a run across them (for_each_own_block).
  StarBounds read_bounds(const Mesh& mesh, std::size_t block_rows) const;
  // f(first_row, n_rows) for every block of block_rows rows this process reads in a pass: all
  // of them, or in a run across processes its share (Mesh::owns_block). What the blocks give is
  // then merged over the processes.
  template <class F>
  void for_each_own_block(const Mesh& mesh, std::size_t block_rows, F&& f) const {
    for (std::size_t b = 0, first = 0; first < n_rows(); ++b, first += block_rows)
      if (mesh.owns_block(b)) f(first, std::min(block_rows, n_rows() - first));
  }
};

}  // namespace ifusim
