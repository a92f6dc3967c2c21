#include "stages/stellar_spectra/stellar_spectra.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "core/config_error.h"
#include "data/collectives/psum.h"
#include "data/collectives/reductions.h"
#include "data/fixed_point.h"
#include "data/host_memory.h"
#include "data/sharded_array.h"
#include "data/wavelength.h"
#include "stages/common/cube_partials.h"
#include "stages/common/device_sums.h"
#include "stages/common/particle_fields.h"
#include "stages/stellar_spectra/binned_product.h"

namespace ifusim {

namespace {

// The templates' rest wavelengths in vacuum, the medium the spectral core works in (WaveBins):
// a library given in air is converted here, once, at its rest wavelengths, which are the ones its
// air wavelengths were measured at.
std::vector<double> vacuum_rest_wavelengths(const SspGrid& grid) {
  std::vector<double> out;
  for (double w : grid.wavelength_angstrom)
    out.push_back(convert_wavelength(w, grid.wavelength_medium, "vacuum"));
  return out;
}

// The first position where a converted axis stops increasing, or -1.
std::ptrdiff_t not_increasing_at(const std::vector<double>& v) {
  const auto it = std::adjacent_find(v.begin(), v.end(), std::greater_equal<>());
  return it == v.end() ? -1 : it - v.begin();
}

// Pixel edges from pixel centres: midpoints, the outer edges half a spacing beyond.
std::vector<double> edges_from_centres(const std::vector<double>& c) {
  const std::size_t n = c.size();
  std::vector<double> e(n + 1);
  for (std::size_t j = 1; j < n; ++j) e[j] = 0.5 * (c[j - 1] + c[j]);
  e[0] = c[0] - 0.5 * (c[1] - c[0]);
  e[n] = c[n - 1] + 0.5 * (c[n - 1] - c[n - 2]);
  return e;
}

void check_grid(const SspGrid& g) {
  auto ascending = [](const std::vector<double>& v) {
    return std::adjacent_find(v.begin(), v.end(), std::greater_equal<>()) == v.end();
  };
  if (g.n_age() == 0 || g.n_metallicity() == 0 || g.n_wave() < 2)
    throw std::invalid_argument("SSP grid " + g.name +
                                ": needs ages, metallicities and >= 2 wavelengths");
  if (!ascending(g.age_gyr) || !ascending(g.metallicity) || !ascending(g.wavelength_angstrom))
    throw std::invalid_argument("SSP grid " + g.name + ": axes must be strictly ascending");
  if (g.age_gyr.front() <= 0 || g.metallicity.front() <= 0)
    throw std::invalid_argument("SSP grid " + g.name +
                                ": ages and metallicities must be > 0 (log grid)");
  if (g.flux.size() != g.n_age() * g.n_metallicity() * g.n_wave())
    throw std::invalid_argument("SSP grid " + g.name + ": flux size does not match its axes");
  if (g.wavelength_medium != "air" && g.wavelength_medium != "vacuum")
    throw std::invalid_argument("SSP grid " + g.name + ": wavelength medium must be \"air\" or " +
                                "\"vacuum\", is \"" + g.wavelength_medium + "\"");
}

// The templates' vacuum rest-frame pixel edges. Air to vacuum is monotonic, but a grid finer than
// the conversion's rounding could fold: that is an error naming the library, not a negative
// pixel.
std::vector<double> vacuum_rest_edges(const SspGrid& g) {
  const std::vector<double> centres = vacuum_rest_wavelengths(g);
  const std::vector<double> edges = edges_from_centres(centres);
  for (const auto* axis : {&centres, &edges}) {
    const std::ptrdiff_t at = not_increasing_at(*axis);
    if (at >= 0)
      throw std::invalid_argument(
          "SSP grid " + g.name + " (" + g.source + "): its " +
          (axis == &centres ? "wavelengths" : "pixel edges") + " converted from " +
          g.wavelength_medium + " to vacuum do not increase at " +
          std::to_string(g.wavelength_angstrom[std::min<std::size_t>(at, g.n_wave() - 1)]) +
          " A (" + g.wavelength_medium + ", pixel " + std::to_string(at) + ")");
  }
  return edges;
}

}  // namespace

SspTables make_ssp_tables(const SspGrid& grid) {
  check_grid(grid);
  SspTables t;
  for (double a : grid.age_gyr) t.log_age.push_back(std::log10(a));
  for (double z : grid.metallicity) t.log_z.push_back(std::log10(z));
  t.edges = vacuum_rest_edges(grid);
  // A pixel's energy is its flux density times its width in the library's own medium (the
  // density is per Angstrom of that medium); only where it lies moves to vacuum.
  const std::vector<double> own_edges = edges_from_centres(grid.wavelength_angstrom);
  const std::size_t n_wave = grid.n_wave(), n_nodes = grid.n_age() * grid.n_metallicity();
  const double step = (t.edges.back() - t.edges.front()) / static_cast<double>(n_wave);
  t.uniform = true;
  for (std::size_t j = 0; j <= n_wave; ++j)
    t.uniform = t.uniform && std::abs(t.edges[j] - (t.edges[0] + j * step)) <= 1e-9 * t.edges[j];
  t.cumulative.assign(n_nodes * (n_wave + 1), 0.0);
  for (std::size_t node = 0; node < n_nodes; ++node) {
    const float* f = grid.flux.data() + node * n_wave;
    double* c = t.cumulative.data() + node * (n_wave + 1);
    double total = 0.0;
    for (std::size_t j = 0; j < n_wave; ++j) {
      const double energy = static_cast<double>(f[j]) * (own_edges[j + 1] - own_edges[j]);
      c[j + 1] = c[j] + energy;
      total += std::abs(energy);
      t.max_flux_density =
          std::max(t.max_flux_density, std::abs(energy) / (t.edges[j + 1] - t.edges[j]));
    }
    t.max_energy = std::max(t.max_energy, total);
  }
  return t;
}

SspView SspTables::host_view(OutsideGrid outside) const {
  SspView v;
  v.n_age = static_cast<int>(log_age.size());
  v.n_z = static_cast<int>(log_z.size());
  v.n_wave = static_cast<int>(edges.size() - 1);
  v.log_age = log_age.data();
  v.log_z = log_z.data();
  v.edges = edges.data();
  v.cumulative = cumulative.data();
  v.uniform = uniform;
  v.edge0 = edges.front();
  v.step = (edges.back() - edges.front()) / v.n_wave;
  v.outside = outside;
  return v;
}

StellarSpectraParams StellarSpectraParams::from_json(JsonParams p) {
  StellarSpectraParams out;
  out.method = p.choice("method", {"binned", "exact"}, "binned") == "exact"
                   ? SpectralMethod::exact
                   : SpectralMethod::binned;
  // Only bilinear interpolation in (log age, log Z) is offered; the key documents it.
  p.choice("interpolation", {"bilinear"}, "bilinear");
  out.outside = p.choice("outside_grid", {"clamp", "zero"}, "clamp") == "zero" ? OutsideGrid::zero
                                                                               : OutsideGrid::clamp;
  out.velocity_bin_kms = p.number("velocity_bin_kms", out.velocity_bin_kms);
  p.require(out.velocity_bin_kms > 0 && out.velocity_bin_kms <= 1000, "velocity_bin_kms",
            "a number > 0 and <= 1000 (km/s)", out.velocity_bin_kms);
  const std::string storage = p.choice("histogram", {"auto", "dense", "sparse"}, "auto");
  out.histogram = storage == "dense"    ? HistogramStorage::dense
                  : storage == "sparse" ? HistogramStorage::sparse
                                        : HistogramStorage::automatic;
  out.histogram_memory_gb = p.number("histogram_memory_gb", out.histogram_memory_gb);
  p.require(out.histogram_memory_gb > 0, "histogram_memory_gb", "a number > 0 (GB)",
            out.histogram_memory_gb);
  if (p.has("kinematics_band_angstrom")) {
    const auto band = p.numbers("kinematics_band_angstrom", 2);
    p.require(band[0] > 0 && band[1] > band[0], "kinematics_band_angstrom",
              "[lo, hi] with 0 < lo < hi (observed Angstrom)", p.raw("kinematics_band_angstrom"));
    out.band_lo_angstrom = band[0];
    out.band_hi_angstrom = band[1];
  }
  p.finish();
  return out;
}

namespace {

// The templates on every device (replicated), and their views.
struct DeviceTables {
  ShardedArray<double> log_age, log_z, edges, cumulative;
  DeviceTables(const Mesh& mesh, const SspTables& t) {
    const auto rep = Sharding::replicated();
    log_age = device_put(mesh, t.log_age, 1, rep);
    log_z = device_put(mesh, t.log_z, 1, rep);
    edges = device_put(mesh, t.edges, 1, rep);
    cumulative = device_put(mesh, t.cumulative, 1, rep);
  }
  SspView view(const SspTables& t, OutsideGrid outside, const Device& d) const {
    SspView v = t.host_view(outside);
    v.log_age = log_age.local(d).data;
    v.log_z = log_z.local(d).data;
    v.edges = edges.local(d).data;
    v.cumulative = cumulative.local(d).data;
    return v;
  }
};

// Entries a star makes: 4 nodes x 2 velocity nodes, and S and P for each template end with a
// window (x the dust expansion's rank with dust).
double entries_per_star(const HistogramTile& tile) {
  double entries = 8.0;
  for (const EdgeWindow& window : tile.edges) entries += window.n_bins > 0 ? 2.0 : 0.0;
  return tile.dust.rank * entries;
}

// footprint_spaxels: the mean number of spaxels a star's light reaches (1 without smoothing):
// a smoothed star makes its entries once for each of them, so a sparse histogram grows with it.
HistogramStorage histogram_storage(const StellarSpectraParams& p, double n_stars,
                                   double footprint_spaxels, const HistogramTile& tile,
                                   double dense_bytes) {
  if (p.histogram != HistogramStorage::automatic) return p.histogram;
  return entries_per_star(tile) * footprint_spaxels * n_stars * kSparseEntryBytes < dense_bytes
             ? HistogramStorage::sparse
             : HistogramStorage::dense;
}

// The mean footprint of the stars held (footprint.h): a kernel of support +-H overlaps about
// 2 H / d + 1 spaxels of side d along each axis, at most the field's n. 1 without smoothing. Of
// all the stars of every device, so the same for any device count; of the block held for a
// streamed galaxy (an estimate: the choice changes the memory and the time, not the cube).
double mean_footprint_spaxels(const Stars& stars, const SpaxelGrid& grid) {
  if (static_cast<Smoothing>(grid.smoothing) == Smoothing::none || stars.count() == 0) return 1.0;
  const std::vector<float> length_kpc = stars.smoothing_length_kpc.to_host();
  const double support_per_length = kStarSigmaPerSmoothingLength * kKernelTruncationSigmas;
  double sum = 0.0;
  for (const float h : length_kpc) {
    const double across =
        std::min(static_cast<double>(grid.n_side),
                 2.0 * support_per_length * std::max(0.0f, h) / grid.spaxel_size_kpc + 1.0);
    sum += across * across;
  }
  return std::max(1.0, sum / static_cast<double>(length_kpc.size()));
}

// The observation's wavelength bins, margin included (linear or logarithmic, as its axes).
WaveBins observed_bins(const Observation& obs, int n_wave) {
  WaveBins bins{obs.simulated_wave_start_angstrom(), obs.axes.wave_step_angstrom, n_wave};
  bins.log10_step = obs.axes.wave_log10_step;
  return bins;
}

// Velocity nodes spanning |v_los| <= v_max_kms, spaced velocity_bin_kms in c ln(1 + v/c).
VelocityBins velocity_bins(double v_max_kms, double velocity_bin_kms) {
  const double beta = std::min(0.99, v_max_kms / kSpeedOfLightKms);
  VelocityBins v;
  v.du = velocity_bin_kms / kSpeedOfLightKms;
  v.u_min = std::log1p(-beta);
  v.n = static_cast<int>(std::floor((std::log1p(beta) - std::log1p(-beta)) / v.du)) + 2;
  return v;
}

// The windows of the templates' ends (EdgeWindow): the observed bins that lambda_end D reaches
// for D over the tile's velocity nodes, where that is inside the band.
void set_edge_windows(HistogramTile& tile, const SspTables& tables, const WaveBins& bins) {
  const VelocityBins& v = tile.velocity;
  const double d_lo = tile.one_plus_z * std::exp(v.u_min);
  const double d_hi = tile.one_plus_z * std::exp(v.u_min + (v.n - 1) * v.du);
  const SspView ssp = tables.host_view(OutsideGrid::clamp);
  for (int e = 0; e < 2; ++e) {
    EdgeWindow& window = tile.edges[e];
    window = {};
    window.red = e == 1;
    window.rest_angstrom = window.red ? tables.edges.back() : tables.edges.front();
    const double x_lo = window.rest_angstrom * d_lo, x_hi = window.rest_angstrom * d_hi;
    double max_flux = 0.0;
    for (int node = 0; node < ssp.n_age * ssp.n_z; ++node)
      max_flux = std::max(max_flux, std::abs(end_flux_density(ssp, node, window.red)));
    if (x_hi <= bins.vacuum_edge(0) || x_lo >= bins.vacuum_edge(bins.n) || max_flux == 0.0)
      continue;
    window.first_bin = bins.vacuum_bin(x_lo, 0, bins.n);
    window.n_bins = bins.vacuum_bin(x_hi, 0, bins.n) - window.first_bin + 1;
    window.flux_scale = max_flux / d_lo;
  }
}

// The dense tile: whole row blocks of the product (binned_product.h) within the budget.
std::int32_t dense_tile_spaxels(double histogram_memory_gb, double row_bytes,
                                std::int32_t n_spaxels) {
  const double block = static_cast<double>(kRowsPerBlock);
  const double fit = block * std::floor(histogram_memory_gb * 1e9 / row_bytes / block);
  return static_cast<std::int32_t>(std::min(std::max(block, fit), double(n_spaxels)));
}

// For the plan, before the data is read: the velocity range and the dust expansion's rank are
// assumed (the rank for A_V up to 40 mag, CCM89 over 3000-11000 A at rest, is 13).
constexpr double kPlanVelocityKms = 1000.0;
constexpr int kPlanDustRank = 13;

StarViews star_views(const Stars& stars, const SpaxelGrid& grid, const Device& d) {
  const ShardedArray<float>* dust_av = stars.derived.find(fields::stars_dust_av);
  return StarViews{stars.velocity_kms.local(d, 2).data, stars.initial_mass_msun.local(d).data,
                   stars.mass_msun.local(d).data,       stars.age_gyr.local(d).data,
                   stars.metallicity.local(d).data,     dust_av ? dust_av->local(d).data : nullptr,
                   star_footprint(stars, grid, d),      stars.mass_msun.local(d).size};
}

// Moments (w, w u, w u^2), u = v / velocity_unit_kms (add_moments), per spaxel, reduced into
// two maps.
std::unique_ptr<PartialArray> moment_maps(ShardedArray<std::int64_t> sums, FixedPointScale scale,
                                          std::string weighting, double velocity_unit_kms) {
  return std::make_unique<PartialArray>(
      std::move(sums), scale,
      [weighting, velocity_unit_kms](RunState& s, std::vector<double> total) {
        for (std::size_t i = 0; i + 2 < total.size(); i += 3) {
          total[i + 1] *= velocity_unit_kms;
          total[i + 2] *= velocity_unit_kms * velocity_unit_kms;
        }
        velocity_moment_maps(total, weighting, weighting + "-weighted", "the stars", s.maps);
      });
}

// Everything a spectral run shares between its deposit and its reduction.
struct SpectralSetup {
  std::shared_ptr<const SspTables> tables;
  std::shared_ptr<const DeviceTables> device_tables;
  OutsideGrid outside = OutsideGrid::clamp;
  WaveBins bins;  // on the host: vacuum_edges points into bin_vacuum_edges, edges into bin_edges
  std::shared_ptr<const std::vector<double>> bin_vacuum_edges;  // empty: the bins are in vacuum
  std::shared_ptr<const ShardedArray<double>> device_bin_vacuum_edges;
  // A logarithmic grid's edges (WaveBins::edges; empty for linear bins, whose formula is cheap).
  std::shared_ptr<const std::vector<double>> bin_edges;
  std::shared_ptr<const ShardedArray<double>> device_bin_edges;
  double max_vacuum_width_ratio = 1.0;  // of a bin's width in vacuum to its width (step)
  double redshift = 0.0;
  int band_first_bin = 0, band_end_bin = 0;
  CubeShape shape;
  SpaxelGrid grid;
  // The whole galaxy's (GalaxyData::star_bounds), whatever block of stars is held: |v_los| is
  // below the speed bound in any orientation.
  double n_stars = 0, m_init_max = 0, m_max = 0, speed_bound_kms = 0;
  // The dust stage's attenuation curve (none without dust) and its bound on every star's A_V;
  // the binned method's expansion of the attenuation over that range, and its table of
  // weights on every device.
  DustCurve dust;
  double dust_av_bound_mag = 0.0;
  std::shared_ptr<const DustExpansion> dust_expansion;
  // The expansion's fewer terms over each segment of bins (the binned product's).
  std::shared_ptr<const DustSegments> dust_segments;
  std::shared_ptr<const ShardedArray<double>> device_dust_phi;

