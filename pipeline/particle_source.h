#pragma once
// Where a run's particles come from, as blocks for the run loop (pipeline/runner.cpp): a galaxy
// held at once is one block that stays in memory; a streamed galaxy (input.stream_block_stars, or
// a run across processes) gives its stars block by block and its gas in one block of its own.
// Every input (a galaxy given in memory, input.synthetic, a RUBIX file, an IllustrisTNG cutout or
// snapshot) is dispatched here, once, to a held or a streamed source.
#include <cstddef>
#include <memory>

#include "data/galaxy_data.h"
#include "data/mesh.h"
#include "io/run_config.h"
#include "io/tng/tng_reader.h"
#include "stages/stage.h"

namespace ifusim {

class ParticleSource {
 public:
  virtual ~ParticleSource() = default;
  // The galaxy record and the bounds of all its stars (GalaxyData::star_bounds), and a held
  // galaxy's particles.
  virtual GalaxyData open(const Mesh& mesh) = 0;
  // Whether the galaxy open() returned holds all the particles: the run's one block.
  virtual bool resident() const = 0;
  // What every block of stars brings (after open()).
  virtual StreamedInput input() const = 0;
  // Whether the gas is read (some stage uses it and the config allows it).
  bool reads_gas() const { return read_gas_; }

  // A streamed galaxy's blocks: the stars of block b < n_star_blocks(), all the gas (none where
  // the gas is not read), and a block of no star with the fields every block has.
  virtual std::size_t n_star_blocks() const = 0;
  virtual Stars read_stars(const Mesh& mesh, std::size_t block) const = 0;
  virtual Gas read_gas(const Mesh& mesh) const = 0;
  virtual Stars empty_block(const Mesh& mesh) const = 0;

 protected:
  explicit ParticleSource(bool read_gas) : read_gas_(read_gas) {}

 private:
  bool read_gas_;
};

// The source of the run `config` describes on `mesh`: streamed where input.stream_block_stars is
// set or the mesh spans processes (each process then deposits its share of the blocks, one
// block per process by default), held otherwise. Nothing is read yet.
// How the run reads its snapshot file (input.file, input.format with "auto" told from the file,
// the membership keys): for the source and the plan alike.
TngReadOptions snapshot_read_options(const RunConfig& config, bool read_gas);

std::unique_ptr<ParticleSource> open_particle_source(const RunConfig& config, const Mesh& mesh,
                                                     bool read_gas);

}  // namespace ifusim
