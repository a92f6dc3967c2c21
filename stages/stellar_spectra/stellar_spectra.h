#pragma once
// The spectral core: every star's spectrum, interpolated in the SSP grid (bilinear in
// log age, log Z), scaled by its initial mass, Doppler-shifted by its line-of-sight velocity and
// the galaxy's redshift and resampled conserving energy onto the telescope's wavelength bins
// (ssp_lookup.h), summed per spaxel. No spectrum per particle is ever stored. Two methods:
//
// - exact: each star's resampled spectrum is added to its spaxels, one kernel over (star, chunk
//   of 32 observed bins) work items: O(N x n_lambda). The reference.
// - binned (default): each star deposits its initial mass times its bilinear node weights and
//   its cloud-in-cell velocity weights into a histogram H[spaxel, node, velocity node] (velocity
//   nodes uniform in ln(1 + v/c)); after psum the cube is one matrix product
//   cube[spaxel, :] = sum_(node, v) H[spaxel, (node, v)] B[(node, v), :], where row (node, v) of
//   B is the node's template shifted by (1 + z)(1 + v/c) and resampled exactly onto the observed
//   bins. Per-star work is O(1); the product is O(populated (spaxel, node, v) x n_lambda). The
//   only approximation is the linear interpolation in velocity between nodes du apart, whose
//   error falls as du^2 (measured against exact in tests and bench/); the templates' ends inside
//   the band, where it would not, are made exact by two more columns (EdgeWindow).
//
// Both are integer fixed point until psum (data/fixed_point.h), so the cube is bitwise identical
// for any device count. Both also give per-spaxel moments of v_los: mass-weighted (sums of m,
// m v, m v^2) and light-weighted by each star's energy within a band of the observed spectrum.
//
// Dust (when the dust stage gave each star an A_V): a bin's energy is multiplied by
// 10^(-0.4 A_V A_lambda/A_V) with the curve evaluated at the bin centre's rest-frame wavelength
// (the dust sits in the galaxy); the curves vary little across one bin. The binned method
// expands the attenuation in a few separable terms (dust_expansion.h): each star deposits its
// mass times the terms' weights at its A_V, a fourth histogram axis of `rank` columns, and the
// basis rows carry the terms' wavelength factors.
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/json_params.h"
#include "data/buffer.h"
#include "data/dispatch.h"
#include "data/hd.h"
#include "data/keyed_sums.h"
#include "data/ssp_grid.h"
#include "stages/common/dust_curves.h"
#include "stages/common/footprint.h"
#include "stages/common/vector_kernels.h"
#include "stages/stage.h"
#include "stages/stellar_spectra/dust_expansion.h"
#include "stages/stellar_spectra/ssp_lookup.h"