  // The bins as device d's kernels see them.
  WaveBins bins_on(const Device& d) const {
    WaveBins b = bins;
    if (device_bin_vacuum_edges) b.vacuum_edges = device_bin_vacuum_edges->local(d).data;
    if (device_bin_edges) b.edges = device_bin_edges->local(d).data;
    return b;
  }
};

// The observed bins' edges converted from air to vacuum (WaveBins), checked to increase.
std::vector<double> bin_vacuum_edges(const WaveBins& bins, const std::string& medium) {
  std::vector<double> edges;
  if (medium == "vacuum") return edges;
  for (int k = 0; k <= bins.n; ++k)
    edges.push_back(convert_wavelength(bins.edge(k), medium, "vacuum"));
  const std::ptrdiff_t at = not_increasing_at(edges);
  if (at >= 0)
    throw std::invalid_argument(
        "stellar_spectra: the telescope's wavelength bin edges converted "
        "from " +
        medium + " to vacuum do not increase at " +
        std::to_string(bins.edge(static_cast<int>(at))) + " A");
  return edges;
}

// A dense tile's row windows (HistogramTile::row_start): each row's velocity nodes counted over
// the stars held, psum'd (the same windows for any device count), then each row's first and last
// node reached; rows no star reaches hold nothing. On the host and on every device. Empty: the
// tile's rows are whole (a streamed galaxy, whose blocks no window can foresee).
struct RowWindows {
  std::vector<std::int64_t> start;   // n_rows + 1
  std::vector<std::int32_t> window;  // per row: first velocity node, node count
  ShardedArray<std::int64_t> device_start;
  ShardedArray<std::int32_t> device_window;

