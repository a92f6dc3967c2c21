#pragma once
// Smoothing lengths for the smoothed footprints (footprint.h, docs/smoothing.md).
// - Stars: TNG's StellarHsml where the input has it (read into stars.smoothing_length_kpc),
//   otherwise the distance to the k-th nearest other star in 3-D, the definition TNG uses for
//   StellarHsml with k = 32 (the radius of the sphere holding the 32 +- 1 nearest stars, TNG data
//   specification). The search is exact, with nanoflann's kd-tree (Blanco & Rai 2014,
//   https://github.com/jlblancoc/nanoflann; Debian's libnanoflann-dev).
// - Gas: the radius of the sphere of the cell's volume, (3 m / (4 pi rho))^(1/3).
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/json_params.h"
#include "stages/common/spaxel_grid.h"
#include "stages/stage.h"

namespace ifusim {

inline constexpr int kDefaultKnnNeighbours = 32;  // TNG's StellarHsml neighbour count

// The spaxel stages' smoothing parameters: "smoothing" ("none" or "kernel") and "knn_neighbours"
// (k of the fallback smoothing length, 1 to 1024).
struct SmoothingParams {
  Smoothing kind = Smoothing::none;
  int knn_neighbours = kDefaultKnnNeighbours;
  // Reads the two keys from `p` (the caller calls p.finish()).
  static SmoothingParams from_json(JsonParams& p);
};

// For each of the N points (row-major N x 3, kpc) the distance to its k-th nearest other point;
// with N - 1 < k other points, to the farthest one (0 for a single point). Memory: the kd-tree
// holds one 32-bit index per point plus its nodes (about N / 5 of them, leaves of up to 10
// points); the queries run in parallel (OpenMP), each with a (k + 1)-entry result buffer, so
// nothing of size N x k is ever held.
std::vector<float> knn_smoothing_length_kpc(const std::vector<float>& positions_kpc, int k);

// The same lengths with the tree built once, over all N points, and queried for any of them: the
// lengths of a block of those points are bitwise those knn_smoothing_length_kpc gives them (the
// search is exact, so the k-th distance does not depend on the tree's point order).
class KnnLengths {
 public:
  KnnLengths(std::vector<float> positions_kpc, int k);  // throws std::invalid_argument
  ~KnnLengths();
  std::vector<float> of(const std::vector<float>& query_positions_kpc) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The spaxel stages' pass for kernel smoothing without the input's lengths: the positions of
// every star (12 bytes a star on the host, gathered over the processes of a run across them),
// then the tree over them (about 8 more), so that each block's stars get the lengths among all
// the stars.
class KnnPass {
 public:
  explicit KnnPass(const SmoothingParams& params) : params_(params) {}
  Stage::Pass pass(const StreamedInput& input) const;
  void observe(const RunState& block);
  void end_pass(const Mesh& mesh);
  const KnnLengths* lengths() const { return lengths_.get(); }
  // For the plan: the positions and the tree of every star (none without kernel smoothing).
  std::vector<MemoryItem> memory_estimate(const PlanContext& c, const std::string& stage) const;

 private:
  SmoothingParams params_;
  std::vector<float> positions_kpc_;
  std::unique_ptr<const KnnLengths> lengths_;
};

// (3 m / (4 pi rho))^(1/3) in kpc for mass (Msun) and density (Msun / kpc^3).
double gas_cell_radius_kpc(double mass_msun, double density_msun_per_kpc3);

// With smoothing "kernel": keeps stars.smoothing_length_kpc when the input gave one for every
// star (StellarHsml), otherwise gives the stars held their k-nearest-neighbour lengths among all
// the stars (the tree of `knn`'s pass), sharded like the other star fields. Nothing with
// smoothing "none".
void prepare_star_smoothing(RunState& state, const SmoothingParams& params, const KnnPass& knn);

// Places the gas held on the stars' grid (the product "spaxels"): gas.spaxel_index, and with
// smoothing "kernel" gas.smoothing_length_kpc, the cells' radii (every cell then needs a finite
// density > 0: an error naming `stage` and the cell otherwise). For gas_footprint
// (footprint.h), which the gas stages (dust, emission_lines) use.
void place_gas(RunState& state, const std::string& stage);

}  // namespace ifusim
