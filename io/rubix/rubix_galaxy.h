#pragma once
// RUBIX's converted-galaxy layout (`rubix_galaxy.h5`, AstroAI-Lab/rubix,
// rubix/galaxy/input_handler/base.py create_rubix_galaxy and rubix/config/rubix_config.yml
// BaseHandler): groups meta/ (the snapshot header's values), galaxy/{center, halfmassrad_stars,
// redshift} and particles/{stars, gas}/<field>, every galaxy and particle dataset with a `unit`
// string attribute:
//   stars: coords kpc, mass Msun (initial mass), velocity km/s, metallicity "", age Gyr
//   gas:   coords kpc, density Msun/kpc^3, mass Msun, metallicity "", metals "", sfr Msun/yr,
//          internal_energy erg/g, velocity km/s, electron_abundance "", temperature K
// As RUBIX stores them, coords are box-frame positions (physical kpc); galaxy/center is the
// centre in the same frame. Velocities are written in the galaxy's frame (ifusim has already
// subtracted the bulk velocity; RUBIX re-centres velocities itself).
// RUBIX has no current stellar mass: reading sets Stars::mass_msun to the initial mass.
#include <array>
#include <memory>
#include <string>

#include "data/galaxy_data.h"
#include "data/mesh.h"
#include "io/star_stream.h"

namespace ifusim {

// Writes through a temporary name and renames at the end: no partial file on error.
void write_rubix_galaxy(const GalaxyData& data, const std::string& path);

// Throws InputError naming the file and dataset on a missing dataset, a wrong unit or shape.
GalaxyData read_rubix_galaxy(const Mesh& mesh, const std::string& path);

// True when the file is HDF5 with the galaxy/ and particles/ groups of RUBIX's layout.
bool is_rubix_galaxy(const std::string& path);

// The file's star and gas counts, from its datasets' shapes (no particle value read).
std::array<std::size_t, 2> count_rubix_galaxy(const std::string& path);

// The stars of a RUBIX file, block by block (io/star_stream.h): the record (centre, half-mass
// radius) from galaxy/, each block's rows by hyperslab; bitwise read_rubix_galaxy's stars and
// gas.
class RubixStarStream final : public StarStream {
 public:
  explicit RubixStarStream(const std::string& path);
  ~RubixStarStream() override;
  std::size_t n_rows() const override;
  GalaxyData first_pass(const Mesh& mesh, std::size_t block_rows) const override;
  Stars read(const Mesh& mesh, std::size_t first_row, std::size_t n_rows) const override;
  Gas read_gas(const Mesh& mesh) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ifusim