  // Entries the tile holds.
  std::size_t entries(const HistogramTile& tile) const {
    return start.empty() ? static_cast<std::size_t>(tile.n_spaxels) * tile.columns()
                         : static_cast<std::size_t>(start.back());
  }
  // Device d's kernels see the windows.
  void set_on(HistogramTile& tile, const Device& d) const {
    if (start.empty()) return;
    tile.row_start = device_start.local(d).data;
    tile.row_window = device_window.local(d).data;
  }
  // The windows of the first n rows alone.
  RowWindows first_rows(const Mesh& mesh, std::size_t n) const {
    RowWindows w;
    w.start.assign(start.begin(), start.begin() + static_cast<std::ptrdiff_t>(n) + 1);
    w.window.assign(window.begin(), window.begin() + 2 * static_cast<std::ptrdiff_t>(n));
    w.device_start = device_put(mesh, w.start, 1, Sharding::replicated());
    w.device_window = device_put(mesh, w.window, 1, Sharding::replicated());
    return w;
  }
};

// f(row, column, place, value) for every non-zero value of a psum'd dense tile (its row windows
// where it has them), in place order: replica 0 (what to_host downloads) a row at a time, as a
// host copy of a whole tile (24 MB at MUSE's 625 spaxels) beside it was the stage's peak (#22).
// Each row's places are walked in the window's layout (SSP node, velocity node, dust term, then
// the ends' columns), where finding each place's column took three integer divisions: most of a
// smoothed run's gather.
// With whole_groups, every entry of a group of dust.rank columns (one spectrum's or end's dust
// terms) of which any is non-zero: the product's dust segments mix a group's terms together
// (binned_product.cpp), and a group made whole here is not made whole there from a copy.
template <class F>
void for_each_nonzero_entry(const ShardedArray<std::int64_t>& reduced, const HistogramTile& tile,
                            const RowWindows& windows, F&& f, bool whole_groups = false) {
  const DeviceBuffer<std::int64_t>& total = reduced.buffer_of(*reduced.shards().front().device);
  const std::size_t columns = tile.columns(), n_rows = static_cast<std::size_t>(tile.n_spaxels);
  const auto n_a = static_cast<std::size_t>(tile.dust.rank);
  const auto n_velocity = static_cast<std::size_t>(tile.velocity.n);
  const bool whole = windows.start.empty();
  std::vector<std::int64_t> values;
  for (std::size_t row = 0; row < n_rows; ++row) {
    const std::size_t begin = whole ? row * columns : static_cast<std::size_t>(windows.start[row]);
    const std::size_t end =
        whole ? begin + columns : static_cast<std::size_t>(windows.start[row + 1]);
    if (end == begin) continue;
    values.resize(end - begin);
    total.download(values.data(), end - begin, begin);
    std::size_t local = 0;
    // The group of n_a columns from `column` (its first), at values[local] on.
    auto visit = [&](std::size_t column) {
      bool any = false;
      for (std::size_t r = 0; r < n_a; ++r) any |= values[local + r] != 0;
      for (std::size_t r = 0; r < n_a; ++r, ++local)
        if (values[local] != 0 || (any && whole_groups))
          f(row, column + r, begin + local, values[local]);
    };
    if (whole) {
      for (std::size_t c = 0; c < columns; c += n_a) visit(c);
      continue;
    }
    const auto first = static_cast<std::size_t>(windows.window[2 * row]);
    const auto count = static_cast<std::size_t>(windows.window[2 * row + 1]);
    for (std::size_t node = 0; node < static_cast<std::size_t>(tile.n_nodes); ++node)
      for (std::size_t j = first; j < first + count; ++j) visit((node * n_velocity + j) * n_a);
    for (std::size_t c = tile.spectrum_columns(); local < end - begin; c += n_a) visit(c);
  }
}

RowWindows row_windows(const Mesh& mesh, const SpectralSetup& setup, const Stars& stars,
                       const HistogramTile& tile) {
  const auto n_rows = static_cast<std::size_t>(tile.n_spaxels);
  const auto n_velocity = static_cast<std::size_t>(tile.velocity.n);
  ShardedArray<std::int64_t> counts(mesh, n_rows * n_velocity, 1, Sharding::partial());
  shard_map(mesh, [&](const Device& d) {
    const SspView ssp = setup.device_tables->view(*setup.tables, setup.outside, d);
    IFUSIM_DISPATCH(d, count_velocity_nodes, d, ssp, star_views(stars, setup.grid, d), tile,
                    counts.local(d), mesh.shares_memory(d));
  });
  psum(mesh, counts);
  std::vector<std::int64_t> reached(n_rows * n_velocity);
  counts.buffer_of(*counts.shards().front().device).download(reached.data(), reached.size());
  RowWindows w;
  w.start.assign(n_rows + 1, 0);
  w.window.assign(2 * n_rows, 0);
  for (std::size_t r = 0; r < n_rows; ++r) {
    const std::int64_t* row = reached.data() + r * n_velocity;
    std::size_t first = 0, last = n_velocity;
    while (first < n_velocity && row[first] == 0) ++first;
    while (last > first && row[last - 1] == 0) --last;
    const auto count = static_cast<std::int32_t>(last - first);
    w.window[2 * r] = count > 0 ? static_cast<std::int32_t>(first) : 0;
    w.window[2 * r + 1] = count;
    w.start[r + 1] =
        w.start[r] + static_cast<std::int64_t>(count > 0 ? tile.row_entries(count) : 0);
  }
  w.device_start = device_put(mesh, w.start, 1, Sharding::replicated());
  // One component: the pairs stay side by side (components are planes on a device).
  w.device_window = device_put(mesh, w.window, 1, Sharding::replicated());
  return w;
}

// The binned method's partial result: the histogram, dense tile by tile or sparse. The first
// tile (or the sparse whole) is deposited by the stage; reduce() reduces it, makes its rows of
// the cube, and deposits, reduces and multiplies any further tile (a field whose dense
// histogram does not fit at once).
class BinnedSpectra final : public PartialResult {
 public:
  BinnedSpectra(SpectralSetup setup, HistogramTile first_tile, std::int32_t tile_spaxels,
                HistogramStorage storage, double histogram_memory_gb)
      : setup_(std::move(setup)),
        tile_(first_tile),
        tile_spaxels_(tile_spaxels),
        storage_(storage),
        histogram_memory_gb_(histogram_memory_gb) {}

  // Adds the stars held to H for the current tile, each device depositing its own: a streamed
  // galaxy calls it once per block (integer sums: the blocks' order does not matter).
  void deposit(const RunState& state) {
    const Mesh& mesh = state.mesh;
    std::vector<SparseHistogramShard> shards(storage_ == HistogramStorage::sparse ? mesh.size()
                                                                                  : 0);
    if (storage_ == HistogramStorage::dense && sums_.empty()) {
      // A held galaxy's one deposit per tile sees all its stars: rows in windows, and the tile
      // as many whole row blocks as fit histogram_memory_gb in them. A streamed galaxy's blocks
      // each add to the tile, whose windows no block can know: whole rows.
      if (!state.stars_are_a_block()) fit_tile_to_windows(state);
      const std::size_t entries = windows_.entries(tile_);
      sums_ = ShardedArray<std::int64_t>(mesh, entries, 1, Sharding::partial());
    }
    shard_map(mesh, [&](const Device& d) {
      const SspView ssp = setup_.device_tables->view(*setup_.tables, setup_.outside, d);
      const StarViews stars = star_views(state.data.stars, setup_.grid, d);
      const WaveBins bins = setup_.bins_on(d);
      const double counts = scale().counts_per_unit;
      HistogramTile tile = tile_;
      if (setup_.device_dust_phi) tile.dust.phi = setup_.device_dust_phi->local(d).data;
      if (storage_ == HistogramStorage::dense) windows_.set_on(tile, d);
      if (storage_ == HistogramStorage::sparse)
        shards[d.id] = IFUSIM_DISPATCH(d, sparse_histogram, d, ssp, bins, stars, tile, counts);
      else
        IFUSIM_DISPATCH(d, accumulate_histogram, d, ssp, bins, stars, tile, counts, sums_.local(d),
                        mesh.shares_memory(d));
    });
    if (storage_ == HistogramStorage::sparse) add_sparse(std::move(shards));
  }

