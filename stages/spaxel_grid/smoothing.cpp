#include "stages/spaxel_grid/smoothing.h"

#include <spdlog/spdlog.h>
#include <nanoflann.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <optional>
#include <stdexcept>
#include <utility>

#include "data/collectives/reductions.h"
#include "data/sharded_array.h"
#include "stages/common/particle_fields.h"
#include "stages/spaxel_grid/spaxel_grid.h"

namespace ifusim {

SmoothingParams SmoothingParams::from_json(JsonParams& p) {
  SmoothingParams out;
  out.kind = p.choice("smoothing", {"none", "kernel"}, "none") == "kernel" ? Smoothing::kernel
                                                                           : Smoothing::none;
  const long long k = p.integer("knn_neighbours", kDefaultKnnNeighbours);
  p.require(k >= 1 && k <= 1024, "knn_neighbours", "an integer from 1 to 1024", k);
  out.knn_neighbours = static_cast<int>(k);
  return out;
}

namespace {

// nanoflann's dataset interface over a row-major N x 3 float array.
struct PointCloud {
  const std::vector<float>& xyz;
  std::size_t kdtree_get_point_count() const { return xyz.size() / 3; }
  float kdtree_get_pt(std::uint32_t i, std::size_t dim) const { return xyz[3 * i + dim]; }
  template <class BBox>
  bool kdtree_get_bbox(BBox&) const {
    return false;  // let nanoflann compute it
  }
};

// Squared distances accumulated in double from float coordinates; 32-bit point indices.
using KdTree = nanoflann::KDTreeSingleIndexAdaptor<
    nanoflann::L2_Simple_Adaptor<float, PointCloud, double, std::uint32_t>, PointCloud, 3,
    std::uint32_t>;

constexpr std::size_t kLeafMaxSize = 10;

// Points in Morton (Z-order) order of their positions: neighbours in the list are neighbours in
// space. The queries in it walk the same branches of the tree one after another (the stars come
// in the snapshot's or the generator's order, and searched in it the 32-neighbour lengths of 1e6
// stars took 7.7 s on 2 cores here); the tree's points stored in it put a leaf's points in a few
// cache lines, where the input's order scattered them over the array.
std::vector<std::uint32_t> spatial_order(const std::vector<float>& positions_kpc) {
  const std::size_t n = positions_kpc.size() / 3;
  float lo[3], hi[3];
  for (int a = 0; a < 3; ++a) lo[a] = hi[a] = n ? positions_kpc[a] : 0.0f;
  for (std::size_t i = 0; i < n; ++i)
    for (int a = 0; a < 3; ++a) {
      lo[a] = std::min(lo[a], positions_kpc[3 * i + a]);
      hi[a] = std::max(hi[a], positions_kpc[3 * i + a]);
    }
  // 21 bits an axis, interleaved (x in the lowest bit of each triple).
  auto spread = [](std::uint64_t v) {
    v &= 0x1fffff;
    v = (v | v << 32) & 0x1f00000000ffffULL;
    v = (v | v << 16) & 0x1f0000ff0000ffULL;
    v = (v | v << 8) & 0x100f00f00f00f00fULL;
    v = (v | v << 4) & 0x10c30c30c30c30c3ULL;
    v = (v | v << 2) & 0x1249249249249249ULL;
    return v;
  };
  std::vector<std::pair<std::uint64_t, std::uint32_t>> keyed(n);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(n); ++i) {
    std::uint64_t key = 0;
    for (int a = 0; a < 3; ++a) {
      const double extent = static_cast<double>(hi[a]) - lo[a];
      const double t = extent > 0 ? (positions_kpc[3 * i + a] - lo[a]) / extent : 0.0;
      key |= spread(static_cast<std::uint64_t>(t * 2097151.0)) << a;
    }
    keyed[i] = {key, static_cast<std::uint32_t>(i)};
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<std::uint32_t> order(n);
  for (std::size_t j = 0; j < n; ++j) order[j] = keyed[j].second;
  return order;
}

}  // namespace

struct KnnLengths::Impl {
  std::vector<float> positions_kpc;
  PointCloud cloud{positions_kpc};
  std::optional<KdTree> tree;  // none for fewer than 2 points
  std::size_t want = 0;        // neighbours asked for
};

KnnLengths::KnnLengths(std::vector<float> positions_kpc, int k) : impl_(std::make_unique<Impl>()) {
  if (k < 1) throw std::invalid_argument("knn_smoothing_length_kpc: k must be >= 1");
  if (positions_kpc.size() % 3 != 0)
    throw std::invalid_argument("knn_smoothing_length_kpc: positions are not N x 3");
  const std::size_t n = positions_kpc.size() / 3;
  if (n >= std::numeric_limits<std::uint32_t>::max())
    throw std::invalid_argument("knn_smoothing_length_kpc: more than 2^32 - 1 points");
  for (const float v : positions_kpc)
    if (!std::isfinite(v))
      throw std::invalid_argument("knn_smoothing_length_kpc: non-finite position");
  // The lengths are distances alone, so the tree's points may be held in any order.
  const std::vector<std::uint32_t> order = spatial_order(positions_kpc);
  impl_->positions_kpc.resize(positions_kpc.size());
  for (std::size_t j = 0; j < n; ++j)
    std::copy_n(positions_kpc.data() + 3 * std::size_t{order[j]}, 3,
                impl_->positions_kpc.data() + 3 * j);
  if (n < 2) return;
  impl_->tree.emplace(3, impl_->cloud, nanoflann::KDTreeSingleIndexAdaptorParams(kLeafMaxSize));
  // The point itself is among its own nearest (at distance 0, also with duplicates): ask for
  // k + 1 and take the last, the k-th nearest other point.
  impl_->want = std::min<std::size_t>(static_cast<std::size_t>(k) + 1, n);
}

KnnLengths::~KnnLengths() = default;

std::vector<float> KnnLengths::of(const std::vector<float>& query_positions_kpc) const {
  std::vector<float> out(query_positions_kpc.size() / 3, 0.0f);
  if (!impl_->tree) return out;
  const std::size_t want = impl_->want;
  const auto count = static_cast<std::ptrdiff_t>(out.size());
  // Each query's answer is its own: the order changes the time, not the lengths.
  const std::vector<std::uint32_t> order = spatial_order(query_positions_kpc);
  const KdTree& tree = *impl_->tree;
#pragma omp parallel
  {
    std::vector<std::uint32_t> index(want), previous;
    std::vector<double> distance_sq(want);
#pragma omp for schedule(dynamic, 4096)
    for (std::ptrdiff_t j = 0; j < count; ++j) {
      const std::size_t i = order[static_cast<std::size_t>(j)];
      const float* query = query_positions_kpc.data() + 3 * i;
      nanoflann::KNNResultSet<double, std::uint32_t> result(want);
      result.init(index.data(), distance_sq.data());
      // The search starts from a bound instead of from infinity: the farthest of the previous
      // query's `want` nearest points (its neighbour in Morton order, so nearby) from this one,
      // just above it. There are `want` points within it, so the answer is within it too; only
      // the tree's branches that lie farther are skipped sooner. The distances are the tree's own
      // function's, so every point at the bound is still taken: the same lengths, bit for bit.
      if (previous.size() == want) {
        double bound = 0.0;
        for (const std::uint32_t p : previous)
          bound = std::max(bound, tree.distance.evalMetric(query, p, 3));
        distance_sq[want - 1] = std::nextafter(bound, std::numeric_limits<double>::infinity());
      }
      tree.findNeighbors(result, query, nanoflann::SearchParams());
      const std::size_t found = result.size();
      out[i] = found == 0 ? 0.0f : static_cast<float>(std::sqrt(distance_sq[found - 1]));
      previous.assign(index.begin(), index.begin() + static_cast<std::ptrdiff_t>(found));
    }
  }
  return out;
}

std::vector<float> knn_smoothing_length_kpc(const std::vector<float>& positions_kpc, int k) {
  return KnnLengths(positions_kpc, k).of(positions_kpc);
}

Stage::Pass KnnPass::pass(const StreamedInput& input) const {
  return params_.kind == Smoothing::kernel &&
                 input.optional_star_fields.count("smoothing_length_kpc") == 0
             ? Stage::Pass::stars
             : Stage::Pass::none;
}

std::vector<MemoryItem> KnnPass::memory_estimate(const PlanContext& c,
                                                 const std::string& stage) const {
  if (params_.kind != Smoothing::kernel) return {};
  // 12 bytes of position and ~8 of tree (an index, and a node per 5 points) a star, and while
  // the tree's points are put in Morton order the input's positions (12) and the sort's keys
  // and order (20).
  return {
      {"kNN smoothing lengths: every star's position and the k-d tree (host; none where the "
       "input gives StellarHsml)",
       c.n_stars * 52, false, "stages." + stage + ".smoothing"}};
}

void KnnPass::observe(const RunState& block) {
  const std::vector<float> p = block.data.stars.position_kpc.to_host();
  positions_kpc_.insert(positions_kpc_.end(), p.begin(), p.end());
}

void KnnPass::end_pass(const Mesh& mesh) {
  // A run across processes: every process's stars.
  std::vector<float> all = concatenate_over_processes(mesh, std::exchange(positions_kpc_, {}));
  spdlog::info("smoothing: a k-d tree over {} stars for their k = {} nearest neighbours",
               all.size() / 3, params_.knn_neighbours);
  lengths_ = std::make_unique<const KnnLengths>(std::move(all), params_.knn_neighbours);
}

double gas_cell_radius_kpc(double mass_msun, double density_msun_per_kpc3) {
  return std::cbrt(3.0 * mass_msun / (4.0 * std::numbers::pi * density_msun_per_kpc3));
}

void place_gas(RunState& state, const std::string& stage) {
  Gas& gas = state.data.gas;
  const SpaxelGrid& grid = state.products.get<SpaxelGrid>("spaxels");
  const std::size_t n = gas.count();
  if (gas.position_kpc.rows() != n)
    throw std::runtime_error(stage + ": the gas has no position_kpc (the input's Coordinates)");
  const bool kernel = static_cast<Smoothing>(grid.smoothing) == Smoothing::kernel;
  auto& spaxel_index = gas.derived.set(
      fields::gas_spaxel_index, ShardedArray<std::int32_t>(state.mesh, n, 1, Sharding::sharded()));
  shard_map(state.mesh, [&](const Device& d) {
    IFUSIM_DISPATCH(d, assign_spaxels, d, grid, gas.position_kpc.local(d, 0),
                    gas.position_kpc.local(d, 1), spaxel_index.local(d));
  });
  if (!kernel || n == 0) return;
  if (gas.density_msun_per_kpc3.rows() != n)
    throw std::runtime_error(stage +
                             ": smoothing \"kernel\" needs gas.density_msun_per_kpc3 (the "
                             "input's Density) for the gas cells' sizes");
  const std::vector<float> mass = gas.mass_msun.to_host();
  const std::vector<float> density = gas.density_msun_per_kpc3.to_host();
  std::vector<float> radius(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!(density[i] > 0.0f) || !std::isfinite(density[i]))
      throw std::runtime_error(stage + ": gas.density_msun_per_kpc3[" + std::to_string(i) + "] = " +
                               std::to_string(density[i]) + ", expected a finite density > 0");
    radius[i] = static_cast<float>(gas_cell_radius_kpc(mass[i], density[i]));
  }
  gas.derived.set(fields::gas_smoothing_length_kpc,
                  device_put(state.mesh, radius, 1, Sharding::sharded()));
}

void prepare_star_smoothing(RunState& state, const SmoothingParams& params, const KnnPass& knn) {
  if (params.kind == Smoothing::none) return;
  Stars& stars = state.data.stars;
  if (!stars.smoothing_length_kpc.empty() && stars.smoothing_length_kpc.rows() == stars.count()) {
    spdlog::info("smoothing: the input's stellar smoothing lengths (StellarHsml)");
    return;
  }
  if (!knn.lengths())
    throw std::logic_error("smoothing: kNN lengths before the pass over the stars");
  spdlog::debug(
      "smoothing: stellar smoothing lengths, the distance to the k-th nearest star, k = {} ({} "
      "stars)",
      params.knn_neighbours, stars.count());
  stars.smoothing_length_kpc = device_put(
      state.mesh, knn.lengths()->of(stars.position_kpc.to_host()), 1, Sharding::sharded());
}

}  // namespace ifusim