namespace ifusim {

struct StarViews {
  const float* velocity_los_kms;  // v_z
  const float* initial_mass_msun;
  const float* mass_msun;
  const float* age_gyr;
  const float* metallicity;
  const float* dust_av;  // A_V in magnitudes per star, or nullptr without dust
  FootprintView footprint;
  std::size_t n;
};

// Reverse mode (docs/gradients.md): each star's dL/d field, per device, added to tile after tile.
struct StarGradientViews {
  double* initial_mass_msun;
  double* age_gyr;
  double* metallicity;
  double* velocity_los_kms;  // along the line of sight (+z after orient), star i at i x stride
  std::size_t velocity_stride;
  double* dust_av;  // nullptr without dust
  // The sky position (x, y of the stage's frame, star i at i x stride; y at its own pointer),
  // with kernel smoothing only (nullptr without: the spaxel is piecewise constant in it).
  double* position_x_kpc;
  double* position_y_kpc;
  std::size_t position_stride;
};

// Host-side preparation of the template tables.
struct SspTables {
  std::vector<double> log_age, log_z, edges, cumulative;
  bool uniform = false;
  double max_flux_density = 0.0;  // max |flux| over the grid, L_sun/A per M_sun
  double max_energy = 0.0;        // max over nodes of the total |energy|, L_sun per M_sun
  // A view of these tables in host memory (for host-side evaluation).
  SspView host_view(OutsideGrid outside) const;
};
// The tables are in vacuum whatever the library's medium: a library in air is converted to
// vacuum at rest (data/wavelength.h), and the observed bins of a telescope in air are converted
// to vacuum instead (WaveBins), so that the air/vacuum conversion happens at the observed
// wavelength. Throws, naming the library, where the converted edges would not increase.
SspTables make_ssp_tables(const SspGrid& grid);

enum class SpectralMethod { binned, exact };
// How the binned method holds its histogram: dense (integer atomics, psum) in tiles of spaxels,
// or sparse (each device's (index, mass) entries sorted and summed, then merged across
// devices); automatic picks the smaller.
enum class HistogramStorage { automatic, dense, sparse };

struct StellarSpectraParams {
  SpectralMethod method = SpectralMethod::binned;
  OutsideGrid outside = OutsideGrid::clamp;
  // Binned: spacing of the velocity nodes, c * delta ln(1 + v/c) (km/s). The velocity
  // interpolation's error falls as its square; 5 km/s is a tenth of a MUSE pixel at 7000 A.
  double velocity_bin_kms = 5.0;
  HistogramStorage histogram = HistogramStorage::automatic;
  // Binned: the dense histogram held at once per memory space; larger fields are done in tiles of
  // spaxels, each its own deposit, psum and product.
  double histogram_memory_gb = 1.0;
  // Light weights of the kinematic maps: energy within [lo, hi] (observed Angstrom); both 0 for
  // the telescope's whole range.
  double band_lo_angstrom = 0.0, band_hi_angstrom = 0.0;
  static StellarSpectraParams from_json(JsonParams params);
};

// The stage reads the templates given to it (the pipeline loads the library named in the run
// config) and the telescope's bins and redshift from state.observation.
StageEntry stellar_spectra_stage();
std::unique_ptr<Stage> make_stellar_spectra_stage(std::shared_ptr<const SspGrid> grid,
                                                  StellarSpectraParams params);

// The slow, obvious double-precision reference of the same physics, one particle at a time:
// interpolate the full spectrum, shift every (vacuum) pixel edge, convert it to `medium` (the
// bins': "air" or "vacuum") at the observed wavelength, and share each pixel's energy among
// the bins it overlaps. Returns the cube (spaxel-major) in L_sun per observed Angstrom.
std::vector<double> reference_stellar_cube(
    const SspGrid& grid, OutsideGrid outside, const std::string& medium, double redshift,
    const WaveBins& bins, std::size_t n_spaxels, const std::vector<float>& velocity_los_kms,
    const std::vector<float>& initial_mass_msun, const std::vector<float>& age_gyr,
    const std::vector<float>& metallicity, const std::vector<std::int32_t>& spaxel_index);

// The binned method at a template's end. Interpolating in velocity is second order in du only
// where a basis row is smooth in velocity. At a template's end inside the band, a star's exact
// spectrum steps to zero at lambda_end D, which moves with its own D; interpolating that step
// between two nodes errs to first order in du (5e-3 of the peak voxel at MaNGA's blue end with
// MILES, 5 km/s nodes). So, over the window of observed bins that lambda_end D can reach, the
// basis rows carry the template continued beyond its end at its end pixel's flux density
// (continued_cumulative, smooth in D), and each star deposits what that continuation adds to
// its own spectrum, exactly: its amount m sum_n w_n f_n,end / D (column S, at the bin holding
// lambda_end D) and the fraction of that bin the continuation covers (column P). The window's
// energy of the continuation is then S summed over the bins the step has passed, times each
// bin's width, plus P times the width of the bin holding the step: linear in the deposits, so
// S and P are histogram columns like the others and reduce exactly (rows: edge_basis_row).
struct EdgeWindow {
  int first_bin = 0, n_bins = 0;  // observed bins [first_bin, first_bin + n_bins); 0: no window
  double rest_angstrom = 0.0;     // the template's end (vacuum, rest frame)
  // (max over nodes of |f_end|) / D_min, so that a deposit is at most the star's mass.
  double flux_scale = 1.0;
  bool red = false;  // the red end (the continuation lies above it), or the blue end
};

// The binned method's histogram tile: spaxels [first_spaxel, first_spaxel + n_spaxels), each
// with n_nodes x velocity.n x dust.rank columns, column = (node * velocity.n + j) * dust.rank + r
// (r: the dust expansion's term, 0 alone without dust), then, for each template end with a
// window, 2 x n_bins x dust.rank columns:
// edge_column(e) + (part * n_bins + bin - first_bin) * dust.rank + r, part 0 for S, 1 for P.
// Entry (row, column) is at row * columns() + column (the sparse histogram's keys, the reduced
// tile on the host, the adjoint's arrays), or, where the tile has row windows (the dense
// histogram of a held galaxy), at a place in row `row`'s window: the row holds only the velocity
// nodes [first, first + count) its stars reach (RowWindow) and starts at row_start[row]. A
// spaxel's stars span a few tens of the run's hundreds of velocity nodes (MaNGA-32, 1e6 stars: 4%
// of the dense tile's entries non-zero), so the windows hold the same sums in a fraction of the
// memory that must be zeroed, added into and scanned.
struct HistogramTile {
  std::int32_t first_spaxel = 0;
  std::int32_t n_spaxels = 0;
  int n_nodes = 0;
  VelocityBins velocity;
  DustExpansionView dust;   // dust.phi: the device's copy of the table
  double one_plus_z = 1.0;  // 1 + z: with the velocity nodes, the shift of every basis row
  EdgeWindow edges[2];      // the templates' blue and red ends
  IFUSIM_HD std::size_t spectrum_columns() const {
    return static_cast<std::size_t>(n_nodes) * velocity.n * dust.rank;
  }
  IFUSIM_HD std::size_t edge_column(int e) const {
    std::size_t c = spectrum_columns();
    for (int k = 0; k < e; ++k) c += 2 * static_cast<std::size_t>(edges[k].n_bins) * dust.rank;
    return c;
  }
  IFUSIM_HD std::size_t columns() const { return edge_column(2); }