  void reduce(RunState& state) override {
    Cube cube;
    cube.shape = setup_.shape;
    cube.unit = "Lsun/Angstrom";
    std::vector<double> light_moments(3 * cube.shape.n_spaxels(), 0.0);
    const std::int32_t n_spaxels = static_cast<std::int32_t>(cube.shape.n_spaxels());
    BinnedProductStats totals;
    // The gathers' and the later tiles' deposits' seconds, beside the product's (debug log).
    double gather_seconds = 0.0, deposit_seconds = 0.0;
    std::size_t n_tiles = 0;
    while (true) {
      auto clock = std::chrono::steady_clock::now();
      HostHistogram histogram = gather(state.mesh);
      gather_seconds += lap_seconds(clock);
      ++n_tiles;
      // The cube once the first tile is gathered (and freed): not held beside the tile.
      if (cube.data.empty()) cube.data = large_vector<float>(cube.shape.n_voxels());
      BinnedProductInput in;
      in.ssp = setup_.tables->host_view(setup_.outside);
      in.bins = setup_.bins;
      in.dust = setup_.dust_expansion.get();
      in.dust_segments = setup_.dust_segments.get();
      in.tile = tile_;
      in.band_first_bin = setup_.band_first_bin;
      in.band_end_bin = setup_.band_end_bin;
      in.basis_memory_bytes = basis_chunk_bytes(static_cast<std::size_t>(n_spaxels),
                                                static_cast<std::size_t>(setup_.bins.n));
      const std::size_t first = static_cast<std::size_t>(tile_.first_spaxel);
      // On a GPU mesh the voxels are summed on its first device (the reduced histogram is whole
      // on the host; logical devices share their GPU), the same bits as the host's product; on
      // the CPU backend the host's own (its vectorised loops are faster there).
      const Device& product_device = state.mesh.device(0);
      float* rows = cube.data.data() + first * setup_.bins.n;
      double* moments = light_moments.data() + 3 * first;
      const BinnedProductStats stats =
          product_device.is_cuda()
              ? binned_product_on_device(product_device, in, std::move(histogram), rows, moments)
              : binned_product(in, std::move(histogram), rows, moments);
      totals.populated_columns += stats.populated_columns;
      totals.nonzeros += stats.nonzeros;
      totals.dense_blocks += stats.dense_blocks;
      totals.sparse_blocks += stats.sparse_blocks;
      totals.seconds += stats.seconds;
      tile_.first_spaxel += tile_.n_spaxels;
      if (tile_.first_spaxel >= n_spaxels) break;
      tile_.n_spaxels = std::min(tile_spaxels_, n_spaxels - tile_.first_spaxel);
      // Each further tile is deposited from the stars again: the run holds them all.
      if (state.stars_are_a_block())
        throw std::logic_error("stellar_spectra: histogram tiles of a streamed galaxy");
      clock = std::chrono::steady_clock::now();
      deposit(state);
      deposit_seconds += lap_seconds(clock);
    }
    const ProductSeconds& seconds = totals.seconds;
    spdlog::debug(
        "binned spectra ({} histogram, {} tiles): {} velocity nodes, dust rank {}, {} populated "
        "columns, {} non-zeros, {} dense and {} sparse blocks; seconds: gather {:.3f}, later "
        "tiles' deposits {:.3f}, product {} (layout {:.3f}, B's rows {:.3f}, transfers {:.3f}, "
        "sums {:.3f})",
        storage_ == HistogramStorage::sparse ? "sparse" : "dense", n_tiles, tile_.velocity.n,
        tile_.dust.rank, totals.populated_columns, totals.nonzeros, totals.dense_blocks,
        totals.sparse_blocks, gather_seconds, deposit_seconds,
        state.mesh.device(0).is_cuda() ? "on the first GPU" : "on the host", seconds.layout,
        seconds.basis, seconds.transfer, seconds.sums);
    velocity_moment_maps(light_moments, "light", "light-weighted", "the stars", state.maps);
    add_to_cube(state, cube.shape, cube.unit, std::move(cube.data));
  }

  // The layout of the first tile (before reduce() moves on to the next), for the adjoint.
  const HistogramTile& first_tile() const { return tile_; }

  // Every element of H sums weights <= 1 times initial masses (the template ends' columns too,
  // EdgeWindow::flux_scale), times at most max |phi_r| with dust: a split-independent bound.
  FixedPointScale scale() const {
    const double dust =
        setup_.dust_expansion ? std::max(1.0, setup_.dust_expansion->max_abs_phi) : 1.0;
    return FixedPointScale::for_bound(setup_.n_stars * setup_.m_init_max * dust,
                                      "stellar_spectra: the histogram (stars.initial_mass_msun)");
  }

 private:
  struct Entry {  // one populated histogram element: its index and its fixed-point mass
    std::uint64_t index;
    std::int64_t sum;
  };

  // Every device's sorted entries, merged into the run's sorted entries, equal indices summed
  // (integers: exact, so the result depends neither on the split nor on the blocks).
  void add_sparse(std::vector<SparseHistogramShard> shards) {
    std::vector<Entry> added;
    std::size_t total = 0;
    for (const auto& shard : shards) total += shard.size;
    added.reserve(total);  // not grown by copies (the disc example: 3.9e6 entries, 63 MB)
    for (auto& shard : shards) {
      std::vector<std::uint64_t> keys(shard.size);
      std::vector<std::int64_t> values(shard.size);
      shard.keys.download(keys.data(), shard.size);
      shard.values.download(values.data(), shard.size);
      for (std::size_t e = 0; e < shard.size; ++e) added.push_back({keys[e], values[e]});
      shard = {};
    }
    if (shards.size() > 1)
      std::sort(added.begin(), added.end(),
                [](const Entry& a, const Entry& b) { return a.index < b.index; });
    entries_ = merge_entries(entries_, added);
  }

  // Two sorted entry lists as one, equal indices summed.
  static std::vector<Entry> merge_entries(const std::vector<Entry>& x,
                                          const std::vector<Entry>& y) {
    std::vector<Entry> merged;
    merged.reserve(x.size() + y.size());
    auto a = x.cbegin(), b = y.cbegin();
    while (a != x.cend() || b != y.cend()) {
      const std::uint64_t key =
          b == y.cend() || (a != x.cend() && a->index < b->index) ? a->index : b->index;
      std::int64_t sum = 0;
      for (; a != x.cend() && a->index == key; ++a) sum += a->sum;
      for (; b != y.cend() && b->index == key; ++b) sum += b->sum;
      if (sum != 0) merged.push_back({key, sum});
    }
    return merged;
  }

  // The current tile's rows in windows, and its extent: from its first spaxel as many whole row
  // blocks of the product as hold at most histogram_memory_gb of entries in their windows (at
  // least the tile of whole rows that fits). A spaxel's stars reach a few tens of the hundreds of
  // velocity nodes, so where whole rows needed several tiles, each a pass of the deposit over
  // every star, the windows need fewer (a smoothed MaNGA-32 run of 1e6 stars: one instead of
  // two). The windows are counted over at most as many rows as their counts' memory fits there.
  // The tiles' boundaries stay whole row blocks, which the product works in: the same cube.
  void fit_tile_to_windows(const RunState& state) {
    const auto n_spaxels = static_cast<std::int32_t>(setup_.shape.n_spaxels());
    const auto block = static_cast<std::int32_t>(kRowsPerBlock);
    const double budget_bytes = histogram_memory_gb_ * 1e9;
    const double count_row_bytes = static_cast<double>(tile_.velocity.n) * sizeof(std::int64_t);
    const auto counted = static_cast<std::int32_t>(std::max<double>(
        tile_spaxels_, block * std::floor(budget_bytes / count_row_bytes / block)));
    tile_.n_spaxels = std::min(counted, n_spaxels - tile_.first_spaxel);
    windows_ = row_windows(state.mesh, setup_, state.data.stars, tile_);
    std::int32_t rows = tile_.n_spaxels;
    if (static_cast<double>(windows_.start.back()) * sizeof(std::int64_t) > budget_bytes) {
      rows = std::min(tile_spaxels_, tile_.n_spaxels);
      for (std::int32_t more = rows + block; more <= tile_.n_spaxels; more += block) {
        if (static_cast<double>(windows_.start[static_cast<std::size_t>(more)]) *
                sizeof(std::int64_t) >
            budget_bytes)
          break;
        rows = more;
      }
    }
    if (rows < tile_.n_spaxels) {
      tile_.n_spaxels = rows;
      windows_ = windows_.first_rows(state.mesh, static_cast<std::size_t>(rows));
    }
  }

  // The reduced tile on the host, non-zeros only. Dense: psum, then a scan (each windowed
  // entry's place turned back into its row and column). Sparse: the merged entries.
  HostHistogram gather(const Mesh& mesh) {
    const double quantum = scale().quantum();
    HostHistogram out;
    if (storage_ == HistogramStorage::dense) {
      psum(mesh, sums_);
      // Room for every entry the tile holds, its non-zeros' count not known before the scan: only
      // the pages written become resident, where growing the lists as they fill allocated and
      // copied them over again (twice the final lists' pages touched: 0.8 GB for a smoothed
      // MaNGA-32 run's 25.7 million entries).
      out.index.reserve(windows_.entries(tile_));
      out.mass_msun.reserve(windows_.entries(tile_));
      for_each_nonzero_entry(
          sums_, tile_, windows_,
          [&](std::size_t row, std::size_t column, std::size_t, std::int64_t sum) {
            out.index.push_back(row * tile_.columns() + column);
            out.mass_msun.push_back(static_cast<double>(sum) * quantum);
          },
          setup_.dust_segments != nullptr);
      sums_ = {};
      windows_ = {};
      return out;
    }
    // A run across processes: every process's entries, merged in rank order on every process.
    entries_ = merge_over_processes(mesh, std::move(entries_),
                                    [](std::vector<Entry> merged, std::vector<Entry> theirs) {
                                      return merge_entries(merged, theirs);
                                    });
    out.index.reserve(entries_.size());
    out.mass_msun.reserve(entries_.size());
    for (const auto& [key, sum] : entries_) {
      out.index.push_back(key);
      out.mass_msun.push_back(static_cast<double>(sum) * quantum);
    }
    entries_ = {};
    return out;
  }

