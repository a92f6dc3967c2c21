// Eigen runs single-threaded inside each block: the blocks are spread over OpenMP threads here,
// and a GEMM whose blocking depended on the thread count would not be reproducible.
#define EIGEN_DONT_PARALLELIZE
#include "stages/stellar_spectra/binned_product.h"

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "data/runtime.h"
#include "stages/common/vector_kernels.h"

namespace ifusim {
namespace {

// B and the dense tiles of H are float, and so are the sums: the product is the run's cost, and a
// float vector holds twice a double one's lanes (and B takes half the memory). A dense block sums
// in float over its columns, a sparse one in float over groups of its entries added in double
// (add_scaled_rows): the float rounding (relative 6e-8 a term, random in sign over a row's
// columns) stays far below the binned method's targets (bench_binned [1], [5], [6]: total light
// 1e-6, median 1e-3). Light weights (the columns' band energies and the moments) stay double.
using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A block takes the dense product when at least this fraction of its (rows x columns) is filled.
// With the sparse blocks' sums in float (add_scaled_rows), an entry of a sparse block costs about
// what a cell of a dense one does: on the 2-core VM a dusty MaNGA-32 run's sums (`calc_ifu_gas`,
// bench/realistic_runs.sh, nearly every block between 0.25 and 0.5 full) took 1.06 s with this
// 0.5 and about 1.8 s with every block dense; its smoothed run's blocks are all fuller than 0.5.
constexpr double kDenseFill = 0.5;
// The transpose's dense blocks. Its sparse blocks take each row of B once against the cotangent
// rows of its entries, four at a time (dots_with_row), nearly as fast a flop as the dense blocks'
// tiles, which also sum the (rows x columns) the entries leave empty; both give the same bits. On a
// dusty run (bench_vjp_entry --stars 100000 --gas 10000 --dust 1, 2 cores) the sums took 1.22 s
// at a fill of 0.1, 0.67 s at 0.25, 0.59 s at 0.5 and 0.57 s with no dense block; MUSE at 1e6
// stars 0.18, 0.14, 0.12 and 0.12 s.
constexpr double kTransposeDenseFill = 0.5;

// The rows of a tile's entries in blocks of kRowsPerBlock (offsets: each row's first entry, and
// the end): each block's columns (ascending, column_of(entry) for its entries), whether it takes
// the dense product (at least 16 columns, and its entries at least dense_fill of rows x
// columns), and, in a dense block, each entry's place among its columns, found once rather than
// searched again for every chunk of bins (with kernel smoothing those searches were most of the
// product's time). The forward product and its transpose share it, each with its own fill.
struct RowBlocks {
  std::vector<std::vector<std::int32_t>> columns;
  std::vector<char> dense;
  // Meaningful in dense blocks only; with dust segments, each group's place among the block's
  // groups, at its first term's entry (product_layout).
  std::vector<std::int32_t> entry_place;
};

// Columns are indices below n_columns. Each thread marks the columns it has met in a block (a
// table over the columns, cleared after the block), so that only the block's distinct columns are
// sorted, not one per entry, and each entry's place is looked up, not searched.
template <class ColumnOf>
RowBlocks row_blocks(std::size_t n_rows, const std::vector<std::size_t>& offsets,
                     std::size_t n_columns, ColumnOf&& column_of, double dense_fill) {
  const std::size_t n_blocks = (n_rows + kRowsPerBlock - 1) / kRowsPerBlock;
  RowBlocks blocks;
  blocks.columns.resize(n_blocks);
  blocks.dense.assign(n_blocks, 0);
  blocks.entry_place.assign(offsets[n_rows], 0);
#pragma omp parallel
  {
    std::vector<std::int32_t> place(n_columns, -1);  // in the block being made; -1: not in it
#pragma omp for schedule(dynamic, 1)
    for (std::size_t b = 0; b < n_blocks; ++b) {
      const std::size_t r0 = b * kRowsPerBlock, r1 = std::min(n_rows, r0 + kRowsPerBlock);
      std::vector<std::int32_t>& columns = blocks.columns[b];
      for (std::size_t e = offsets[r0]; e < offsets[r1]; ++e) {
        const std::int32_t c = column_of(e);
        if (place[static_cast<std::size_t>(c)] < 0) {
          place[static_cast<std::size_t>(c)] = 0;
          columns.push_back(c);
        }
      }
      std::sort(columns.begin(), columns.end());
      columns.shrink_to_fit();
      for (std::size_t q = 0; q < columns.size(); ++q)
        place[static_cast<std::size_t>(columns[q])] = static_cast<std::int32_t>(q);
      const std::size_t nnz = offsets[r1] - offsets[r0], cols = columns.size();
      blocks.dense[b] = cols >= 16 && static_cast<double>(nnz) >=
                                          dense_fill * static_cast<double>((r1 - r0) * cols);
      if (blocks.dense[b])
        for (std::size_t e = offsets[r0]; e < offsets[r1]; ++e)
          blocks.entry_place[e] = place[static_cast<std::size_t>(column_of(e))];
      for (const std::int32_t c : columns) place[static_cast<std::size_t>(c)] = -1;
    }
  }
  return blocks;
}

// H over the populated columns, row by row (compressed sparse rows).
struct SparseRows {
  std::vector<std::size_t> offsets;  // n_rows + 1
  std::vector<std::int32_t> column;  // index into the populated columns
  std::vector<double> value;
};

// H's rows for dust segments: every group of `rank` columns (a spectrum's or an end's dust terms,
// HistogramTile) that a row meets made whole in that row, a zero entry for each term it lacks (a
// term whose fixed-point sum was 0), since a segment mixes a group's terms together; and each
// row's groups held term by term: entry (group g, term t) of a row of G groups at t * G + g from
// the row's start, its column and value together (SegmentTerms mixes a term's plane in one vector
// loop). Every other use of H's rows takes its entries in any order (the columns' sets, each
// entry's place, the light moments). In place where every group is whole (most runs), each row
// through a copy of its own.
void whole_groups_by_term(SparseRows& h, std::size_t n_rows, std::size_t rank) {
  std::vector<std::size_t> offsets(n_rows + 1, 0);
#pragma omp parallel for schedule(dynamic, 256)
  for (std::size_t r = 0; r < n_rows; ++r) {
    std::size_t groups = 0, last = static_cast<std::size_t>(-1);
    for (std::size_t e = h.offsets[r]; e < h.offsets[r + 1]; ++e) {
      const std::size_t group = static_cast<std::size_t>(h.column[e]) / rank;
      groups += group != last;
      last = group;
    }
    offsets[r + 1] = groups * rank;
  }
  for (std::size_t r = 0; r < n_rows; ++r) offsets[r + 1] += offsets[r];
  const bool in_place = offsets[n_rows] == h.offsets[n_rows];
  SparseRows out;
  if (!in_place) {
    out.column.resize(offsets[n_rows]);
    out.value.resize(offsets[n_rows]);
  }
  std::int32_t* column_out = in_place ? h.column.data() : out.column.data();
  double* value_out = in_place ? h.value.data() : out.value.data();
#pragma omp parallel
  {
    std::vector<std::int32_t> column, first;
    std::vector<double> value;
#pragma omp for schedule(dynamic, 256)
    for (std::size_t r = 0; r < n_rows; ++r) {
      const std::size_t e0 = h.offsets[r], n = h.offsets[r + 1] - e0, o0 = offsets[r];
      const std::size_t n_groups = (offsets[r + 1] - o0) / rank;
      column.assign(h.column.begin() + static_cast<std::ptrdiff_t>(e0),
                    h.column.begin() + static_cast<std::ptrdiff_t>(e0 + n));
      value.assign(h.value.begin() + static_cast<std::ptrdiff_t>(e0),
                   h.value.begin() + static_cast<std::ptrdiff_t>(e0 + n));
      std::fill(value_out + o0, value_out + o0 + n_groups * rank, 0.0);
      first.clear();
      for (std::size_t i = 0; i < n; ++i) {
        const auto group_first =
            static_cast<std::int32_t>(static_cast<std::size_t>(column[i]) / rank * rank);
        if (first.empty() || first.back() != group_first) first.push_back(group_first);
        const auto t = static_cast<std::size_t>(column[i] - group_first);
        value_out[o0 + t * n_groups + first.size() - 1] = value[i];
      }
      for (std::size_t t = 0; t < rank; ++t)
        for (std::size_t g = 0; g < n_groups; ++g)
          column_out[o0 + t * n_groups + g] = first[g] + static_cast<std::int32_t>(t);
    }
  }
  if (in_place) return;
  out.offsets = std::move(offsets);
  h = std::move(out);
}

// The Doppler factor (1 + z) exp(u) of a velocity node.
double node_doppler(const HistogramTile& tile, int velocity_node) {
  return tile.one_plus_z * std::exp(tile.velocity.u_min + velocity_node * tile.velocity.du);
}

// Bins [k0, k1) of the observed axis, once per chunk: their vacuum edges, widths (in the
// telescope's medium) and vacuum centres, from WaveBins' own functions (the same values), so
// that each basis row reads them instead of making them again (a log grid's edge is a pow: three
// of them a bin, every populated column, were a third of a MILES product's time). With dust,
// also each velocity node's dust factors psi_r over the bins: they depend on the node, the term
// and the bin, not on the SSP node, and making them row by row (the curve's polynomial and the
// psi table, every SSP node again) was 12% of a dusty MaNGA run.
// Which dust factors a chunk's rows take (BinnedProductInput::dust_segments): term r's psi~_r
// (its segment's projected factor: basis_row and the transpose, the reduced product's rows of B
// in the histogram's terms), or, in the forward product over one segment, reduced term q's
// chi_q. Without segments both are psi_r.
enum class TermFactors { projected, reduced };

// The dust factors of every term at attenuation ratio k in bin `bin`, out[0, rank) (a reduced
// segment's terms beyond its own are 0).
void term_factors(const BinnedProductInput& in, TermFactors factors, int bin, double k,
                  double* out) {
  const int rank = in.dust->rank;
  for (int r = 0; r < rank; ++r) out[r] = in.dust->psi_at(k, r);
  if (!in.dust_segments) return;
  const DustSegment& segment = in.dust_segments->of_bin(bin);
  const bool reduced = factors == TermFactors::reduced;
  const std::vector<double>& m = reduced ? segment.mix : segment.project;
  double psi[kMaxDustRank];
  std::copy(out, out + rank, psi);
  for (int t = 0; t < rank; ++t) {
    double f = 0.0;
    if (!reduced || t < segment.terms)
      for (int r = 0; r < rank; ++r) f += m[static_cast<std::size_t>(t) * rank + r] * psi[r];
    out[t] = f;
  }
}

struct ChunkAxis {
  int k0 = 0, k1 = 0;
  std::vector<double> edges, widths, centres;  // k1 - k0 + 1 edges, k1 - k0 widths and centres
  TermFactors factors = TermFactors::projected;
  int rank = 1;
  std::vector<double> dust;  // ((velocity node, term), bin): psi at the bin's rest centre
  // Each velocity node's template pixel and fraction at the chunk's edges over its shift, for
  // the nodes the rows to be made use (slot[v] >= 0): the same for every SSP node's row, so
  // located once, not once for each (MILES' 636 nodes). Edge k0 + i of node v at
  // slot[v] * (k1 - k0 + 1) + i.
  std::vector<int> slot, pixel;
  std::vector<double> fraction;
  // `columns`: the columns whose rows the chunk will make (a chunk's many rows), whose velocity
  // nodes' edges are located here, and with dust every velocity node's factors made; none (one
  // row, basis_row): each row locates its own edges and makes its own factors.
  ChunkAxis(const BinnedProductInput& in, int first, int end,
            const std::vector<std::size_t>* columns = nullptr,
            TermFactors kind = TermFactors::projected)
      : k0(first), k1(end), factors(kind) {
    const WaveBins& bins = in.bins;
    const auto n = static_cast<std::size_t>(k1 - k0);
    edges.resize(n + 1);
    widths.resize(n);
    centres.resize(n);
    for (int k = k0; k <= k1; ++k) edges[static_cast<std::size_t>(k - k0)] = bins.vacuum_edge(k);
    for (int k = k0; k < k1; ++k) {
      widths[static_cast<std::size_t>(k - k0)] = bins.width(k);
      centres[static_cast<std::size_t>(k - k0)] = bins.vacuum_centre(k);
    }
    if (!columns) return;
    locate_edges(in, *columns);
    if (!in.dust) return;
    rank = in.dust->rank;
    const int n_velocity = in.tile.velocity.n;
    dust.resize(static_cast<std::size_t>(n_velocity) * static_cast<std::size_t>(rank) * n);
    for (int v = 0; v < n_velocity; ++v) {
      if (slot[static_cast<std::size_t>(v)] < 0) continue;  // no row of this chunk's uses it
      const double doppler = node_doppler(in.tile, v);
      for (std::size_t i = 0; i < n; ++i) {
        const double k = attenuation_ratio(in.dust->curve, centres[i] / doppler);
        double f[kMaxDustRank];
        term_factors(in, factors, k0 + static_cast<int>(i), k, f);
        for (int r = 0; r < rank; ++r)
          dust[(static_cast<std::size_t>(v) * rank + r) * n + i] = f[r];
      }
    }
  }
  void locate_edges(const BinnedProductInput& in, const std::vector<std::size_t>& columns) {
    const HistogramTile& tile = in.tile;
    const auto n_a = static_cast<std::size_t>(tile.dust.rank);
    slot.assign(static_cast<std::size_t>(tile.velocity.n), -1);
    int n_used = 0;
    for (const std::size_t c : columns)
      if (c < tile.spectrum_columns()) {
        int& s = slot[c / n_a % static_cast<std::size_t>(tile.velocity.n)];
        if (s < 0) s = n_used++;
      }
    const auto n_edges = static_cast<std::size_t>(k1 - k0 + 1);
    pixel.resize(static_cast<std::size_t>(n_used) * n_edges);
    fraction.resize(pixel.size());
    for (int v = 0; v < tile.velocity.n; ++v) {
      if (slot[static_cast<std::size_t>(v)] < 0) continue;
      const std::size_t at = static_cast<std::size_t>(slot[static_cast<std::size_t>(v)]) * n_edges;
      const double doppler = node_doppler(tile, v);
      int j = 0;
      double f = 0.0;
      locate(in.ssp, vacuum_edge(k0) / doppler, j, f);
      pixel[at] = j;
      fraction[at] = f;
      for (int k = k0; k < k1; ++k) {
        locate_after(in.ssp, vacuum_edge(k + 1) / doppler, j, f);
        pixel[at + static_cast<std::size_t>(k + 1 - k0)] = j;
        fraction[at + static_cast<std::size_t>(k + 1 - k0)] = f;
      }
    }
  }
  double vacuum_edge(int k) const { return edges[static_cast<std::size_t>(k - k0)]; }
  double width(int k) const { return widths[static_cast<std::size_t>(k - k0)]; }
  double vacuum_centre(int k) const { return centres[static_cast<std::size_t>(k - k0)]; }
};

// The dust term's factor psi_r of bin k, at its centre's rest wavelength for a shift D (1
// without dust).
double dust_factor(const BinnedProductInput& in, const ChunkAxis& axis, int term, int k,
                   double doppler) {
  if (!in.dust) return 1.0;
  double f[kMaxDustRank];
  term_factors(in, axis.factors, k,
               attenuation_ratio(in.dust->curve, axis.vacuum_centre(k) / doppler), f);
  return f[term];
}

// The same at a velocity node's shift D = node_doppler(velocity_node): the chunk's table where
// it has one (the same values).
double node_dust_factor(const BinnedProductInput& in, const ChunkAxis& axis, int velocity_node,
                        int term, int k, double doppler) {
  if (axis.dust.empty()) return dust_factor(in, axis, term, k, doppler);
  return axis
      .dust[(static_cast<std::size_t>(velocity_node) * axis.rank + term) * axis.widths.size() +
            static_cast<std::size_t>(k - axis.k0)];
}

// The bins of the axis of node `node`'s template at a velocity node, before dust: its energy in
// each bin over the bin's width, not continued beyond its ends. A dusty run's `rank` rows of one
// (node, velocity node) share it (consecutive populated columns), so it is made once for them.
struct SpectrumBase {
  std::size_t spectrum = static_cast<std::size_t>(-1);  // column / rank of the row it holds
  std::vector<double> values;
};

void spectrum_base(const BinnedProductInput& in, const ChunkAxis& axis, int node, int velocity_node,
                   double* out) {
  const int k0 = axis.k0, k1 = axis.k1;
  if (!axis.slot.empty()) {  // the chunk's located edges
    const std::size_t at =
        static_cast<std::size_t>(axis.slot[static_cast<std::size_t>(velocity_node)]) *
        static_cast<std::size_t>(k1 - k0 + 1);
    const int* j = axis.pixel.data() + at;
    const double* f = axis.fraction.data() + at;
    double below = cumulative_at(in.ssp, node, j[0], f[0]);
    for (int k = k0; k < k1; ++k) {
      const double c = cumulative_at(in.ssp, node, j[k + 1 - k0], f[k + 1 - k0]);
      out[k - k0] = (c - below) / axis.width(k);
      below = c;
    }
    return;
  }
  const double doppler = node_doppler(in.tile, velocity_node);
  int j = 0;
  double f = 0.0;
  locate(in.ssp, axis.vacuum_edge(k0) / doppler, j, f);
  double below = cumulative_at(in.ssp, node, j, f);
  for (int k = k0; k < k1; ++k) {
    locate_after(in.ssp, axis.vacuum_edge(k + 1) / doppler, j, f);
    const double c = cumulative_at(in.ssp, node, j, f);
    out[k - k0] = (c - below) / axis.width(k);
    below = c;
  }
}

// The axis' bins of the row, out[k - k0], from its spectrum's base; the band's energy within them
// is added to light.band_energy bin by bin in order (binned_product sums the chunks' parts in
// their order).
void spectrum_row(const BinnedProductInput& in, const ChunkAxis& axis, int node, int velocity_node,
                  int term, const double* base, double* out, BasisColumn& light) {
  const HistogramTile& tile = in.tile;
  const int k0 = axis.k0, k1 = axis.k1;
  const double doppler = node_doppler(tile, velocity_node);
  for (int k = k0; k < k1; ++k)
    out[k - k0] = base[k - k0] * node_dust_factor(in, axis, velocity_node, term, k, doppler);
  light.velocity_kms = tile.velocity.velocity_kms(velocity_node);
  for (int k = std::max(k0, in.band_first_bin); k < std::min(k1, in.band_end_bin); ++k)
    light.band_energy += out[k - k0] * axis.width(k);
  for (const EdgeWindow& window : tile.edges)
    for (int k = std::max(k0, window.first_bin); k < std::min(k1, window.first_bin + window.n_bins);
         ++k)
      out[k - k0] = (continued_cumulative(in.ssp, node, axis.vacuum_edge(k + 1) / doppler) -
                     continued_cumulative(in.ssp, node, axis.vacuum_edge(k) / doppler)) /
                    axis.width(k) * node_dust_factor(in, axis, velocity_node, term, k, doppler);
}

// An S (part 0) or P (part 1) column of a template's end, at bin `bin` of the observed axis.
void edge_row(const BinnedProductInput& in, const ChunkAxis& axis, const EdgeWindow& window,
              int part, int bin, int term, double* out) {
  const int k0 = axis.k0, k1 = axis.k1;
  std::fill(out, out + (k1 - k0), 0.0);
  const int end = window.first_bin + window.n_bins;
  // The continuation covers the bins the step has passed: above it (red end) or below it (blue).
  const int lo = part == 1 ? bin : window.red ? bin + 1 : window.first_bin;
  const int hi = part == 1 ? bin + 1 : window.red ? end : bin;
  const double doppler = in.bins.vacuum_centre(bin) / window.rest_angstrom;
  for (int k = std::max(lo, k0); k < std::min(hi, k1); ++k)
    out[k - k0] = -window.flux_scale * (axis.vacuum_edge(k + 1) - axis.vacuum_edge(k)) /
                  axis.width(k) * dust_factor(in, axis, term, k, doppler);
}

// Row `column` of B over the axis' bins (basis_row). `base` holds the last spectrum's base made
// over this axis (or none: SpectrumBase{}).
void chunk_row(const BinnedProductInput& in, const ChunkAxis& axis, std::size_t column, double* out,
               BasisColumn& light, SpectrumBase& base) {
  const HistogramTile& tile = in.tile;
  const std::size_t n_a = static_cast<std::size_t>(tile.dust.rank);
  const int term = static_cast<int>(column % n_a);
  if (column < tile.spectrum_columns()) {
    const auto velocity_node = static_cast<int>(column / n_a % tile.velocity.n);
    const auto node = static_cast<int>(column / n_a / tile.velocity.n);
    if (base.spectrum != column / n_a) {
      base.values.resize(static_cast<std::size_t>(axis.k1 - axis.k0));
      spectrum_base(in, axis, node, velocity_node, base.values.data());
      base.spectrum = column / n_a;
    }
    spectrum_row(in, axis, node, velocity_node, term, base.values.data(), out, light);
    return;
  }
  const int e = column < tile.edge_column(1) ? 0 : 1;
  const EdgeWindow& window = tile.edges[e];
  const auto at = static_cast<int>((column - tile.edge_column(e)) / n_a);
  edge_row(in, axis, window, at / window.n_bins, window.first_bin + at % window.n_bins, term, out);
}

}  // namespace

DustSegments make_dust_segments(const DustExpansion& dust, const WaveBins& bins,
                                const HistogramTile& tile) {
  const VelocityBins& v = tile.velocity;
  const double d_lo = tile.one_plus_z * std::exp(v.u_min);
  const double d_hi = tile.one_plus_z * std::exp(v.u_min + (v.n - 1) * v.du);
  DustSegments segments;
  const int n_segments = (bins.n + kDustSegmentBins - 1) / kDustSegmentBins;
  segments.segment.resize(static_cast<std::size_t>(n_segments));
#pragma omp parallel for schedule(dynamic, 1)
  for (int s = 0; s < n_segments; ++s) {
    const double rest_lo = bins.vacuum_edge(std::max(0, s * kDustSegmentBins - 1)) / d_hi;
    const double rest_hi =
        bins.vacuum_edge(std::min(bins.n, (s + 1) * kDustSegmentBins + 1)) / d_lo;
    // The curves are not monotonic everywhere (the 2175 A bump): k's range from samples.
    double k_lo = INFINITY, k_hi = -INFINITY;
    constexpr int kWaveSamples = 64;
    for (int i = 0; i <= kWaveSamples; ++i) {
      const double k = attenuation_ratio(
          dust.curve, rest_lo * std::pow(rest_hi / rest_lo, double(i) / kWaveSamples));
      k_lo = std::min(k_lo, k);
      k_hi = std::max(k_hi, k);
    }
    const double pad = 0.02 * (k_hi - k_lo) + 1e-6;
    segments.segment[static_cast<std::size_t>(s)] = make_dust_segment(dust, k_lo - pad, k_hi + pad);
  }
  for (const DustSegment& segment : segments.segment) {
    segments.max_terms = std::max(segments.max_terms, segment.terms);
    segments.max_error = std::max(segments.max_error, segment.max_error);
  }
  return segments;
}

void basis_row(const BinnedProductInput& in, std::size_t column, int k0, int k1, double* out,
               BasisColumn& light) {
  SpectrumBase base;
  chunk_row(in, ChunkAxis(in, k0, k1), column, out, light, base);
}

BasisColumn basis_row(const BinnedProductInput& in, std::size_t column, double* out) {
  BasisColumn light;
  basis_row(in, column, 0, in.bins.n, out, light);
  return light;
}

namespace {

// The columns of n_columns that the items name (column_of(item), each below n_columns),
// ascending, and each column's index among them (-1 where none names it): the forward's
// populated columns, the transpose's used ones.
struct UsedColumns {
  std::vector<std::size_t> used;
  std::vector<std::int32_t> index;
};
template <class Items, class ColumnOf>
UsedColumns used_columns(std::size_t n_columns, const Items& items, ColumnOf&& column_of) {
  UsedColumns out;
  out.index.assign(n_columns, -1);
  for (const auto& item : items) out.index[column_of(item)] = 0;
  for (std::size_t c = 0; c < n_columns; ++c)
    if (out.index[c] == 0) {
      out.index[c] = static_cast<std::int32_t>(out.used.size());
      out.used.push_back(c);
    }
  return out;
}
UsedColumns used_columns(const TileEntries& entries, std::size_t n_columns) {
  return used_columns(n_columns, entries.column, [](std::uint32_t c) { return c; });
}

// Where entry e of row r of `entries` has its dL/dH (TileEntries::place).
std::size_t entry_place(const TileEntries& entries, std::size_t n_columns, std::size_t r,
                        std::size_t e) {
  return entries.place.empty() ? r * n_columns + entries.column[e] : entries.place[e];
}

// Steps 1-3 of the product, and B's chunks of bins, shared by the host's product and the
// device's: the same populated columns, rows of H, row blocks and chunks whichever runs it.
struct ProductLayout {
  std::size_t n_rows = 0, n_wave = 0;
  // With dust segments (BinnedProductInput::dust_segments): each chunk is a segment, summed over
  // its reduced terms (reduced_rows), and H's rows hold whole groups of terms.
  bool reduced = false;
  // Then H's values in float, as h.value holds them (term by term in each row): what every
  // segment mixes (half the memory read, segment after segment, of the double values).
  std::vector<float> value_planes;
  std::vector<std::size_t> populated;  // column ids, ascending
  SparseRows h;
  RowBlocks blocks;
  std::vector<double> column_velocity;  // each populated column's, km/s
  BinnedProductStats stats;
  // B in chunks of wavelength bins (binned_product.h): chunk_bins wide, n_chunks of them, and
  // each column's band energy summed per chunk that meets the band (band_partial).
  std::size_t chunk_bins = 0, n_chunks = 0;
  std::size_t band_first = 0, band_end = 0, first_band_chunk = 0, n_band_chunks = 0;
  std::vector<double> band_partial;
  // Where chunk `chunk`'s part of each column's band energy goes (n_populated of them), or null
  // where the chunk does not meet the band.
  double* partial(std::size_t chunk) {
    const std::size_t k0 = chunk * chunk_bins, k1 = std::min(n_wave, k0 + chunk_bins);
    return k0 < band_end && k1 > band_first
               ? band_partial.data() + (chunk - first_band_chunk) * populated.size()
               : nullptr;
  }
};

ProductLayout product_layout(const BinnedProductInput& in, HostHistogram&& histogram) {
  ProductLayout layout;
  const std::size_t n_rows = static_cast<std::size_t>(in.tile.n_spaxels);
  const std::size_t n_columns = in.tile.columns();
  const std::size_t n_wave = static_cast<std::size_t>(in.bins.n);
  layout.n_rows = n_rows;
  layout.n_wave = n_wave;
  BinnedProductStats& stats = layout.stats;

  // 1. The populated columns, and H over them by rows. The entries are sorted by index, so each
  // one's row and column come from stepping on through the rows (a division and a remainder an
  // entry were a tenth of a smoothed run's product).
  SparseRows& h = layout.h;
  const std::size_t n_entries = histogram.index.size();
  h.offsets.assign(n_rows + 1, 0);
  h.column.resize(n_entries);
  h.value = std::move(histogram.mass_msun);
  for (std::size_t e = 0, row = 0, row_index = 0; e < n_entries; ++e) {
    while (histogram.index[e] >= row_index + n_columns) ++row, row_index += n_columns;
    h.column[e] = static_cast<std::int32_t>(histogram.index[e] - row_index);  // of the tile
    ++h.offsets[row + 1];
  }
  histogram.index = {};  // not held through the sums
  for (std::size_t r = 0; r < n_rows; ++r) h.offsets[r + 1] += h.offsets[r];
  const auto rank = static_cast<std::size_t>(in.tile.dust.rank);
  layout.reduced = in.dust_segments && rank > 1;
  if (layout.reduced) {
    whole_groups_by_term(h, n_rows, rank);
    layout.value_planes.resize(h.value.size());
#pragma omp parallel for schedule(static)
    for (std::size_t e = 0; e < h.value.size(); ++e)
      layout.value_planes[e] = static_cast<float>(h.value[e]);
  }
  UsedColumns populated_set =
      used_columns(n_columns, h.column, [](std::int32_t c) { return static_cast<std::size_t>(c); });
  for (std::int32_t& c : h.column) c = populated_set.index[static_cast<std::size_t>(c)];
  std::vector<std::size_t>& populated = layout.populated;
  populated = std::move(populated_set.used);
  stats.populated_columns = populated.size();
  stats.nonzeros = h.value.size();

  // 2. Light weights: each populated column's velocity here, its energy within the band with B.
  const std::size_t n_pop = populated.size();

  // 3. Each row block's columns (ascending) and its kind of product, once: a block takes the
  // dense product where it is filled enough, over all its columns at once.
  layout.blocks = row_blocks(
      n_rows, h.offsets, n_pop, [&](std::size_t e) { return h.column[e]; }, kDenseFill);
  RowBlocks& blocks = layout.blocks;
  for (std::size_t b = 0; b < blocks.columns.size(); ++b)
    if (!blocks.columns[b].empty()) ++(blocks.dense[b] ? stats.dense_blocks : stats.sparse_blocks);
  // With dust segments a dense block's rows are reduced group by group: each group's place among
  // the block's groups, at its first term's entry (a division once, not once a segment).
  if (layout.reduced)
#pragma omp parallel for schedule(dynamic, 1)
    for (std::size_t b = 0; b < blocks.columns.size(); ++b) {
      if (!blocks.dense[b]) continue;
      const std::size_t r0 = b * kRowsPerBlock, r1 = std::min(n_rows, r0 + kRowsPerBlock);
      for (std::size_t r = r0; r < r1; ++r) {
        const std::size_t e0 = h.offsets[r], n_groups = (h.offsets[r + 1] - e0) / rank;
        for (std::size_t g = 0; g < n_groups; ++g)
          blocks.entry_place[e0 + g] /= static_cast<std::int32_t>(rank);
      }
    }

  layout.column_velocity.assign(n_pop, 0.0);
  for (std::size_t p = 0; p < n_pop; ++p)
    if (populated[p] < in.tile.spectrum_columns()) {
      const auto n_a = static_cast<std::size_t>(in.tile.dust.rank);
      layout.column_velocity[p] =
          in.tile.velocity.velocity_kms(static_cast<int>(populated[p] / n_a % in.tile.velocity.n));
    }

  // B's chunks. Their width is set by the tile's columns, not the populated ones, and not by the
  // thread or device count, so that it is the same for every tile and device count; at most
  // basis_memory_bytes even if every column is populated, and whole multiples of kChunkBinAlign
  // bins (the host product's register tile over them).
  // With dust segments, a chunk is a segment (each takes its own terms; kDustSegmentBins is a
  // multiple of kChunkBinAlign, and its B, over the populated columns, within the bound).
  layout.chunk_bins = layout.reduced ? static_cast<std::size_t>(kDustSegmentBins)
                                     : basis_chunk_bins(in.basis_memory_bytes, n_columns);
  layout.n_chunks = n_pop == 0 ? 0 : (n_wave + layout.chunk_bins - 1) / layout.chunk_bins;
  // Each column's band energy is summed per chunk as its rows are made (one pass over B, not a
  // second over the band), a partial per chunk that meets the band; the partials are added in the
  // chunks' order (light_moments below), whatever thread or device path made them, so the light
  // moments are the same bits for any thread count and either path (they differ from one
  // whole-row sum in the last bits only).
  layout.band_first = static_cast<std::size_t>(std::max(0, in.band_first_bin));
  layout.band_end = std::min(n_wave, static_cast<std::size_t>(std::max(0, in.band_end_bin)));
  layout.first_band_chunk = layout.band_first / layout.chunk_bins;
  layout.n_band_chunks =
      layout.band_end > layout.band_first
          ? (layout.band_end - 1) / layout.chunk_bins + 1 - layout.first_band_chunk
          : 0;
  layout.band_partial.assign(layout.n_band_chunks * n_pop, 0.0);
  return layout;
}

// Populated column p's row of B over a chunk's bins, in float, into to[0, width) (`base`: the
// last spectrum's base made over this axis, chunk_row; `row`: a buffer in double), its part of
// the band energy into partial[p] where partial is not null.
void make_chunk_rows(const BinnedProductInput& in, const ProductLayout& layout,
                     const ChunkAxis& axis, std::size_t p, SpectrumBase& base,
                     std::vector<double>& row, float* to, double* partial) {
  const auto width = static_cast<std::size_t>(axis.k1 - axis.k0);
  row.resize(width);
  BasisColumn light;  // this chunk's part of the column's band energy
  chunk_row(in, axis, layout.populated[p], row.data(), light, base);
  if (partial) partial[p] = light.band_energy;
  for (std::size_t k = 0; k < width; ++k) to[k] = static_cast<float>(row[k]);  // float B
}

// Dust segments the host's product takes at once (binned_product).
constexpr std::size_t kSegmentsTogether = 4;

// The columns of n_groups whole groups over their first `terms` terms, term by term: group g's
// term q, at its first term's column first_column(g) plus q, goes to out[q * n_groups + g] (the
// order of a segment's reduced entries, SegmentTerms).
template <class FirstColumn>
void group_term_columns(std::size_t n_groups, std::size_t terms, FirstColumn&& first_column,
                        std::int32_t* out) {
  for (std::size_t q = 0; q < terms; ++q)
    for (std::size_t g = 0; g < n_groups; ++g)
      out[q * n_groups + g] = first_column(g) + static_cast<std::int32_t>(q);
}

// A dust segment's part of the product (ProductLayout::reduced). A row's whole groups of `rank`
// entries (one spectrum's or end's terms h_t), held term by term (whole_groups_by_term: h_t of
// its G groups at t * G), become the segment's `terms` entries a group c_q = sum_t reduce[q, t]
// h_t (in double, from H's values in float, the terms in order), q by q, at the group's column
// plus q, whose rows of B the segment makes with chi_q (TermFactors::reduced).
struct SegmentTerms {
  const DustSegment& segment;
  std::size_t rank;
  std::size_t terms() const { return static_cast<std::size_t>(segment.terms); }
  // Row entries [e0, e1) of H (values from the layout's float planes), reduced into value and
  // column (resized), each c_q at its group's column plus q (c_q of group g at
  // value[q * n_groups + g]).
  void reduce_entries(const SparseRows& h, const std::vector<float>& planes, std::size_t e0,
                      std::size_t e1, std::vector<double>& value,
                      std::vector<std::int32_t>& column) const {
    const std::size_t n_groups = (e1 - e0) / rank;
    value.resize(n_groups * terms());
    column.resize(value.size());
    mix_planes(value.data(), n_groups, planes.data() + e0, rank, segment.reduce.data(), terms());
    group_term_columns(
        n_groups, terms(), [&](std::size_t g) { return h.column[e0 + g]; }, column.data());
  }
  // The band energies of the chunk's populated columns, from those of the rows it made (the
  // reduced terms'): column (group, t) weighs sum_q reduce[q, t] energy(group, q), what its
  // entries' light is in the reduced product.
  void column_energies(const std::vector<std::size_t>& populated, const double* reduced_energy,
                       double* partial) const {
    for (std::size_t p = 0; p < populated.size(); p += rank)
      for (std::size_t t = 0; t < rank; ++t) {
        double energy = 0.0;
        for (std::size_t q = 0; q < terms(); ++q)
          energy += segment.reduce[q * rank + t] * reduced_energy[p + q];
        partial[p + t] = energy;
      }
  }
};

// 5. Light-weighted moments of v per spaxel, from the chunks' band partials (in the chunks'
// order, fixed).
void light_moments_of(const ProductLayout& layout, double* light_moments) {
  const std::size_t n_pop = layout.populated.size();
  const SparseRows& h = layout.h;
  std::vector<double> column_energy(n_pop, 0.0);
  for (std::size_t c = 0; c < layout.n_band_chunks; ++c)  // the chunks' order, fixed
    for (std::size_t p = 0; p < n_pop; ++p) column_energy[p] += layout.band_partial[c * n_pop + p];
  const std::vector<double>& column_velocity = layout.column_velocity;
  for (std::size_t r = 0; r < layout.n_rows; ++r) {
    double w = 0.0, wv = 0.0, wvv = 0.0;
    for (std::size_t e = h.offsets[r]; e < h.offsets[r + 1]; ++e) {
      const double light = h.value[e] * column_energy[h.column[e]];
      const double v = column_velocity[h.column[e]];
      w += light;
      wv += light * v;
      wvv += light * v * v;
    }
    light_moments[3 * r] = w;
    light_moments[3 * r + 1] = wv;
    light_moments[3 * r + 2] = wvv;
  }
}

}  // namespace

BinnedProductStats binned_product(const BinnedProductInput& in, HostHistogram histogram,
                                  float* cube_rows, double* light_moments) {
  auto clock = std::chrono::steady_clock::now();
  ProductLayout layout = product_layout(in, std::move(histogram));
  layout.stats.seconds.layout = lap_seconds(clock);
  const std::size_t n_rows = layout.n_rows, n_wave = layout.n_wave;
  const std::size_t n_pop = layout.populated.size();
  const SparseRows& h = layout.h;
  const std::size_t n_blocks = layout.blocks.columns.size();
  const std::vector<std::vector<std::int32_t>>& block_columns = layout.blocks.columns;
  const std::vector<char>& block_dense = layout.blocks.dense;
  const std::vector<std::int32_t>& entry_q = layout.blocks.entry_place;
  const auto rank = static_cast<std::size_t>(in.tile.dust.rank);

  // 4. B in chunks of wavelength bins (bounded memory, binned_product.h), a chunk to a thread at a
  // time: every populated column's values over the chunk's bins, then each block's product over
  // them into those bins of the cube's rows (the threads' bins never overlap: one parallel loop,
  // no barrier per chunk). Each voxel is one sum over its block's columns in their order (a dense
  // block's in float, multiply_rows; a sparse one's in float groups added in double,
  // add_scaled_rows), rounded into the float cube once (data/datacube.h): the chunks do not change
  // its bits.
  const std::size_t chunk_bins = layout.chunk_bins, n_chunks = layout.n_chunks;
  // The dense blocks of H in float (rows x their columns), made once for every chunk of bins: a
  // chunk made them again, and with MaNGA's thousands of columns a tile's B takes ~70 chunks (a
  // smoothed run's blocks are all dense: 25 million entries written 70 times).
  std::vector<std::vector<float>> dense_h(n_blocks);
#pragma omp parallel for schedule(dynamic, 1)
  for (std::size_t b = 0; b < n_blocks; ++b) {
    if (!block_dense[b] || block_columns[b].empty()) continue;
    const std::size_t r0 = b * kRowsPerBlock, r1 = std::min(n_rows, r0 + kRowsPerBlock);
    const std::size_t cols = block_columns[b].size();
    std::vector<float>& hd = dense_h[b];
    hd.assign((r1 - r0) * cols, 0.0f);
    if (layout.reduced) {
      // With dust segments, each row's terms plane by plane over the block's groups (term t of
      // group g at t * (the block's groups) + g), as each segment mixes them, below.
      const std::size_t block_groups = cols / rank;
      for (std::size_t r = r0; r < r1; ++r) {
        const std::size_t e0 = h.offsets[r], n_groups = (h.offsets[r + 1] - e0) / rank;
        for (std::size_t t = 0; t < rank; ++t)
          for (std::size_t g = 0; g < n_groups; ++g)
            hd[(r - r0) * cols + t * block_groups + static_cast<std::size_t>(entry_q[e0 + g])] =
                layout.value_planes[e0 + t * n_groups + g];
      }
      continue;
    }
    for (std::size_t r = r0; r < r1; ++r)
      for (std::size_t e = h.offsets[r]; e < h.offsets[r + 1]; ++e)
        hd[(r - r0) * cols + static_cast<std::size_t>(entry_q[e])] = static_cast<float>(h.value[e]);
  }
  // With dust segments a thread takes kSegmentsTogether consecutive segments (chunks) at once, and
  // mixes each row's terms (or dense block's) once for all of them, one mix_planes over their
  // terms together: a segment at a time, each mix read H again from memory, a third of a dusty
  // product's time. The sums, and so the cube's bits, are the same either way.
  const std::size_t together = layout.reduced ? kSegmentsTogether : 1;
  const std::size_t n_steps = (n_chunks + together - 1) / together;
#pragma omp parallel
  {
    // This thread's chunks of B, a row in double, float product and double sums, reused step
    // after step and block after block (each a fresh buffer was a fresh mapping and its page
    // faults each time).
    std::vector<std::vector<float>> basis_buffers(together);
    std::vector<RowMatrix> sums(together);
    RowMatrix panel_sums;
    std::vector<float> product_buffer, mixed_dense;
    std::vector<double> row, mixed, weights, reduced_energy;
    std::vector<std::int32_t> reduced_columns;
    std::vector<std::size_t> mixed_first;  // each row's first mixed term in a sparse block
    std::vector<std::size_t> term_first(together + 1, 0);  // each segment's first mixed term
#pragma omp for schedule(dynamic, 1)
    for (std::size_t step = 0; step < n_steps; ++step) {
      const std::size_t c0 = step * together, c1 = std::min(n_chunks, c0 + together);
      auto first_bin = [&](std::size_t c) { return c * chunk_bins; };
      auto width_of = [&](std::size_t c) {
        return std::min(n_wave, (c + 1) * chunk_bins) - c * chunk_bins;
      };
      // 1. Each chunk's rows of B (a segment's: only its reduced terms' rows; the others are not
      // read), their band energies, and with segments the terms' weights one after another.
      weights.clear();
      for (std::size_t c = c0; c < c1; ++c) {
        const std::size_t k0 = first_bin(c), width = width_of(c);
        double* partial = layout.partial(c);
        const DustSegment* segment =
            layout.reduced ? &in.dust_segments->of_bin(static_cast<int>(k0)) : nullptr;
        const ChunkAxis axis(in, static_cast<int>(k0), static_cast<int>(k0 + width),
                             &layout.populated,
                             segment ? TermFactors::reduced : TermFactors::projected);
        std::vector<float>& basis = basis_buffers[c - c0];
        basis.resize(n_pop * width);
        SpectrumBase base;  // over this chunk's axis
        if (segment && partial) reduced_energy.assign(n_pop, 0.0);
        for (std::size_t p = 0; p < n_pop; ++p) {
          if (segment && layout.populated[p] % rank >= static_cast<std::size_t>(segment->terms))
            continue;
          make_chunk_rows(in, layout, axis, p, base, row, basis.data() + p * width,
                          segment && partial ? reduced_energy.data() : partial);
        }
        if (!segment) continue;
        if (partial)
          SegmentTerms{*segment, rank}.column_energies(layout.populated, reduced_energy.data(),
                                                       partial);
        term_first[c - c0] = weights.size() / rank;
        weights.insert(weights.end(), segment->reduce.begin(), segment->reduce.end());
      }
      const std::size_t all_terms = weights.size() / rank;
      term_first[c1 - c0] = all_terms;
      std::size_t most_terms = 0;  // of the step's segments
      for (std::size_t c = c0; c < c1; ++c)
        most_terms = std::max(most_terms, term_first[c - c0 + 1] - term_first[c - c0]);
      // 2. Each block's product over the chunks' bins.
      for (std::size_t b = 0; b < n_blocks; ++b) {
        const std::size_t r0 = b * kRowsPerBlock, r1 = std::min(n_rows, r0 + kRowsPerBlock);
        const std::vector<std::int32_t>& columns = block_columns[b];
        if (columns.empty()) continue;
        const std::size_t rows = r1 - r0, cols = columns.size();
        auto out_of = [&](std::size_t c) {
          return Eigen::Map<RowMatrixF, 0, Eigen::OuterStride<>>(
              cube_rows + r0 * n_wave + first_bin(c), static_cast<Eigen::Index>(rows),
              static_cast<Eigen::Index>(width_of(c)),
              Eigen::OuterStride<>(static_cast<Eigen::Index>(n_wave)));
        };
        if (block_dense[b]) {
          // Each row's planes over the block's groups mixed into the segments' terms (a group
          // the row lacks mixes to 0), rounded to float, term by term: the step's term q's
          // (rows x the block's groups) at q * rows * block_groups, the float a product reads.
          const std::size_t block_groups = cols / rank;
          if (layout.reduced) {
            mixed_dense.resize(all_terms * rows * block_groups);
            for (std::size_t i = 0; i < rows; ++i)
              mix_planes_rounded(mixed_dense.data() + i * block_groups, rows * block_groups,
                                 block_groups, dense_h[b].data() + i * cols, rank, weights.data(),
                                 all_terms);
            // The block's columns (ascending, whole groups) over the step's terms, for every
            // segment of the step.
            reduced_columns.resize(most_terms * block_groups);
            group_term_columns(
                block_groups, most_terms, [&](std::size_t g) { return columns[g * rank]; },
                reduced_columns.data());
          }
          for (std::size_t c = c0; c < c1; ++c) {
            const std::size_t width = width_of(c);
            product_buffer.resize(rows * width);
            if (layout.reduced) {
              // Term by term: each term's columns a float product of its own (rows x the block's
              // groups), the terms' products added in double, as a sparse block adds its groups'
              // float sums. One float sum over all the terms together, each group's large first
              // term and its signed corrections, drifted: +6.6e-7 of a dusty smoothed run's
              // light, against -3.8e-7 unreduced (docs/benchmarks.md).
              const std::size_t n_terms = term_first[c - c0 + 1] - term_first[c - c0];
              panel_sums.setZero(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(width));
              for (std::size_t q = 0; q < n_terms; ++q) {
                multiply_rows(mixed_dense.data() + (term_first[c - c0] + q) * rows * block_groups,
                              rows, block_groups, basis_buffers[c - c0].data(), width,
                              reduced_columns.data() + q * block_groups, width,
                              product_buffer.data());
                panel_sums += Eigen::Map<const RowMatrixF>(product_buffer.data(),
                                                           static_cast<Eigen::Index>(rows),
                                                           static_cast<Eigen::Index>(width))
                                  .cast<double>();
              }
              auto out = out_of(c);
              out = (out.cast<double>() + panel_sums).cast<float>();
              continue;
            }
            // The block's columns' rows of B read where they lie in the chunk.
            multiply_rows(dense_h[b].data(), rows, cols, basis_buffers[c - c0].data(), width,
                          columns.data(), width, product_buffer.data());
            const Eigen::Map<const RowMatrixF> product(product_buffer.data(),
                                                       static_cast<Eigen::Index>(rows),
                                                       static_cast<Eigen::Index>(width));
            auto out = out_of(c);
            out = (out.cast<double>() + product.cast<double>()).cast<float>();
          }
        } else {
          // The rows' groups mixed for all the step's segments first, then each segment's sums
          // over every row of the block: one segment's rows of B (those the block's columns use)
          // stay in the L2 cache from row to row, where a row's sums over all the step's
          // segments cycled the step's four chunks of B through it for every row.
          if (layout.reduced) {
            mixed_first.assign(1, 0);
            for (std::size_t r = r0; r < r1; ++r) {
              const std::size_t e0 = h.offsets[r], n_groups = (h.offsets[r + 1] - e0) / rank;
              mixed_first.push_back(mixed_first.back() + all_terms * n_groups);
            }
            mixed.resize(mixed_first.back());
            reduced_columns.resize(mixed_first.back() / all_terms * most_terms);
            for (std::size_t r = r0; r < r1; ++r) {
              const std::size_t e0 = h.offsets[r], n_groups = (h.offsets[r + 1] - e0) / rank;
              mix_planes(mixed.data() + mixed_first[r - r0], n_groups,
                         layout.value_planes.data() + e0, rank, weights.data(), all_terms);
              group_term_columns(
                  n_groups, most_terms, [&](std::size_t g) { return h.column[e0 + g]; },
                  reduced_columns.data() + mixed_first[r - r0] / all_terms * most_terms);
            }
          }
          for (std::size_t c = c0; c < c1; ++c) {
            const std::size_t width = width_of(c);
            sums[c - c0].setZero(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(width));
            for (std::size_t r = r0; r < r1; ++r) {
              // The row's non-zeros' rows of B, scaled and summed in order (vector_kernels.h:
              // most of a wide field's product); with segments, the segment's mixed terms q by q
              // (a prefix of the row's columns).
              double* y = sums[c - c0].row(static_cast<Eigen::Index>(r - r0)).data();
              const std::size_t e0 = h.offsets[r], count = h.offsets[r + 1] - e0;
              if (layout.reduced) {
                const std::size_t n_groups = count / rank, first = mixed_first[r - r0];
                const std::size_t n_terms = term_first[c - c0 + 1] - term_first[c - c0];
                add_scaled_rows(y, width, mixed.data() + first + term_first[c - c0] * n_groups,
                                reduced_columns.data() + first / all_terms * most_terms,
                                n_terms * n_groups, basis_buffers[c - c0].data(), width);
              } else {
                add_scaled_rows(y, width, h.value.data() + e0, h.column.data() + e0, count,
                                basis_buffers[c - c0].data(), width);
              }
            }
          }
          for (std::size_t c = c0; c < c1; ++c) {
            auto out = out_of(c);
            out = (out.cast<double>() + sums[c - c0]).cast<float>();
          }
        }
      }
    }
  }
  layout.stats.seconds.basis = lap_seconds(clock);
  light_moments_of(layout, light_moments);
  layout.stats.seconds.layout += lap_seconds(clock);
  return layout.stats;
}

BinnedProductStats binned_product_on_device(const Device& device, const BinnedProductInput& in,
                                            HostHistogram histogram, float* cube_rows,
                                            double* light_moments) {
  auto clock = std::chrono::steady_clock::now();
  ProductLayout layout = product_layout(in, std::move(histogram));
  ProductSeconds& seconds = layout.stats.seconds;
  seconds.layout = lap_seconds(clock);
  const std::size_t n_rows = layout.n_rows, n_wave = layout.n_wave;
  const std::size_t n_pop = layout.populated.size();
  const std::size_t chunk_bins = layout.chunk_bins, n_chunks = layout.n_chunks;
  if (n_chunks > 0) {
    if (device.is_cuda()) runtime::bind_current_thread(device);
    // H's rows (each segment's own, below, with dust segments) and each block's kind of product,
    // on the device.
    const SparseRows& h = layout.h;
    const std::size_t whole_h = layout.reduced ? 0 : h.value.size();
    DeviceBuffer<std::size_t> offsets(device, layout.reduced ? 0 : n_rows + 1);
    DeviceBuffer<std::int32_t> column(device, whole_h);
    DeviceBuffer<double> value(device, whole_h);
    if (!layout.reduced) {
      offsets.upload(h.offsets.data(), h.offsets.size());
      column.upload(h.column.data(), whole_h);
      value.upload(h.value.data(), whole_h);
    }
    const std::vector<std::uint8_t> dense(layout.blocks.dense.begin(), layout.blocks.dense.end());
    DeviceBuffer<std::uint8_t> dense_on(device, dense.size());
    dense_on.upload(dense.data(), dense.size());
    const BasisProductRows rows{offsets.data(),  column.data(), value.data(),
                                dense_on.data(), n_rows,        kRowsPerBlock};
    DeviceBuffer<float> cube(device, n_rows * n_wave);
    cube.zero();
    // With dust segments (ProductLayout::reduced), each chunk is one segment, and its rows of H
    // over its reduced terms (SegmentTerms, the host's values and order) are sent with it: room
    // for the most terms any segment takes.
    const auto rank = static_cast<std::size_t>(in.tile.dust.rank);
    const std::size_t most_reduced =
        layout.reduced
            ? h.value.size() / rank * static_cast<std::size_t>(in.dust_segments->max_terms)
            : 0;
    std::vector<std::size_t> reduced_offsets(layout.reduced ? n_rows + 1 : 0);
    std::vector<std::int32_t> reduced_column(most_reduced);
    std::vector<double> reduced_value(most_reduced), reduced_energy;
    DeviceBuffer<std::size_t> reduced_offsets_on(device, reduced_offsets.size());
    DeviceBuffer<std::int32_t> reduced_column_on(device, most_reduced);
    DeviceBuffer<double> reduced_value_on(device, most_reduced);
    // Their dense blocks sum term by term, as the host's do (a column's term is its index mod
    // rank: the populated columns are whole groups).
    const BasisProductRows reduced_rows{reduced_offsets_on.data(),
                                        reduced_column_on.data(),
                                        reduced_value_on.data(),
                                        dense_on.data(),
                                        n_rows,
                                        kRowsPerBlock,
                                        rank};
    seconds.transfer += lap_seconds(clock);
    // B a span of whole chunks at a time: each chunk's rows made on the host as binned_product
    // makes them (its ChunkAxis, its band partials), every (chunk, column) of the span a work item
    // of the host's threads, into the span's rows (row p at p * width, the chunk at its first
    // bin's place), then sent and multiplied.
    const std::size_t span_bins =
        layout.reduced ? chunk_bins
                       : device_span_bins(in.device_basis_bytes, n_pop, chunk_bins, n_wave);
    const std::size_t span_chunks = span_bins / chunk_bins + (span_bins % chunk_bins ? 1 : 0);
    DeviceBuffer<float> basis(device, n_pop * span_bins);
    HostStaging<float> staging(device, n_pop * span_bins);
    std::vector<std::unique_ptr<ChunkAxis>> axes(span_chunks);
    for (std::size_t c0 = 0; c0 < n_chunks; c0 += span_chunks) {
      const std::size_t c1 = std::min(n_chunks, c0 + span_chunks);
      const std::size_t k_lo = c0 * chunk_bins, k_hi = std::min(n_wave, c1 * chunk_bins);
      const std::size_t width = k_hi - k_lo;
#pragma omp parallel for schedule(dynamic, 1)
      for (std::size_t c = c0; c < c1; ++c) {
        const std::size_t k0 = c * chunk_bins, k1 = std::min(n_wave, k0 + chunk_bins);
        axes[c - c0] = std::make_unique<ChunkAxis>(
            in, static_cast<int>(k0), static_cast<int>(k1), &layout.populated,
            layout.reduced ? TermFactors::reduced : TermFactors::projected);
      }
      std::optional<SegmentTerms> segment;
      if (layout.reduced) {
        segment.emplace(SegmentTerms{in.dust_segments->of_bin(static_cast<int>(k_lo)), rank});
        if (layout.partial(c0)) reduced_energy.assign(n_pop, 0.0);
      }
      const std::size_t n_items = (c1 - c0) * n_pop;
#pragma omp parallel
      {
        std::vector<double> row;
        // This thread's last spectrum's base, over chunk base_chunk's axis.
        SpectrumBase base;
        std::size_t base_chunk = n_chunks;
#pragma omp for schedule(dynamic, 16)
        for (std::size_t item = 0; item < n_items; ++item) {
          const std::size_t c = c0 + item / n_pop, p = item % n_pop;
          if (c != base_chunk) {
            base = SpectrumBase{};
            base_chunk = c;
          }
          double* partial = layout.partial(c);
          if (segment) {  // only the segment's reduced terms' rows (the others are not read)
            if (layout.populated[p] % rank >= segment->terms()) continue;
            if (partial) partial = reduced_energy.data();
          }
          make_chunk_rows(in, layout, *axes[c - c0], p, base, row,
                          staging.data() + p * width + (c * chunk_bins - k_lo), partial);
        }
      }
      if (segment && layout.partial(c0))
        segment->column_energies(layout.populated, reduced_energy.data(), layout.partial(c0));
      seconds.basis += lap_seconds(clock);
      if (segment) {
        // The segment's rows of H, as the host's product reduces them, row by row.
        reduced_offsets[0] = 0;
        for (std::size_t r = 0; r < n_rows; ++r)
          reduced_offsets[r + 1] =
              reduced_offsets[r] + (h.offsets[r + 1] - h.offsets[r]) / rank * segment->terms();
#pragma omp parallel
        {
          std::vector<double> value_of_row;
          std::vector<std::int32_t> column_of_row;
#pragma omp for schedule(dynamic, 64)
          for (std::size_t r = 0; r < n_rows; ++r) {
            segment->reduce_entries(h, layout.value_planes, h.offsets[r], h.offsets[r + 1],
                                    value_of_row, column_of_row);
            std::copy(value_of_row.begin(), value_of_row.end(),
                      reduced_value.begin() + static_cast<std::ptrdiff_t>(reduced_offsets[r]));
            std::copy(column_of_row.begin(), column_of_row.end(),
                      reduced_column.begin() + static_cast<std::ptrdiff_t>(reduced_offsets[r]));
          }
        }
        seconds.layout += lap_seconds(clock);
        reduced_offsets_on.upload(reduced_offsets.data(), n_rows + 1);
        reduced_column_on.upload(reduced_column.data(), reduced_offsets[n_rows]);
        reduced_value_on.upload(reduced_value.data(), reduced_offsets[n_rows]);
      }
      basis.upload(staging.data(), n_pop * width);
      seconds.transfer += lap_seconds(clock);
      IFUSIM_DISPATCH(device, multiply_basis_span, device, segment ? reduced_rows : rows,
                      basis.data(), width, cube.data() + k_lo, n_wave);
      seconds.sums += lap_seconds(clock);
    }
    cube.download(cube_rows, n_rows * n_wave);
    seconds.sums += lap_seconds(clock);
  }
  light_moments_of(layout, light_moments);
  seconds.layout += lap_seconds(clock);
  return layout.stats;
}

namespace {

// Chunk [k0, k0 + width)'s rows of B over the used columns, in double, row p at out + p * width,
// made by the host's threads (a row to a thread at a time).
void make_transpose_chunk(const BinnedProductInput& in, const std::vector<std::size_t>& used,
                          std::size_t k0, std::size_t width, double* out) {
  const ChunkAxis axis(in, static_cast<int>(k0), static_cast<int>(k0 + width), &used);
#pragma omp parallel
  {
    SpectrumBase base;  // this thread's last spectrum over this chunk's axis
#pragma omp for schedule(dynamic, 16)
    for (std::size_t p = 0; p < used.size(); ++p) {
      BasisColumn light;
      chunk_row(in, axis, used[p], out + p * width, light, base);
    }
  }
}

}  // namespace

ProductSeconds binned_product_transpose(const BinnedProductInput& in, const TileEntries& entries,
                                        const double* cotangent_rows, double* dl_dh) {
  ProductSeconds seconds;
  auto clock = std::chrono::steady_clock::now();
  const std::size_t n_rows = static_cast<std::size_t>(in.tile.n_spaxels);
  const std::size_t n_columns = in.tile.columns();
  const std::size_t n_wave = static_cast<std::size_t>(in.bins.n);

  // 1. The columns any entry uses (ascending), each entry's index among them.
  const UsedColumns used_set = used_columns(entries, n_columns);
  const std::vector<std::size_t>& used = used_set.used;
  const std::vector<std::int32_t>& used_index = used_set.index;
  const std::size_t n_used = used.size();
  if (n_used == 0) return seconds;
  auto place = [&](std::size_t r, std::size_t e) { return entry_place(entries, n_columns, r, e); };

  // 2. Each row block's columns (indices into `used`, ascending) and its kind of product, by the
  // forward product's rule: dense (one GEMM of the block's cotangent rows by its columns of B)
  // where its entries fill enough of (rows x columns), one dot product per entry otherwise (its
  // entries taken by their row of B, below).
  const RowBlocks blocks = row_blocks(
      n_rows, entries.offsets, n_used, [&](std::size_t e) { return used_index[entries.column[e]]; },
      kTransposeDenseFill);
  const std::size_t n_blocks = blocks.columns.size();
  const std::vector<std::vector<std::int32_t>>& block_columns = blocks.columns;
  const std::vector<char>& block_dense = blocks.dense;
  const std::vector<std::int32_t>& entry_q = blocks.entry_place;
  // A sparse block's entries by their row of B (ascending; rows ascending within one): each row
  // of B is then read once a block and chunk, against the cotangent rows of its entries (a
  // block's 32 rows of a chunk stay in cache, where B's chunk does not: one entry at a time, each
  // read its row of B from memory, most of a dusty run's transpose).
  struct ColumnEntry {
    std::size_t entry;
    std::uint32_t row;
    std::int32_t basis_row;
  };
  std::vector<std::vector<ColumnEntry>> by_column(n_blocks);
#pragma omp parallel for schedule(dynamic, 1)
  for (std::size_t b = 0; b < n_blocks; ++b) {
    if (block_dense[b] || block_columns[b].empty()) continue;
    const std::size_t r0 = b * kRowsPerBlock, r1 = std::min(n_rows, r0 + kRowsPerBlock);
    const std::size_t e_first = entries.offsets[r0];
    std::vector<ColumnEntry>& list = by_column[b];
    list.reserve(entries.offsets[r1] - e_first);
    for (std::size_t r = r0; r < r1; ++r)
      for (std::size_t e = entries.offsets[r]; e < entries.offsets[r + 1]; ++e)
        list.push_back({e, static_cast<std::uint32_t>(r), used_index[entries.column[e]]});
    std::stable_sort(list.begin(), list.end(), [](const ColumnEntry& x, const ColumnEntry& y) {
      return x.basis_row < y.basis_row;
    });
  }

  // 3. B in chunks of bins (double: the cotangent and dL/dH are double), each chunk's rows made
  // in parallel, then every block's part of the chunk's sums in parallel; the chunks in order,
  // so that every entry of dL/dH is summed over the chunks in the same order whatever the
  // threads. Two barriers a chunk, where the forward's single loop over its narrow chunks has
  // none: on a loaded machine (a thread descheduled) 20 chunks' barriers were most of the
  // transpose's time, so the chunks here are wider, up to kTransposeChunkBytes of B's used rows
  // (MUSE at 1e6 stars: 1319 rows x 3721 bins, 39 MB, in 5 chunks). The widths follow the used
  // columns, the same for any device count.
  const std::size_t chunk_bins =
      transpose_chunk_bins(in.basis_memory_bytes, in.transpose_chunk_bytes, n_used);
  std::vector<double> basis_buffer(n_used * std::min(chunk_bins, n_wave));
  seconds.layout = lap_seconds(clock);
  for (std::size_t k0 = 0; k0 < n_wave; k0 += chunk_bins) {
    const std::size_t k1 = std::min(n_wave, k0 + chunk_bins), width = k1 - k0;
    make_transpose_chunk(in, used, k0, width, basis_buffer.data());
    seconds.basis += lap_seconds(clock);
#pragma omp parallel
    {
      std::vector<double> product_buffer, dots;
      std::vector<const double*> cotangent_of;  // a sparse block's entries' cotangent rows
#pragma omp for schedule(dynamic, 1)
      for (std::size_t b = 0; b < n_blocks; ++b) {
        const std::size_t r0 = b * kRowsPerBlock, r1 = std::min(n_rows, r0 + kRowsPerBlock);
        const std::vector<std::int32_t>& columns = block_columns[b];
        if (columns.empty()) continue;
        const std::size_t rows = r1 - r0, cols = columns.size();
        // The block's cotangent rows by B's rows (multiply_by_transpose,
        // stages/common/vector_kernels: the AVX-512 or AVX2 clone, each element's sum made the same
        // way on any CPU and in either kind of block), both read where they are.
        const double* g = cotangent_rows + r0 * n_wave + k0;
        if (block_dense[b]) {
          product_buffer.resize(rows * cols);
          multiply_by_transpose(g, n_wave, rows, width, basis_buffer.data(), width, columns.data(),
                                cols, product_buffer.data());
          for (std::size_t r = r0; r < r1; ++r)
            for (std::size_t e = entries.offsets[r]; e < entries.offsets[r + 1]; ++e)
              dl_dh[place(r, e)] += product_buffer[(r - r0) * cols + entry_q[e]];
        } else {
          // Each row of B against its entries' cotangent rows (dots_with_row: each dot the bits
          // of multiply_by_transpose's element), each dot put at its entry's place in the block,
          // then added into dL/dH in the entries' order (in the list's, each add was a cache
          // miss).
          const std::vector<ColumnEntry>& list = by_column[b];
          const std::size_t e_first = entries.offsets[r0];
          product_buffer.resize(list.size());
          for (std::size_t i = 0; i < list.size();) {
            std::size_t j = i;
            cotangent_of.clear();
            for (; j < list.size() && list[j].basis_row == list[i].basis_row; ++j)
              cotangent_of.push_back(g + (list[j].row - r0) * n_wave);
            dots.resize(j - i);
            dots_with_row(cotangent_of.data(), j - i,
                          basis_buffer.data() + static_cast<std::size_t>(list[i].basis_row) * width,
                          width, dots.data());
            for (std::size_t k = i; k < j; ++k)
              product_buffer[list[k].entry - e_first] = dots[k - i];
            i = j;
          }
          for (std::size_t r = r0; r < r1; ++r)
            for (std::size_t e = entries.offsets[r]; e < entries.offsets[r + 1]; ++e)
              dl_dh[place(r, e)] += product_buffer[e - e_first];
        }
      }
    }
    seconds.sums += lap_seconds(clock);
  }
  return seconds;
}

ProductSeconds binned_product_transpose_on_device(const Device& device,
                                                  const BinnedProductInput& in,
                                                  const TileEntries& entries,
                                                  const double* cotangent_rows, double* dl_dh) {
  ProductSeconds seconds;
  auto clock = std::chrono::steady_clock::now();
  const std::size_t n_rows = static_cast<std::size_t>(in.tile.n_spaxels);
  const std::size_t n_columns = in.tile.columns();
  const std::size_t n_wave = static_cast<std::size_t>(in.bins.n);
  const UsedColumns used = used_columns(entries, n_columns);
  const std::size_t n_used = used.used.size();
  if (n_used == 0) return seconds;
  const std::size_t n_entries = entries.column.size();
  if (device.is_cuda()) runtime::bind_current_thread(device);

  // Each entry's row, its row of B's chunks and its dL/dH so far (the caller's, at its place),
  // on the device with the tile's cotangent rows: these stay for every chunk.
  std::vector<std::uint32_t> entry_row(n_entries);
  std::vector<std::int32_t> entry_basis_row(n_entries);
  std::vector<double> sums(n_entries);
  auto place = [&](std::size_t r, std::size_t e) { return entry_place(entries, n_columns, r, e); };
#pragma omp parallel for schedule(static)
  for (std::size_t r = 0; r < n_rows; ++r)
    for (std::size_t e = entries.offsets[r]; e < entries.offsets[r + 1]; ++e) {
      entry_row[e] = static_cast<std::uint32_t>(r);
      entry_basis_row[e] = used.index[entries.column[e]];
      sums[e] = dl_dh[place(r, e)];
    }
  seconds.layout = lap_seconds(clock);
  DeviceBuffer<std::uint32_t> row_on(device, n_entries);
  row_on.upload(entry_row.data(), n_entries);
  DeviceBuffer<std::int32_t> basis_row_on(device, n_entries);
  basis_row_on.upload(entry_basis_row.data(), n_entries);
  DeviceBuffer<double> sums_on(device, n_entries);
  sums_on.upload(sums.data(), n_entries);
  DeviceBuffer<double> cotangent(device, n_rows * n_wave);
  cotangent.upload(cotangent_rows, n_rows * n_wave);
  const std::size_t batch = std::min(n_entries, kDeviceTransposeBatchEntries);
  DeviceBuffer<double> lanes(device, 8 * batch);

  // 2. B's chunks as the host's transpose makes them (the same widths, the same values), each
  // made on the host into pinned memory, sent, and its dots added to every entry on the device;
  // the chunks in order, so that each entry's dL/dH takes them in the host's order.
  const std::size_t chunk_bins =
      transpose_chunk_bins(in.basis_memory_bytes, in.transpose_chunk_bytes, n_used);
  const std::size_t max_width = std::min(chunk_bins, n_wave);
  DeviceBuffer<double> basis(device, n_used * max_width);
  HostStaging<double> staging(device, n_used * max_width);
  seconds.transfer = lap_seconds(clock);
  for (std::size_t k0 = 0; k0 < n_wave; k0 += chunk_bins) {
    const std::size_t width = std::min(n_wave, k0 + chunk_bins) - k0;
    make_transpose_chunk(in, used.used, k0, width, staging.data());
    seconds.basis += lap_seconds(clock);
    basis.upload(staging.data(), n_used * width);
    seconds.transfer += lap_seconds(clock);
    const TransposeDots dots{row_on.data(),  basis_row_on.data(), cotangent.data() + k0,
                             n_wave,         basis.data(),        width,
                             sums_on.data(), lanes.data()};
    for (std::size_t first = 0; first < n_entries; first += batch)
      IFUSIM_DISPATCH(device, add_transpose_dots, device, dots, first,
                      std::min(batch, n_entries - first));
    seconds.sums += lap_seconds(clock);
  }
  sums_on.download(sums.data(), n_entries);
  seconds.sums += lap_seconds(clock);
#pragma omp parallel for schedule(static)
  for (std::size_t r = 0; r < n_rows; ++r)
    for (std::size_t e = entries.offsets[r]; e < entries.offsets[r + 1]; ++e)
      dl_dh[place(r, e)] = sums[e];
  seconds.layout += lap_seconds(clock);
  return seconds;
}

}  // namespace ifusim
