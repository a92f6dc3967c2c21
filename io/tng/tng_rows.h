#pragma once
// A galaxy as IllustrisTNG's files hold it: particle rows in TNG's on-disk units and types, and
// the record the files keep beside them. What makes galaxies (synthetic_galaxy.h) and what
// writes them (tng_writer.h) share this and nothing else.
//
// Units on disk are TNG's (Nelson et al. 2019, "The IllustrisTNG simulations: public data
// release", and https://www.tng-project.org/data/docs/specifications/): Coordinates ckpc/h
// (float64, absolute positions in the periodic box), Velocities km sqrt(a)/s (float32; peculiar
// velocity = value * sqrt(a)), Masses 1e10 Msun/h, Density (1e10 Msun/h)/(ckpc/h)^3,
// InternalEnergy (km/s)^2, StarFormationRate Msun/yr, GFM_StellarFormationTime the formation
// scale factor (<= 0 marks a wind cell).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/cosmology.h"

namespace ifusim::tng {

// Particle rows in TNG's on-disk units and types, row-major (N, 3) for vectors.
struct TngStarRows {
  std::vector<double> coordinates;  // ckpc/h
  std::vector<float> velocities;    // km sqrt(a)/s
  std::vector<float> masses;        // 1e10 Msun/h
  std::vector<float> initial_masses;
  std::vector<float> metallicity;     // mass fraction
  std::vector<float> formation_time;  // scale factor; <= 0: wind cell
  std::vector<std::uint64_t> particle_ids;
  std::size_t size() const { return masses.size(); }
};
struct TngGasRows {
  static constexpr int kMetals = 10;  // H, He, C, N, O, Ne, Mg, Si, Fe, other metals
  std::vector<double> coordinates;
  std::vector<float> velocities;
  std::vector<float> masses;
  std::vector<float> density;             // (1e10 Msun/h)/(ckpc/h)^3
  std::vector<float> internal_energy;     // (km/s)^2
  std::vector<float> electron_abundance;  // n_e / n_H
  std::vector<float> metallicity;
  std::vector<float> metals;               // (N, 10) mass fractions, summing to 1
  std::vector<float> star_formation_rate;  // Msun/yr
  std::vector<std::uint64_t> particle_ids;
  std::size_t size() const { return masses.size(); }
};

// What the files say about one galaxy (one subhalo) besides its particles: the snapshot's epoch,
// cosmology and box (its Header), and where the subhalo sits (its catalog entry).
struct TngGalaxyRecord {
  std::string simulation_name = "ifusim-synthetic";
  int snapshot = 99;            // SnapshotNumber
  std::int64_t subhalo_id = 0;  // CutoutID of a cutout
  double redshift = 0.0;
  Cosmology cosmology;
  double omega_baryon = 0.0486;
  double box_size_ckpc_h = 75000.0;
  std::array<double, 3> center_ckpc_h = {37500.0, 37500.0, 37500.0};  // SubhaloPos
  std::size_t n_stars = 0;  // PartType4 rows, wind cells included
  std::size_t n_gas = 0;    // PartType0 rows

  double scale_factor() const { return 1.0 / (1.0 + redshift); }
};

// A galaxy's rows on demand, any block of them on its own, so that a writer's memory is bounded
// by one block however large the galaxy (a generator, synthetic_galaxy.h, holds none of them).
// Const and thread-safe.
class TngGalaxySource {
 public:
  virtual ~TngGalaxySource() = default;
  virtual const TngGalaxyRecord& record() const = 0;
  // Rows [begin, end) of the stars / gas cells (resizes `out`).
  virtual void star_rows(std::size_t begin, std::size_t end, TngStarRows& out) const = 0;
  virtual void gas_rows(std::size_t begin, std::size_t end, TngGasRows& out) const = 0;
  // How many rows to ask for at a time.
  virtual std::size_t block_rows() const = 0;
};

// A galaxy whose rows are all in host memory (particles read from elsewhere, or made by hand):
// any galaxy the writer can take. The record's n_stars and n_gas are set from the rows.
class TngHeldGalaxy final : public TngGalaxySource {
 public:
  // Throws std::invalid_argument when a field's length does not match the rows' count.
  TngHeldGalaxy(TngGalaxyRecord record, TngStarRows stars, TngGasRows gas,
                std::size_t block_rows = std::size_t{1} << 20);

  const TngGalaxyRecord& record() const override { return record_; }
  void star_rows(std::size_t begin, std::size_t end, TngStarRows& out) const override;
  void gas_rows(std::size_t begin, std::size_t end, TngGasRows& out) const override;
  std::size_t block_rows() const override { return block_rows_; }

 private:
  TngGalaxyRecord record_;
  TngStarRows stars_;
  TngGasRows gas_;
  std::size_t block_rows_;
};

}  // namespace ifusim::tng