  // Row windows (nullptr: none, each row holds all columns), on the device that deposits:
  // n_spaxels + 1 starts, and per row its first velocity node and their count (2 values).
  const std::int64_t* row_start = nullptr;
  const std::int32_t* row_window = nullptr;
  // Where row `row`'s entries start, and the place of its spectrum column (node, velocity node
  // j) and of its edge columns (edge_column(e) + offset) from there.
  IFUSIM_HD std::size_t row_base(std::int32_t row) const {
    return row_start ? static_cast<std::size_t>(row_start[row])
                     : static_cast<std::size_t>(row) * columns();
  }
  IFUSIM_HD std::size_t row_spectrum_place(std::int32_t row, int node, int j) const {
    const int first = row_window ? row_window[2 * row] : 0;
    const int count = row_window ? row_window[2 * row + 1] : velocity.n;
    return (static_cast<std::size_t>(node) * count + (j - first)) * dust.rank;
  }
  IFUSIM_HD std::size_t row_edge_place(std::int32_t row, int e) const {
    const std::size_t edge = edge_column(e) - spectrum_columns();
    return row_window
               ? static_cast<std::size_t>(n_nodes) * row_window[2 * row + 1] * dust.rank + edge
               : spectrum_columns() + edge;
  }
  // Entries a row holds with a window of `count` velocity nodes.
  std::size_t row_entries(std::int32_t count) const {
    return (static_cast<std::size_t>(n_nodes) * count) * dust.rank +
           (columns() - spectrum_columns());
  }
};

// The binned product on a device (binned_product_on_device, binned_product.h): the tile's H over
// its populated columns by rows (compressed sparse rows: row r's entries offsets[r] ..
// offsets[r + 1], its columns ascending, each an index into the populated columns, which are
// B's rows), and whether each block of rows_per_block rows takes the host's dense product (float
// sums) or its sparse one (float sums in groups of kScaledRowsGroup entries, vector_kernels.h,
// added in double). In the device's memory.
struct BasisProductRows {
  const std::size_t* offsets = nullptr;  // n_rows + 1
  const std::int32_t* column = nullptr;
  const double* value = nullptr;        // M_sun
  const std::uint8_t* dense = nullptr;  // a flag a block of rows
  std::size_t n_rows = 0;
  std::size_t rows_per_block = 1;
  // A dust segment's reduced rows (binned_product.cpp): a dense block's voxel sums each term's
  // entries (column % term_panels, q by q in the row) in float on its own and adds the terms' sums
  // in double. 0: one float sum over the row.
  std::size_t term_panels = 0;
};

// The binned product's transpose on a device (binned_product_transpose_on_device,
// binned_product.h), one chunk of B's bins: each entry's row of the tile and its row of the chunk
// (its column among the used ones), the chunk's first bin of the tile's cotangent rows (row r at
// r * cotangent_stride) and the chunk of B (n_used x width, row-major, double), each entry's
// dL/dH so far, and eight lane sums an entry of the batch. In the device's memory.
struct TransposeDots {
  const std::uint32_t* row = nullptr;
  const std::int32_t* basis_row = nullptr;
  const double* cotangent = nullptr;
  std::size_t cotangent_stride = 0;
  const double* basis = nullptr;
  std::size_t width = 0;
  double* sums = nullptr;
  double* lanes = nullptr;  // 8 an entry of the batch, the batch's first entry at lanes[0]
  // Entry e's cotangent row and row of B over the chunk.
  IFUSIM_HD const double* g_of(std::size_t e) const {
    return cotangent + static_cast<std::size_t>(row[e]) * cotangent_stride;
  }
  IFUSIM_HD const double* b_of(std::size_t e) const {
    return basis + static_cast<std::size_t>(basis_row[e]) * width;
  }
};

// One device's sparse histogram: sorted unique indices (row * columns + column) and their
// fixed-point sums.
using SparseHistogramShard = KeyedSums;

// Bytes a sparse histogram entry takes at most while it is made (the plan's estimate): index
// and value (16), the sort's second copy (16) and its scratch, and the per-star offsets
// (8 bytes a star, at least 8 entries each). Held to by sort_reduce_by_key
// (data/backend/algorithms.inl), whose measured peak the tests compare with it.
inline constexpr double kSparseEntryBytes = 40.0;

}  // namespace ifusim