  SpectralSetup setup_;
  HistogramTile tile_;
  std::int32_t tile_spaxels_;  // the tile of whole rows that fits histogram_memory_gb
  HistogramStorage storage_;
  double histogram_memory_gb_;
  ShardedArray<std::int64_t> sums_;  // dense
  RowWindows windows_;               // dense, a held galaxy: the tile's row windows
  std::vector<Entry> entries_;       // sparse: sorted by index, summed over devices and blocks
};

// The entries of a psum'd tile of marks (MarkHistogramEntries) that some star makes, by rows.
TileEntries marked_entries(const ShardedArray<std::int64_t>& marks, const HistogramTile& tile,
                           const RowWindows& windows) {
  TileEntries out;
  out.offsets.assign(static_cast<std::size_t>(tile.n_spaxels) + 1, 0);
  for_each_nonzero_entry(marks, tile, windows,
                         [&](std::size_t row, std::size_t column, std::size_t place, std::int64_t) {
                           out.column.push_back(static_cast<std::uint32_t>(column));
                           out.place.push_back(place);
                           ++out.offsets[row + 1];
                         });
  for (std::size_t r = 0; r + 1 < out.offsets.size(); ++r) out.offsets[r + 1] += out.offsets[r];
  return out;
}

class StellarSpectraStage final : public Stage {
 public:
  StellarSpectraStage(std::shared_ptr<const SspGrid> grid, StellarSpectraParams params)
      : grid_(std::move(grid)), params_(params) {
    make_ssp_tables(*grid_);  // validates the grid before anything runs
  }
  std::string name() const override { return "stellar_spectra"; }
  std::vector<std::string> needs() const override {
    return {fields::stars_spaxel_index.full_name(),
            "stars.velocity_kms",
            "stars.initial_mass_msun",
            "stars.age_gyr",
            "stars.metallicity",
            "spaxels"};
  }
  std::vector<Provided> provides() const override {
    return {{"partial_cube", "Lsun/Angstrom", "the stars' light, added to the cube"},
            {"kinematics", "km/s",
             "velocity_{light,mass}_kms, dispersion_{light,mass}_kms: the stars' line-of-sight "
             "velocity moments per spaxel"}};
  }

  std::vector<MemoryItem> memory_estimate(const PlanContext& c) const override {
    constexpr std::size_t i64 = sizeof(std::int64_t), f32 = sizeof(float);
    const std::size_t moments = 3 * c.n_spaxels * i64;
    std::vector<MemoryItem> out{{"kinematic moments (int64)", 2 * moments, true, ""},
                                {"reduced cube (float, host)", c.n_voxels() * f32, false, ""}};
    if (params_.method == SpectralMethod::exact) {
      out.push_back(
          {"psum: the cube's double total (host)", c.n_voxels() * sizeof(double), false, ""});
      out.push_back({"partial cube (int64)", c.n_voxels() * i64, true,
                     "stages.stellar_spectra.method (\"binned\" holds no cube until psum)"});
      out.push_back({"psum: the cube's integer copy (host)", c.n_voxels() * i64, false, ""});
      return out;
    }
    HistogramTile tile;
    tile.n_nodes = c.n_ssp_nodes;
    tile.velocity = velocity_bins(kPlanVelocityKms, params_.velocity_bin_kms);
    tile.one_plus_z = 1.0 + c.observation.redshift;
    // The windows of the templates' ends, with the bins' edges taken as vacuum ones (in air a
    // window moves by a bin or two and keeps its length).
    set_edge_windows(tile, make_ssp_tables(*grid_), observed_bins(c.observation, c.n_wave));
    const bool dust = c.provided.count(fields::stars_dust_av.full_name()) > 0;
    if (dust) tile.dust.rank = kPlanDustRank;
    const double row_bytes = static_cast<double>(tile.columns() * i64);
    const auto n_spaxels = static_cast<std::int32_t>(c.n_spaxels);
    const std::string assumed =
        "assuming |v_los| <= " + std::to_string(int(kPlanVelocityKms)) + " km/s" +
        (dust ? ", a dust expansion of rank " + std::to_string(kPlanDustRank) : std::string());
    const bool streamed = c.n_block_stars < c.n_stars;
    const auto tile_rows = dense_tile_spaxels(params_.histogram_memory_gb, row_bytes, n_spaxels);
    // The smoothing lengths are not known before the stars are read: a footprint of one spaxel
    // (the run's choice, made with them, can only move a smoothed field from sparse to dense).
    const bool sparse = histogram_storage(params_, static_cast<double>(c.n_stars), 1.0, tile,
                                          row_bytes * n_spaxels) == HistogramStorage::sparse ||
                        (streamed && tile_rows < n_spaxels);
    if (sparse) {
      // The entries of the stars held, in the memory of the devices that own them (the largest
      // space's share); merged on the host, at most one per histogram element, twice while a
      // streamed block is merged in.
      const double rows =
          std::ceil(static_cast<double>(c.n_block_stars) / c.mesh->memory_owners().size());
      out.push_back({"sparse histogram entries (" + assumed + ")",
                     static_cast<std::size_t>(entries_per_star(tile) * rows * kSparseEntryBytes),
                     true, "stages.stellar_spectra.histogram"});
      const double merged = std::min(entries_per_star(tile) * static_cast<double>(c.n_stars),
                                     static_cast<double>(tile.columns()) * n_spaxels);
      out.push_back({"sparse histogram, merged (host)",
                     static_cast<std::size_t>(merged * 16.0 * (streamed ? 2.0 : 1.0)), false, ""});
    } else {
      out.push_back(
          {"dense histogram tile of " + std::to_string(tile_rows) + " spaxels (" + assumed + ")",
           static_cast<std::size_t>(tile_rows * row_bytes), true,
           "stages.stellar_spectra.histogram_memory_gb or velocity_bin_kms"});
      out.push_back({"histogram tile, reduced (host)",
                     static_cast<std::size_t>(tile_rows * row_bytes), false, ""});
      // The host's threads deposit by bands of rows (scatter_by_rows): the stars' lists, a
      // chunk of them on each device at once.
      if (!c.mesh->device(0).is_cuda())
        out.push_back({"dense deposit: the stars' lists by rows (host)",
                       std::min<std::size_t>(c.n_block_stars, kScatterChunk * c.mesh->size()) *
                           kScatterItemBytes,
                       true, ""});
    }
    const auto n_wave = static_cast<std::size_t>(c.n_wave);
    // A tile's rows of H: at most every entry the stars make, at most every element of the tile.
    const std::size_t rows = sparse ? c.n_spaxels : static_cast<std::size_t>(tile_rows);
    const auto nonzeros = static_cast<std::size_t>(
        std::min(entries_per_star(tile) * static_cast<double>(c.n_stars),
                 static_cast<double>(tile.columns()) * static_cast<double>(rows)));
    if (!c.mesh->device(0).is_cuda()) {
      // Each thread's chunk of B (binned_product.h), float.
      const std::size_t chunk = std::min<std::size_t>(basis_chunk_bytes(c.n_spaxels, n_wave),
                                                      tile.columns() * n_wave * sizeof(float));
      out.push_back({"basis B: each thread's chunk (host, at most)",
                     chunk * static_cast<std::size_t>(omp_get_max_threads()), false, ""});
      // The dense row blocks of H in float, held over all chunks: a block is dense where its
      // entries fill at least half of it (binned_product.cpp), so at most 2 floats an entry.
      out.push_back({"the product's dense blocks of H (float, host, at most)",
                     std::min(rows * tile.columns(), 2 * nonzeros) * sizeof(float), false, ""});
      return out;
    }
    // A GPU mesh sums the product's voxels on its first GPU (binned_product_on_device): a tile's
    // rows of H, B's span (every column populated, at most) and the tile's float cube rows; B's
    // span also in pinned host memory. Counted here for every GPU, an upper bound.
    const DeviceProductBytes product = device_product_bytes(
        rows, n_wave, nonzeros, std::min(tile.columns(), nonzeros),
        basis_chunk_bins(basis_chunk_bytes(c.n_spaxels, n_wave), tile.columns()), kDeviceBasisBytes,
        tile.dust.rank > 1);
    out.push_back({"binned product on the first GPU: the tile's cube rows (float)",
                   product.cube_rows, true, ""});
    out.push_back({"binned product on the first GPU: H's rows", product.h_rows, true, ""});
    out.push_back({"binned product on the first GPU: a span of basis B (float)", product.basis_span,
                   true, ""});
    out.push_back(
        {"basis B: the span sent to the GPU (pinned host)", product.basis_span, false, ""});
    return out;
  }

