#pragma once
// A synthetic disc galaxy (synthetic_galaxy.h) made directly in memory, without a file: the run
// config's `input.synthetic`. Every device generates its own rows of the particle arrays, in
// blocks of at most spec.block_rows rows (host memory is bounded by the block, not the galaxy),
// and converts them from TNG's units exactly as the TNG reader converts a subhalo cutout
// (tng_convert.h, one code path): positions relative to the galaxy's centre in physical kpc,
// peculiar velocities relative to the galaxy in km/s, masses in Msun, metallicities as mass
// fractions, ages t(a_snapshot) - t(a_formation) in Gyr in the spec's cosmology, gas temperature
// from the internal energy and electron abundance.
//
// Where it differs from writing the galaxy to a cutout and reading that (read_tng):
// - The centre and bulk velocity are the spec's own, the true ones, where the reader must find
//   them (shrinking spheres, and the mass-weighted velocity inside the stellar half-mass radius).
// - The stellar half-mass radius is computed as the synthetic group catalog computes it (0.002
//   dex radius histogram around the true centre, tng_writer.h), its bins summed in 64-bit
//   fixed point (exact, so in any order), where the reader sorts the stars by radius.
// - spec.wind_fraction must be 0: every PartType4 row is then a star, so that each device knows
//   which rows it holds without a pass over the formation times of all rows before it.
// The galaxy is bitwise identical for any block size and any number of devices.
#include <cstddef>
#include <memory>

#include "data/galaxy_data.h"
#include "data/mesh.h"
#include "io/star_stream.h"
#include "io/tng/synthetic_galaxy.h"

namespace ifusim::tng {

// The galaxy's stars, and its gas cells when with_gas (and spec.n_gas > 0), sharded over the
// mesh. Throws ConfigError when the spec is invalid, has no stars or wind_fraction != 0.
GalaxyData make_synthetic_galaxy(const Mesh& mesh, const SyntheticGalaxySpec& spec,
                                 bool with_gas = true);

// The same galaxy's stars for a streamed run (io/star_stream.h): any block of rows made on its
// own, bitwise the rows make_synthetic_galaxy makes, and its gas made at once.
class SyntheticStarStream final : public StarStream {
 public:
  explicit SyntheticStarStream(const SyntheticGalaxySpec& spec);  // validates, as above
  ~SyntheticStarStream() override;
  std::size_t n_rows() const override;
  GalaxyData first_pass(const Mesh& mesh, std::size_t block_rows) const override;
  Stars read(const Mesh& mesh, std::size_t first_row, std::size_t n_rows) const override;
  Gas read_gas(const Mesh& mesh) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ifusim::tng