IFUSIM_DECLARE_BACKENDS(
    void accumulate_stellar_spectra(const Device& device, const ifusim::SspView& ssp,
                                    const ifusim::WaveBins& bins, double redshift,
                                    const ifusim::DustCurve& dust, const ifusim::StarViews& stars,
                                    double counts_per_unit, Span<std::int64_t> cube_sums,
                                    int band_first_bin, int band_end_bin,
                                    double light_counts_per_unit,
                                    Span<std::int64_t> light_moment_sums, double velocity_unit_kms);
    void accumulate_mass_moments(const Device& device, const ifusim::StarViews& stars,
                                 double counts_per_unit, Span<std::int64_t> moment_sums,
                                 double velocity_unit_kms);
    void count_velocity_nodes(const Device& device, const ifusim::SspView& ssp,
                              const ifusim::StarViews& stars, const ifusim::HistogramTile& tile,
                              Span<std::int64_t> counts, bool counts_shared);
    void accumulate_histogram(const Device& device, const ifusim::SspView& ssp,
                              const ifusim::WaveBins& bins, const ifusim::StarViews& stars,
                              const ifusim::HistogramTile& tile, double counts_per_unit,
                              Span<std::int64_t> histogram, bool histogram_shared);
    ifusim::SparseHistogramShard sparse_histogram(
        const Device& device, const ifusim::SspView& ssp, const ifusim::WaveBins& bins,
        const ifusim::StarViews& stars, const ifusim::HistogramTile& tile, double counts_per_unit);
    void mark_histogram_entries(const Device& device, const ifusim::SspView& ssp,
                                const ifusim::WaveBins& bins, const ifusim::StarViews& stars,
                                const ifusim::HistogramTile& tile, Span<std::int64_t> marks,
                                bool marks_shared);
    void multiply_basis_span(const Device& device, const ifusim::BasisProductRows& rows,
                             const float* basis, std::size_t width, float* cube_rows,
                             std::size_t cube_stride);
    void add_transpose_dots(const Device& device, const ifusim::TransposeDots& dots,
                            std::size_t first_entry, std::size_t n_entries);
    void gather_star_gradients(const Device& device, const ifusim::SspView& ssp,
                               const ifusim::WaveBins& bins, const ifusim::StarViews& stars,
                               const ifusim::HistogramTile& tile, const double* dl_dh,
                               const ifusim::StarGradientViews& out);)