  // Reverse mode (docs/gradients.md, "Stars (binned engine)"): L's cube is H x B, so
  // dL/dH = G B^T over the entries the stars make (binned_product_transpose), and each star's
  // entries are m a(age, Z, v_los, A_V): dL/dm = sum a dL/dH, dL/d theta = m sum (da/d theta)
  // dL/dH, gathered star by star (for_each_histogram_entry_slopes). Tile by tile of spaxels, as
  // the dense histogram is held: the entries each tile's stars make are marked (a pass like the
  // deposit), their dL/dH made on the host, replicated, and gathered.
  bool particle_adjoint(RunState& state, const CubeCotangent& reduced,
                        ParticleGradients& gradients) override {
    if (params_.method != SpectralMethod::binned)
      throw ConfigError(
          "stages.stellar_spectra.method: gradients (issue 27) are made for the \"binned\" "
          "method only, not \"exact\"");
    if (!run_setup_.tables)
      throw std::logic_error("stellar_spectra: particle_adjoint before the stage's forward run");
    if (state.stars_are_a_block())
      throw std::invalid_argument(
          "stellar_spectra: gradients need the galaxy's stars held at once (a streamed galaxy's "
          "blocks are not supported)");
    SpectralSetup& setup = run_setup_;
    const CubeShape& shape = setup.shape;
    reduced.require_shape(shape, "stellar_spectra");
    // Where the adjoint's time goes (debug log, below).
    auto clock = std::chrono::steady_clock::now();
    const Mesh& mesh = state.mesh;
    const Stars& stars = state.data.stars;
    if (!binned_first_tile_)
      throw std::logic_error("stellar_spectra: particle_adjoint without the forward's histogram");
    HistogramTile tile = *binned_first_tile_;
    const std::size_t columns = tile.columns();
    const auto n_spaxels = static_cast<std::int32_t>(shape.n_spaxels());
    const std::size_t n_wave = static_cast<std::size_t>(shape.n_wave);
    // The marks (int64) and dL/dH (double) of a tile are each the size of its dense histogram:
    // tiles that fit histogram_memory_gb, whatever storage the forward run chose.
    const std::int32_t tile_spaxels = dense_tile_spaxels(
        params_.histogram_memory_gb, static_cast<double>(columns) * sizeof(double), n_spaxels);
    const std::size_t n_stars = stars.count();
    const bool dust = static_cast<bool>(setup.device_dust_phi);
    // Keyed by the fields the stage read; the velocity as the stage saw it (its z, the line of
    // sight), 3 components: orient's adjoint, where it ran, turns it back to the input's frame.
    auto field = [&](const std::string& name, std::size_t components) -> std::vector<double>& {
      return gradients.add_to(name, n_stars * components, "stellar_spectra");
    };
    std::vector<double>& mass = field("stars.initial_mass_msun", 1);
    std::vector<double>& age = field("stars.age_gyr", 1);
    std::vector<double>& metallicity = field("stars.metallicity", 1);
    std::vector<double>& velocity = field("stars.velocity_kms", 3);
    std::vector<double>* dust_av = dust ? &field(fields::stars_dust_av.full_name(), 1) : nullptr;
    // With kernel smoothing, the sky position (x, y of the frame the stage saw, z 0: the deposit
    // does not see the depth) through the footprint weights, the smoothing lengths held fixed;
    // without, the spaxel is piecewise constant in it and no gradient is made.
    const bool smoothed = static_cast<Smoothing>(setup.grid.smoothing) == Smoothing::kernel;
    std::vector<double>* position = smoothed ? &field("stars.position_kpc", 3) : nullptr;
    // cpu devices add straight into those host arrays (each its own stars); a GPU into its own
    // sums, downloaded and added at the end.
    bool any_cuda = false;
    for (std::size_t d = 0; d < mesh.size(); ++d) any_cuda = any_cuda || mesh.device(d).is_cuda();
    // Planes: mass, age, Z, v_los, then A_V with dust, then x and y with smoothing.
    const int x_plane = dust ? 5 : 4, n_sums = x_plane + (smoothed ? 2 : 0);
    ShardedArray<double> sums;
    if (any_cuda) {
      sums = ShardedArray<double>(mesh, n_stars, n_sums, Sharding::sharded());
      for (auto& shard : sums.shards()) shard.buffer.zero();
    }
    auto views = [&](const Device& d) {
      if (d.is_cuda())
        return StarGradientViews{sums.local(d, 0).data,
                                 sums.local(d, 1).data,
                                 sums.local(d, 2).data,
                                 sums.local(d, 3).data,
                                 1,
                                 dust ? sums.local(d, 4).data : nullptr,
                                 smoothed ? sums.local(d, x_plane).data : nullptr,
                                 smoothed ? sums.local(d, x_plane + 1).data : nullptr,
                                 1};
      const std::size_t first = stars.age_gyr.shard(d).range.begin;
      return StarGradientViews{mass.data() + first,
                               age.data() + first,
                               metallicity.data() + first,
                               velocity.data() + 3 * first + 2,
                               3,
                               dust ? dust_av->data() + first : nullptr,
                               smoothed ? position->data() + 3 * first : nullptr,
                               smoothed ? position->data() + 3 * first + 1 : nullptr,
                               3};
    };
    double mark_seconds = 0.0, gather_seconds = 0.0, window_seconds = 0.0;
    ProductSeconds transpose_seconds;
    const double setup_seconds = lap_seconds(clock);
    for (std::int32_t first = 0; first < n_spaxels; first += tile_spaxels) {
      tile.first_spaxel = first;
      tile.n_spaxels = std::min(tile_spaxels, n_spaxels - first);
      // The tile's entries lie in the rows' windows, as in the forward's dense histogram.
      const RowWindows windows = row_windows(mesh, setup, stars, tile);
      window_seconds += lap_seconds(clock);
      auto on_device = [&](const Device& d, auto&& kernel) {
        HistogramTile t = tile;
        if (dust) t.dust.phi = setup.device_dust_phi->local(d).data;
        windows.set_on(t, d);
        kernel(setup.device_tables->view(*setup.tables, setup.outside, d), setup.bins_on(d),
               star_views(stars, setup.grid, d), t);
      };
      // 1. The entries the stars make, by rows.
      ShardedArray<std::int64_t> marks(mesh, windows.entries(tile), 1, Sharding::partial());
      shard_map(mesh, [&](const Device& d) {
        on_device(d, [&](const SspView& ssp, const WaveBins& bins, const StarViews& sv,
                         const HistogramTile& t) {
          IFUSIM_DISPATCH(d, mark_histogram_entries, d, ssp, bins, sv, t, marks.local(d),
                          mesh.shares_memory(d));
        });
      });
      psum(mesh, marks);
      const TileEntries entries = marked_entries(marks, tile, windows);
      marks = {};
      mark_seconds += lap_seconds(clock);
      // 2. dL/dH over them, at their places in the windows.
      if (entries.column.empty()) continue;
      std::vector<double> dl_dh = large_vector<double>(windows.entries(tile), 0.0);
      BinnedProductInput in;
      in.ssp = setup.tables->host_view(setup.outside);
      in.bins = setup.bins;
      in.dust = setup.dust_expansion.get();
      in.dust_segments = setup.dust_segments.get();
      in.tile = tile;
      in.band_first_bin = setup.band_first_bin;
      in.band_end_bin = setup.band_end_bin;
      in.basis_memory_bytes = basis_chunk_bytes(static_cast<std::size_t>(n_spaxels), n_wave);
      // On a GPU mesh the dot products are made on its first device, as the forward's voxels
      // are (the entries and the cotangent are whole on the host), the same bits as the host's
      // transpose; on the CPU backend the host's own (its vectorised GEMM blocks are faster).
      const Device& product_device = mesh.device(0);
      const double* cotangent_rows =
          reduced.values().data() + static_cast<std::size_t>(first) * n_wave;
      transpose_seconds.layout += lap_seconds(clock);  // dL/dH's array
      transpose_seconds +=
          product_device.is_cuda()
              ? binned_product_transpose_on_device(product_device, in, entries, cotangent_rows,
                                                   dl_dh.data())
              : binned_product_transpose(in, entries, cotangent_rows, dl_dh.data());
      clock = std::chrono::steady_clock::now();
      // 3. Each star's sums, on its device: a GPU gets its copy of dL/dH; a cpu device reads the
      // host's (the same memory).
      ShardedArray<double> dl_dh_on;
      if (any_cuda) dl_dh_on = device_put(mesh, dl_dh, 1, Sharding::replicated());
      shard_map(mesh, [&](const Device& d) {
        const StarGradientViews out = views(d);
        const double* g = d.is_cuda() ? dl_dh_on.local(d).data : dl_dh.data();
        on_device(d, [&](const SspView& ssp, const WaveBins& bins, const StarViews& sv,
                         const HistogramTile& t) {
          IFUSIM_DISPATCH(d, gather_star_gradients, d, ssp, bins, sv, t, g, out);
        });
      });
      gather_seconds += lap_seconds(clock);
    }
    // 4. A GPU's sums, shard by shard, a component plane at a time.
    if (any_cuda) {
      std::vector<GradientPlane> planes = {
          {mass.data(), 1}, {age.data(), 1}, {metallicity.data(), 1}, {velocity.data() + 2, 3}};
      if (dust) planes.push_back({dust_av->data(), 1});
      if (smoothed) {
        planes.push_back({position->data(), 3});      // plane x_plane
        planes.push_back({position->data() + 1, 3});  // x_plane + 1
      }
      add_device_sums(sums, planes);
    }
    spdlog::debug(
        "stellar_spectra adjoint: seconds: the gradients' arrays {:.3f}, the rows' windows "
        "{:.3f}, marking the entries {:.3f}, dL/dH = G B^T {} (layout {:.3f}, B's rows {:.3f}, "
        "transfers {:.3f}, sums {:.3f}), the stars' sums {:.3f}, a GPU's sums to the host {:.3f}",
        setup_seconds, window_seconds, mark_seconds,
        mesh.device(0).is_cuda() ? "on the first GPU" : "on the host", transpose_seconds.layout,
        transpose_seconds.basis, transpose_seconds.transfer, transpose_seconds.sums, gather_seconds,
        lap_seconds(clock));
    return true;
  }

