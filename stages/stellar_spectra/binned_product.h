#pragma once
// The binned method's second half, on the host after psum: cube rows = H x B (see
// stellar_spectra.h). Only populated columns of H are given a row of B, and each block of
// spaxels takes a dense product (Eigen's GEMM, in float, summed in double) where its
// part of H is dense and a sparse one (one axpy per non-zero) where it is not, so that a wide,
// sparsely filled field costs what its stars cost. Row blocks are independent and each is computed
// the same way whatever the number of threads or devices, so the cube is bitwise reproducible.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "stages/stellar_spectra/stellar_spectra.h"

namespace ifusim {

// Spaxels are multiplied in blocks of this many rows, counted from spaxel 0 of the field: tiles
// of the histogram start at multiples of it, so that every block is the same whatever the tiling.
inline constexpr std::size_t kRowsPerBlock = 32;

struct BinnedProductInput {
  SspView ssp;  // host view of the template tables
  WaveBins bins;
  const DustExpansion* dust = nullptr;  // the terms of the dust axis (tile.dust); none without
  HistogramTile tile;
  int band_first_bin = 0, band_end_bin = 0;  // bins whose energy weighs the light moments
  std::size_t basis_memory_bytes = std::size_t(512) << 20;  // B held at once (column chunks)
};

struct BinnedProductStats {
  std::size_t populated_columns = 0;  // of tile.columns()
  std::size_t nonzeros = 0;           // of H
  std::size_t dense_blocks = 0, sparse_blocks = 0;
};

// The reduced histogram of one tile on the host: its non-zero entries, sorted by index
// (row * tile.columns() + column), in M_sun.
struct HostHistogram {
  std::vector<std::uint64_t> index;
  std::vector<double> mass_msun;
};

// histogram: the tile's reduced H. Adds the tile's rows of the cube (n_spaxels x bins.n,
// L_sun / A) into cube_rows, which must hold zeros (each block of rows summed in double and
// rounded to float once per chunk of B's columns: once unless B exceeds basis_memory_bytes), and
// writes the light-weighted moments (w, w v, w v^2 per spaxel, w in L_sun within the band) into
// light_moments.
BinnedProductStats binned_product(const BinnedProductInput& in, const HostHistogram& histogram,
                                  float* cube_rows, double* light_moments);

// Row `column` of B (the tile's column layout, HistogramTile). A spectrum column (node, j, a):
// the node's template for unit initial mass, shifted by (1 + z) e^(u_j), resampled onto the
// observed bins (L_sun / A), continued beyond its ends within their windows (EdgeWindow), and
// with dust times term r's factor psi_r at each bin centre's rest-frame wavelength (the exact
// kernel attenuates there). An S or P column of a template's end: minus the continuation's
// light that one unit of it stands for, times psi_r at the rest wavelengths of a star whose
// step is at that bin's centre. Returns the column's light weight: for a spectrum column, the
// energy of the (uncontinued) template within the band and its velocity; 0 for the ends' columns,
// whose light is not a star's.
struct BasisColumn {
  double band_energy = 0.0;  // L_sun per M_sun
  double velocity_kms = 0.0;
};
BasisColumn basis_row(const BinnedProductInput& in, std::size_t column, double* out);

}  // namespace ifusim
