// Eigen runs single-threaded inside each block: the blocks are spread over OpenMP threads here,
// and a GEMM whose blocking depended on the thread count would not be reproducible.
#define EIGEN_DONT_PARALLELIZE
#include "stages/stellar_spectra/binned_product.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

namespace ifusim {
namespace {

// B and the dense tiles of H are float: the product is the run's cost, and Eigen's float GEMM
// packs twice the lanes of its double one (and B takes half the memory). Each block's product is
// summed in double, so the float rounding (relative 6e-8 a term, random in sign over a
// row's columns) stays far below the binned method's targets (bench_binned [1], [5], [6]: total
// light 1e-6, median 1e-3). Light weights (the columns' band energies and the moments) stay double.
using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A block takes the dense product when at least this fraction of its (rows x columns) is filled.
constexpr double kDenseFill = 0.25;

// H over the populated columns, row by row (compressed sparse rows).
struct SparseRows {
  std::vector<std::size_t> offsets;  // n_rows + 1
  std::vector<std::int32_t> column;  // index into the populated columns
  std::vector<double> value;
};

// The dust term's factor psi_r of bin k, at its centre's rest wavelength for a shift D (1
// without dust).
double dust_factor(const BinnedProductInput& in, int term, int k, double doppler) {
  return in.dust ? in.dust->factor(in.bins.vacuum_centre(k) / doppler, term) : 1.0;
}

BasisColumn spectrum_row(const BinnedProductInput& in, int node, int velocity_node, int term,
                         double* out) {
  const HistogramTile& tile = in.tile;
  const double doppler =
      tile.one_plus_z * std::exp(tile.velocity.u_min + velocity_node * tile.velocity.du);
  int j = 0;
  double f = 0.0;
  locate(in.ssp, in.bins.vacuum_edge(0) / doppler, j, f);
  double below = cumulative_at(in.ssp, node, j, f);
  for (int k = 0; k < in.bins.n; ++k) {
    locate(in.ssp, in.bins.vacuum_edge(k + 1) / doppler, j, f);
    const double c = cumulative_at(in.ssp, node, j, f);
    out[k] = (c - below) / in.bins.width(k) * dust_factor(in, term, k, doppler);
    below = c;
  }
  BasisColumn light{0.0, tile.velocity.velocity_kms(velocity_node)};
  for (int k = in.band_first_bin; k < in.band_end_bin; ++k)
    light.band_energy += out[k] * in.bins.width(k);
  for (const EdgeWindow& window : tile.edges)
    for (int k = window.first_bin; k < window.first_bin + window.n_bins; ++k)
      out[k] = (continued_cumulative(in.ssp, node, in.bins.vacuum_edge(k + 1) / doppler) -
                continued_cumulative(in.ssp, node, in.bins.vacuum_edge(k) / doppler)) /
               in.bins.width(k) * dust_factor(in, term, k, doppler);
  return light;
}

// An S (part 0) or P (part 1) column of a template's end, at bin `bin` of the observed axis.
void edge_row(const BinnedProductInput& in, const EdgeWindow& window, int part, int bin, int term,
              double* out) {
  std::fill(out, out + in.bins.n, 0.0);
  const int end = window.first_bin + window.n_bins;
  // The continuation covers the bins the step has passed: above it (red end) or below it (blue).
  const int lo = part == 1 ? bin : window.red ? bin + 1 : window.first_bin;
  const int hi = part == 1 ? bin + 1 : window.red ? end : bin;
  const double doppler = in.bins.vacuum_centre(bin) / window.rest_angstrom;
  for (int k = lo; k < hi; ++k)
    out[k] = -window.flux_scale * (in.bins.vacuum_edge(k + 1) - in.bins.vacuum_edge(k)) /
             in.bins.width(k) * dust_factor(in, term, k, doppler);
}

}  // namespace

BasisColumn basis_row(const BinnedProductInput& in, std::size_t column, double* out) {
  const HistogramTile& tile = in.tile;
  const std::size_t n_a = static_cast<std::size_t>(tile.dust.rank);
  const int term = static_cast<int>(column % n_a);
  if (column < tile.spectrum_columns()) {
    const auto velocity_node = static_cast<int>(column / n_a % tile.velocity.n);
    const auto node = static_cast<int>(column / n_a / tile.velocity.n);
    return spectrum_row(in, node, velocity_node, term, out);
  }
  const int e = column < tile.edge_column(1) ? 0 : 1;
  const EdgeWindow& window = tile.edges[e];
  const auto at = static_cast<int>((column - tile.edge_column(e)) / n_a);
  edge_row(in, window, at / window.n_bins, window.first_bin + at % window.n_bins, term, out);
  return {};
}

BinnedProductStats binned_product(const BinnedProductInput& in, const HostHistogram& histogram,
                                  float* cube_rows, double* light_moments) {
  const std::size_t n_rows = static_cast<std::size_t>(in.tile.n_spaxels);
  const std::size_t n_columns = in.tile.columns();
  const std::size_t n_wave = static_cast<std::size_t>(in.bins.n);
  BinnedProductStats stats;

  // 1. The populated columns, and H over them by rows.
  std::vector<std::int32_t> populated_index(n_columns, -1);
  for (std::uint64_t i : histogram.index) populated_index[i % n_columns] = 0;
  std::vector<std::size_t> populated;  // column ids, ascending
  for (std::size_t c = 0; c < n_columns; ++c)
    if (populated_index[c] == 0) {
      populated_index[c] = static_cast<std::int32_t>(populated.size());
      populated.push_back(c);
    }
  SparseRows h;
  h.offsets.assign(n_rows + 1, 0);
  h.column.reserve(histogram.index.size());
  h.value.reserve(histogram.index.size());
  for (std::size_t e = 0; e < histogram.index.size(); ++e) {
    h.column.push_back(populated_index[histogram.index[e] % n_columns]);
    h.value.push_back(histogram.mass_msun[e]);
    ++h.offsets[histogram.index[e] / n_columns + 1];
  }
  for (std::size_t r = 0; r < n_rows; ++r) h.offsets[r + 1] += h.offsets[r];
  stats.populated_columns = populated.size();
  stats.nonzeros = h.value.size();

  // 2. Light weights: each populated column's energy within the band, and its velocity.
  const std::size_t n_pop = populated.size();
  std::vector<double> column_energy(n_pop), column_velocity(n_pop);

  // 3. B over chunks of columns (bounded memory), then the product per row block. Chunks are
  // ranges of column ids, not of populated columns, so that a spaxel's sum is split the same
  // way whatever else its tile holds.
  const std::size_t chunk_ids =
      std::max<std::size_t>(1, in.basis_memory_bytes / (n_wave * sizeof(float)));
  for (std::size_t id0 = 0, c0 = 0; id0 < n_columns; id0 += chunk_ids) {
    std::size_t c1 = c0;
    while (c1 < n_pop && populated[c1] < id0 + chunk_ids) ++c1;
    if (c1 == c0) continue;
    RowMatrixF basis(static_cast<Eigen::Index>(c1 - c0), static_cast<Eigen::Index>(n_wave));
#pragma omp parallel
    {
      std::vector<double> row(n_wave);  // made in double, stored in float
#pragma omp for schedule(dynamic, 16)
      for (std::size_t p = c0; p < c1; ++p) {
        const BasisColumn light = basis_row(in, populated[p], row.data());
        float* to = basis.row(static_cast<Eigen::Index>(p - c0)).data();
        for (std::size_t k = 0; k < n_wave; ++k) to[k] = static_cast<float>(row[k]);
        column_energy[p] = light.band_energy;
        column_velocity[p] = light.velocity_kms;
      }
    }

    const std::size_t n_blocks = (n_rows + kRowsPerBlock - 1) / kRowsPerBlock;
    std::size_t dense_blocks = 0, sparse_blocks = 0;
#pragma omp parallel reduction(+ : dense_blocks, sparse_blocks)
    {
      // The block's sums in double; the float cube takes them once, rounded (data/datacube.h).
      RowMatrix sums;
#pragma omp for schedule(dynamic, 1)
      for (std::size_t b = 0; b < n_blocks; ++b) {
        const std::size_t r0 = b * kRowsPerBlock, r1 = std::min(n_rows, r0 + kRowsPerBlock);
        // The block's non-zeros within this chunk, and its distinct columns.
        std::vector<std::int32_t> block_columns;
        std::size_t nnz = 0;
        for (std::size_t r = r0; r < r1; ++r)
          for (std::size_t e = h.offsets[r]; e < h.offsets[r + 1]; ++e)
            if (static_cast<std::size_t>(h.column[e]) >= c0 &&
                static_cast<std::size_t>(h.column[e]) < c1) {
              block_columns.push_back(h.column[e]);
              ++nnz;
            }
        if (nnz == 0) continue;
        std::sort(block_columns.begin(), block_columns.end());
        block_columns.erase(std::unique(block_columns.begin(), block_columns.end()),
                            block_columns.end());
        const std::size_t rows = r1 - r0, cols = block_columns.size();
        Eigen::Map<RowMatrixF> out(cube_rows + r0 * n_wave, static_cast<Eigen::Index>(rows),
                                   static_cast<Eigen::Index>(n_wave));
        sums.setZero(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(n_wave));
        if (cols >= 16 &&
            static_cast<double>(nnz) >= kDenseFill * static_cast<double>(rows * cols)) {
          RowMatrixF hd =
              RowMatrixF::Zero(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
          RowMatrixF bg(static_cast<Eigen::Index>(cols), static_cast<Eigen::Index>(n_wave));
          for (std::size_t q = 0; q < cols; ++q)
            bg.row(static_cast<Eigen::Index>(q)) =
                basis.row(static_cast<Eigen::Index>(block_columns[q] - c0));
          for (std::size_t r = r0; r < r1; ++r)
            for (std::size_t e = h.offsets[r]; e < h.offsets[r + 1]; ++e) {
              const auto col = static_cast<std::size_t>(h.column[e]);
              if (col < c0 || col >= c1) continue;
              const auto q =
                  std::lower_bound(block_columns.begin(), block_columns.end(), h.column[e]) -
                  block_columns.begin();
              hd(static_cast<Eigen::Index>(r - r0), q) = static_cast<float>(h.value[e]);
            }
          const RowMatrixF product = hd * bg;
          sums += product.cast<double>();
          ++dense_blocks;
        } else {
          for (std::size_t r = r0; r < r1; ++r)
            for (std::size_t e = h.offsets[r]; e < h.offsets[r + 1]; ++e) {
              const auto col = static_cast<std::size_t>(h.column[e]);
              if (col < c0 || col >= c1) continue;
              sums.row(static_cast<Eigen::Index>(r - r0)) +=
                  h.value[e] * basis.row(static_cast<Eigen::Index>(col - c0)).cast<double>();
            }
          ++sparse_blocks;
        }
        out = (out.cast<double>() + sums).cast<float>();
      }
    }
    stats.dense_blocks += dense_blocks;
    stats.sparse_blocks += sparse_blocks;
    c0 = c1;
  }

  // 4. Light-weighted moments of v per spaxel.
  for (std::size_t r = 0; r < n_rows; ++r) {
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
  return stats;
}

}  // namespace ifusim