  void run(RunState& state) override {
    const Mesh& mesh = state.mesh;
    const Stars& stars = state.data.stars;
    // A streamed galaxy's first block declares the partials; every block adds to them.
    PartialArray* mass_moments = mass_moments_.get(state);
    const bool first_block = mass_moments == nullptr;
    if (first_block) run_setup_ = prepare(state);
    SpectralSetup& setup = run_setup_;
    const auto& tables = *setup.tables;

    if (params_.method == SpectralMethod::exact) {
      PartialArray* cube = cube_.get(state);
      PartialArray* light = light_moments_.get(state);
      if (first_block) {
        // A star adds at most m * max|f| / D_min to a voxel (D_min from the largest approaching
        // speed) and m * max energy to a light weight: split-independent bounds.
        const double d_min =
            (1.0 + setup.redshift) * std::max(1e-3, 1.0 - setup.speed_bound_kms / kSpeedOfLightKms);
        // A bin wider in vacuum than its step (air) takes that much more of a pixel's energy.
        const FixedPointScale cube_scale = FixedPointScale::for_bound(
            setup.n_stars * setup.m_init_max * tables.max_flux_density / d_min *
                setup.max_vacuum_width_ratio,
            "stellar_spectra: the partial cube (stars.initial_mass_msun, stars.velocity_kms)");
        const FixedPointScale light_scale = FixedPointScale::for_bound(
            setup.n_stars * setup.m_init_max * tables.max_energy,
            "stellar_spectra: the light weights (stars.initial_mass_msun)");
        cube = &cube_.declare(
            state, cube_partial(ShardedArray<std::int64_t>(mesh, setup.shape.n_voxels(), 1,
                                                           Sharding::partial()),
                                cube_scale, setup.shape, "Lsun/Angstrom"));
        light = &light_moments_.declare(
            state, moment_maps(ShardedArray<std::int64_t>(mesh, 3 * setup.shape.n_spaxels(), 1,
                                                          Sharding::partial()),
                               light_scale, "light", velocity_unit_kms(setup)));
      }
      shard_map(mesh, [&](const Device& d) {
        IFUSIM_DISPATCH(d, accumulate_stellar_spectra, d,
                        setup.device_tables->view(tables, params_.outside, d), setup.bins_on(d),
                        setup.redshift, setup.dust, star_views(stars, setup.grid, d),
                        cube->scale().counts_per_unit, cube->sums().local(d), setup.band_first_bin,
                        setup.band_end_bin, light->scale().counts_per_unit, light->sums().local(d),
                        velocity_unit_kms(setup));
      });
    } else {
      BinnedSpectra* binned =
          first_block ? &binned_.declare(state, binned_spectra(state, setup)) : binned_.get(state);
      if (first_block) binned_first_tile_ = binned->first_tile();
      binned->deposit(state);
    }

    if (first_block) {
      // Mass-weighted moments: every element is bounded by N * max m (add_moments).
      const FixedPointScale mass_scale = FixedPointScale::for_bound(
          setup.n_stars * setup.m_max,
          "stellar_spectra: the mass-weighted moments (stars.mass_msun, stars.velocity_kms)");
      mass_moments = &mass_moments_.declare(
          state, moment_maps(ShardedArray<std::int64_t>(mesh, 3 * setup.shape.n_spaxels(), 1,
                                                        Sharding::partial()),
                             mass_scale, "mass", velocity_unit_kms(setup)));
    }
    shard_map(mesh, [&](const Device& d) {
      IFUSIM_DISPATCH(d, accumulate_mass_moments, d, star_views(stars, setup.grid, d),
                      mass_moments->scale().counts_per_unit, mass_moments->sums().local(d),
                      velocity_unit_kms(setup));
    });
  }

 private:
  // The moments' velocity unit: every star's |v_los| is below the galaxy's speed bound.
  static double velocity_unit_kms(const SpectralSetup& setup) {
    return std::max(1.0, setup.speed_bound_kms);
  }

  // The binned method's layout: velocity nodes spanning the galaxy's speed bound, the dust
  // expansion over A_V up to the dust stage's bound (both split-independent), and the
  // histogram's storage and tiles. A streamed galaxy's histogram is one tile (its stars are seen
  // once): dense where that fits histogram_memory_gb, sparse otherwise.
  std::unique_ptr<BinnedSpectra> binned_spectra(const RunState& state, SpectralSetup& setup) const {
    const Stars& stars = state.data.stars;
    const SspTables& tables = *setup.tables;
    HistogramTile tile;
    tile.n_nodes = static_cast<int>(tables.log_age.size() * tables.log_z.size());
    tile.velocity = velocity_bins(setup.speed_bound_kms, params_.velocity_bin_kms);
    tile.one_plus_z = 1.0 + setup.redshift;
    set_edge_windows(tile, tables, setup.bins);
    if (stars.derived.find(fields::stars_dust_av)) {
      // Over the A_V of every star of the galaxy, whatever the block (the dust stage's bound),
      // and the rest wavelengths the basis rows reach (the observed band over the velocity
      // nodes' shifts).
      const VelocityBins& v = tile.velocity;
      const double d_lo = tile.one_plus_z * std::exp(v.u_min);
      const double d_hi = tile.one_plus_z * std::exp(v.u_min + (v.n - 1) * v.du);
      setup.dust_expansion = std::make_shared<const DustExpansion>(
          make_dust_expansion(setup.dust, setup.dust_av_bound_mag, setup.bins.vacuum_edge(0) / d_hi,
                              setup.bins.vacuum_edge(setup.bins.n) / d_lo));
      setup.device_dust_phi = std::make_shared<const ShardedArray<double>>(
          device_put(state.mesh, setup.dust_expansion->phi, 1, Sharding::replicated()));
      tile.dust = setup.dust_expansion->view(nullptr);  // each device's table at its deposit
      if (tile.dust.rank > 1)
        setup.dust_segments = std::make_shared<const DustSegments>(
            make_dust_segments(*setup.dust_expansion, setup.bins, tile));
      spdlog::info(
          "stellar_spectra: dust as {} separable terms for A_V <= {:.3g} mag (off by at most "
          "{:.1e} of a star's least attenuated light), at most {} over each {} bins (off by at "
          "most {:.1e} more)",
          tile.dust.rank, setup.dust_av_bound_mag, setup.dust_expansion->max_error,
          setup.dust_segments ? setup.dust_segments->max_terms : tile.dust.rank, kDustSegmentBins,
          setup.dust_segments ? setup.dust_segments->max_error : 0.0);
    }
    // Sparse where the stars' entries (times their mean footprint with smoothing) take less
    // memory than the dense field (few stars on many spaxels); dense otherwise, in tiles of whole
    // row blocks of the product that fit histogram_memory_gb.
    const auto n_spaxels = static_cast<std::int32_t>(setup.shape.n_spaxels());
    const double row_bytes = static_cast<double>(tile.columns()) * sizeof(std::int64_t);
    const double footprint = mean_footprint_spaxels(stars, setup.grid);
    HistogramStorage storage =
        histogram_storage(params_, setup.n_stars, footprint, tile, row_bytes * n_spaxels);
    auto tile_spaxels = storage == HistogramStorage::sparse
                            ? n_spaxels
                            : dense_tile_spaxels(params_.histogram_memory_gb, row_bytes, n_spaxels);
    if (state.stars_are_a_block() && tile_spaxels < n_spaxels) {
      if (params_.histogram == HistogramStorage::dense)
        throw ConfigError(
            "stages.stellar_spectra.histogram: \"dense\" needs the whole histogram at once for a "
            "streamed galaxy (" +
            std::to_string(row_bytes * n_spaxels / 1e9) +
            " GB, more than histogram_memory_gb): give \"sparse\" or \"auto\", or raise "
            "histogram_memory_gb");
      storage = HistogramStorage::sparse;
      tile_spaxels = n_spaxels;
    }
    tile.first_spaxel = 0;
    tile.n_spaxels = tile_spaxels;
    return std::make_unique<BinnedSpectra>(setup, tile, tile_spaxels, storage,
                                           params_.histogram_memory_gb);
  }

  SpectralSetup prepare(RunState& state) const {
    const Mesh& mesh = state.mesh;
    const Observation& obs = state.observation;
    SpectralSetup s;
    s.tables = std::make_shared<const SspTables>(make_ssp_tables(*grid_));
    s.device_tables = std::make_shared<const DeviceTables>(mesh, *s.tables);
    s.outside = params_.outside;
    s.bins = observed_bins(obs, state.spaxels.n_wave);
    if (s.bins.n <= 0 || !(s.bins.width(0) > 0))
      throw std::logic_error("stellar_spectra: the observation has no wavelength grid");
    if (s.bins.is_log()) {
      std::vector<double> edges(static_cast<std::size_t>(s.bins.n) + 1);
      for (int k = 0; k <= s.bins.n; ++k) edges[static_cast<std::size_t>(k)] = s.bins.edge(k);
      s.bin_edges = std::make_shared<const std::vector<double>>(std::move(edges));
      s.bins.edges = s.bin_edges->data();
      s.device_bin_edges = std::make_shared<const ShardedArray<double>>(
          device_put(mesh, *s.bin_edges, 1, Sharding::replicated()));
    }
    const std::string& medium = obs.axes.wavelength_medium;
    s.bin_vacuum_edges =
        std::make_shared<const std::vector<double>>(bin_vacuum_edges(s.bins, medium));
    if (!s.bin_vacuum_edges->empty()) {
      s.bins.vacuum_edges = s.bin_vacuum_edges->data();
      s.device_bin_vacuum_edges = std::make_shared<const ShardedArray<double>>(
          device_put(mesh, *s.bin_vacuum_edges, 1, Sharding::replicated()));
      for (int k = 0; k < s.bins.n; ++k)
        s.max_vacuum_width_ratio =
            std::max(s.max_vacuum_width_ratio,
                     (s.bins.vacuum_edge(k + 1) - s.bins.vacuum_edge(k)) / s.bins.width(k));
    }
    s.redshift = obs.redshift;
    s.shape = {state.spaxels.nx, state.spaxels.ny, s.bins.n};
    s.grid = state.products.get<SpaxelGrid>("spaxels");
    if (const auto* dust = state.products.find<DustAttenuation>("dust_attenuation")) {
      s.dust = dust->curve;
      s.dust_av_bound_mag = dust->av_bound_mag;
    }
    // Templates that do not reach the band's ends (after the shift) leave those bins dark.
    const auto& t = *s.tables;
    const double reach_lo = t.edges.front() * (1.0 + obs.redshift);
    const double reach_hi = t.edges.back() * (1.0 + obs.redshift);
    if (reach_lo > s.bins.vacuum_edge(0) || reach_hi < s.bins.vacuum_edge(s.bins.n))
      spdlog::warn(
          "stellar_spectra: the templates ({:.1f}-{:.1f} A at rest, vacuum) cover {:.1f}-{:.1f} A "
          "({}) at z = {}, not all of the telescope's {:.1f}-{:.1f} A: the rest of the cube stays "
          "dark",
          t.edges.front(), t.edges.back(), convert_wavelength(reach_lo, "vacuum", medium),
          convert_wavelength(reach_hi, "vacuum", medium), medium, obs.redshift, s.bins.first_edge(),
          s.bins.edge(s.bins.n));
    // The light weights' band, as whole bins: by default the telescope's, without the margin.
    s.band_first_bin = obs.margin.wavelengths;
    s.band_end_bin = s.bins.n - obs.margin.wavelengths;
    if (params_.band_hi_angstrom > 0) {
      s.band_first_bin = s.bins.bin_of(params_.band_lo_angstrom);
      s.band_end_bin = s.bins.bin_of(params_.band_hi_angstrom);
      if (s.band_end_bin <= s.band_first_bin)
        throw ConfigError("stages.stellar_spectra.kinematics_band_angstrom: the band [" +
                          std::to_string(params_.band_lo_angstrom) + ", " +
                          std::to_string(params_.band_hi_angstrom) +
                          "] A does not overlap the telescope's wavelength range");
    }
    const StarBounds& bounds = state.star_bounds();
    s.n_stars = static_cast<double>(bounds.count);
    s.m_init_max = bounds.max_initial_mass_msun;
    s.m_max = bounds.max_mass_msun;
    s.speed_bound_kms = bounds.speed_bound_kms();
    return s;
  }

  std::shared_ptr<const SspGrid> grid_;
  StellarSpectraParams params_;
  // The run's set-up, made on its first block (the tables on the devices, the bins, the bounds;
  // nothing that depends on the stars held): a streamed galaxy's later blocks reuse it.
  SpectralSetup run_setup_;
  // The partials the first block declares and every block adds to, until the reduction.
  PartialHandle<PartialArray> cube_;           // exact: the cube
  PartialHandle<PartialArray> light_moments_;  // exact: the light-weighted moments
  PartialHandle<BinnedSpectra> binned_;        // binned: the histogram (cube and light moments)
  // binned: its first tile as made (velocity nodes, dust terms, storage), for the adjoint (making
  // it again would make the dust's expansion again too: a tenth of a second with dust).
  std::optional<HistogramTile> binned_first_tile_;
  PartialHandle<PartialArray> mass_moments_;
};

}  // namespace

std::unique_ptr<Stage> make_stellar_spectra_stage(std::shared_ptr<const SspGrid> grid,
                                                  StellarSpectraParams params) {
  return std::make_unique<StellarSpectraStage>(std::move(grid), params);
}

StageEntry stellar_spectra_stage() {
  return {
      .name = "stellar_spectra",
      .summary = "fused SSP interpolation, Doppler shift and resampling into the cube",
      .kind = StageKind::particle,
      .make =
          [](const nlohmann::json& params, const std::string& path,
             const StageResources& resources) {
            // The parameters first: their schema is recorded without a library (ifusim stages).
            const StellarSpectraParams p =
                StellarSpectraParams::from_json(JsonParams(params, path));
            if (!resources.ssp)
              throw ConfigError(path + ": stellar_spectra needs an SSP template library");
            return make_stellar_spectra_stage(resources.ssp, p);
          },
      .inherits = {{"interpolation", "ssp.interpolation"}, {"outside_grid", "ssp.outside_grid"}},
      .quicklooks = {{"velocity.png",
                      {{"velocity_light_kms", "Line-of-sight velocity (light-weighted)"},
                       {"velocity_mass_kms", "Line-of-sight velocity (mass-weighted)"}},
                      true,
                      false},
                     {"dispersion.png",
                      {{"dispersion_light_kms", "Velocity dispersion (light-weighted)"},
                       {"dispersion_mass_kms", "Velocity dispersion (mass-weighted)"}},
                      false,
                      false}},
      .examples = {{{"kinematics_band_angstrom", {5000.0, 6000.0}}}}};
}

std::vector<double> reference_stellar_cube(
    const SspGrid& grid, OutsideGrid outside, const std::string& medium, double redshift,
    const WaveBins& bins, std::size_t n_spaxels, const std::vector<float>& velocity_los_kms,
    const std::vector<float>& initial_mass_msun, const std::vector<float>& age_gyr,
    const std::vector<float>& metallicity, const std::vector<std::int32_t>& spaxel_index) {
  check_grid(grid);
  const std::size_t n_wave = grid.n_wave(), n_z = grid.n_metallicity();
  const std::vector<double> rest_edges = vacuum_rest_edges(grid);
  const std::vector<double> own_edges = edges_from_centres(grid.wavelength_angstrom);
  std::vector<double> cube(n_spaxels * static_cast<std::size_t>(bins.n), 0.0);
  // Linear interpolation weight of x in an ascending axis (in log10), clamped at the ends.
  auto locate = [](const std::vector<double>& axis, double x, std::size_t& lo, double& t,
                   bool& out) {
    std::vector<double> logs;
    for (double a : axis) logs.push_back(std::log10(a));
    const double lx = std::log10(std::max(x, 1e-12));
    if (lx < logs.front() || lx > logs.back()) out = true;
    if (axis.size() == 1 || lx <= logs.front()) {
      lo = 0;
      t = 0;
      return;
    }
    if (lx >= logs.back()) {
      lo = axis.size() - 2;
      t = 1;
      return;
    }
    lo = 0;
    while (logs[lo + 1] <= lx) ++lo;
    t = (lx - logs[lo]) / (logs[lo + 1] - logs[lo]);
  };
  std::vector<double> spectrum(n_wave);
  for (std::size_t i = 0; i < spaxel_index.size(); ++i) {
    if (spaxel_index[i] < 0) continue;
    std::size_t ia = 0, iz = 0;
    double ta = 0, tz = 0;
    bool out = false;
    locate(grid.age_gyr, age_gyr[i], ia, ta, out);
    locate(grid.metallicity, metallicity[i], iz, tz, out);
    if (out && outside == OutsideGrid::zero) continue;
    const std::size_t ia1 = std::min(ia + 1, grid.n_age() - 1), iz1 = std::min(iz + 1, n_z - 1);
    // 1. The star's rest-frame spectrum: bilinear in (log age, log Z), times initial mass.
    for (std::size_t j = 0; j < n_wave; ++j)
      spectrum[j] = initial_mass_msun[i] * ((1 - ta) * (1 - tz) * grid.spectrum(ia, iz)[j] +
                                            (1 - ta) * tz * grid.spectrum(ia, iz1)[j] +
                                            ta * (1 - tz) * grid.spectrum(ia1, iz)[j] +
                                            ta * tz * grid.spectrum(ia1, iz1)[j]);
    // 2. Shift every (vacuum) pixel edge and convert it to the bins' medium at the observed
    // wavelength, the other way round from the kernels (which convert the bins' edges to
    // vacuum); 3. share each pixel's energy among the bins it overlaps.
    const double doppler = (1 + redshift) * (1 + velocity_los_kms[i] / kSpeedOfLightKms);
    double* out_spectrum = cube.data() + static_cast<std::size_t>(spaxel_index[i]) * bins.n;
    for (std::size_t j = 0; j < n_wave; ++j) {
      const double a = convert_wavelength(rest_edges[j] * doppler, "vacuum", medium);
      const double b = convert_wavelength(rest_edges[j + 1] * doppler, "vacuum", medium);
      if (!(b > a)) continue;  // a pixel folded by the conversion at 2000 A: no bin to share
      const double energy = spectrum[j] * (own_edges[j + 1] - own_edges[j]);
      // Only the bins [a, b] can reach (a margin of one bin on each side).
      if (bins.is_log()) {
        // Logarithmic bins: edges from the grid's own formula (data/wavelength_axis.h).
        const int k_begin = std::max(0, bins.bin_of(a) - 1);
        const int k_end = std::min(bins.n, bins.bin_of(b) + 2);
        for (int k = k_begin; k < k_end; ++k) {
          const double lo = bins.edge(k), hi = bins.edge(k + 1);
          const double overlap = std::min(b, hi) - std::max(a, lo);
          if (overlap > 0) out_spectrum[k] += energy * overlap / (b - a) / (hi - lo);
        }
        continue;
      }
      const double first_edge = bins.start_angstrom - 0.5 * bins.step_angstrom;
      const int k_begin =
          std::max(0, static_cast<int>(std::floor((a - first_edge) / bins.step_angstrom)) - 1);
      const int k_end =
          std::min(bins.n, static_cast<int>(std::floor((b - first_edge) / bins.step_angstrom)) + 2);
      for (int k = k_begin; k < k_end; ++k) {
        const double lo = bins.start_angstrom + (k - 0.5) * bins.step_angstrom;
        const double hi = lo + bins.step_angstrom;
        const double overlap = std::min(b, hi) - std::max(a, lo);
        if (overlap > 0) out_spectrum[k] += energy * overlap / (b - a) / bins.step_angstrom;
      }
    }
  }
  return cube;
}

}  // namespace ifusim
