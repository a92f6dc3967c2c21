#pragma once
// The binned method's second half, on the host after psum: cube rows = H x B (see
// stellar_spectra.h). Only populated columns of H are given a row of B, and each block of
// spaxels takes a dense product (multiply_rows, a register-tiled GEMM summed in float) where its
// part of H is dense and a sparse one (one axpy per non-zero, in float groups added in double)
// where it is not, so that a wide, sparsely filled field costs what its stars cost. Row blocks
// are independent and each is computed the same way whatever the number of threads or devices,
// so the cube is bitwise reproducible.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "stages/stellar_spectra/stellar_spectra.h"

namespace ifusim {

// Spaxels are multiplied in blocks of this many rows, counted from spaxel 0 of the field: tiles
// of the histogram start at multiples of it, so that every block is the same whatever the tiling.
inline constexpr std::size_t kRowsPerBlock = 32;

// B is made and multiplied in chunks of wavelength bins (binned_product.cpp), a chunk to a thread
// at a time, each at most basis_chunk_bytes were every column of the tile populated: a thread
// holds its chunk (a dense block reads its columns' rows where they lie), within the bound. The
// bound follows the whole field's cube, not the tile, and not the thread count. A floor of 4 MiB:
// at MUSE's 25 x 25 x 3721 (4820 columns, 1065 populated at 1e5 stars) chunks of 192 bins, two
// threads holding ~2 MB beside the 9.3 MB float cube (issue 22: 62.5 MB for the whole process at
// 1e5 stars), where B whole (15.9 MB in float) and each thread's gather of it were ~48 MB. A 64th
// of the field's cube counted in double (as it was held when this bound was set) above it, so that
// a large field (MUSE-WFM's 2.7 GB cube) keeps wide chunks: each chunk makes its bins of every
// basis row again from the chunk's first edge (one more search).
inline constexpr std::size_t kMinBasisChunkBytes = std::size_t(4) << 20;
inline std::size_t basis_chunk_bytes(std::size_t field_spaxels, std::size_t n_wave) {
  const std::size_t cube_bytes = field_spaxels * n_wave * sizeof(double);
  return std::max(kMinBasisChunkBytes, cube_bytes / 64);
}

// B's chunks of bins are whole multiples of this many bins: the register tile of the dense
// blocks' product over the bins (multiply_rows, stages/common/vector_kernels.h: 4 x 16 floats),
// so that only the last chunk has columns left over for its narrower paths.
inline constexpr std::size_t kChunkBinAlign = 64;
// With dust segments each chunk is one segment (binned_product.cpp), a whole register tile too.
static_assert(kDustSegmentBins % kChunkBinAlign == 0);
// The bins of a chunk: as many whole kChunkBinAlign as fit memory_bytes of float B were all the
// tile's n_columns populated (at least one kChunkBinAlign).
inline std::size_t basis_chunk_bins(std::size_t memory_bytes, std::size_t n_columns) {
  const std::size_t align_bytes =
      std::max<std::size_t>(1, n_columns) * sizeof(float) * kChunkBinAlign;
  return std::max<std::size_t>(1, memory_bytes / align_bytes) * kChunkBinAlign;
}

// The product on a device (binned_product_on_device): B's rows are made on the host chunk by
// chunk as binned_product makes them and sent to the device a span of whole chunks at a time, each
// span at most this many bytes of float B (one chunk where a chunk is larger), in the device's
// memory and in a pinned host copy. The voxels do not depend on the spans (each is one sum over
// its row's entries), so the bound is the device's memory alone: at 512 MiB a MUSE field's
// 1065 populated columns (1e5 stars) take B whole, a MUSE-WFM run's tens of thousands a few
// spans.
inline constexpr std::size_t kDeviceBasisBytes = std::size_t(512) << 20;

// The transpose's chunks of B (binned_product_transpose, double over the columns its entries use):
// wider than the forward's, at least this many bytes (binned_product.cpp says why).
inline constexpr std::size_t kTransposeChunkBytes = std::size_t(8) << 20;
// Its chunks' bins: max(basis_memory_bytes, transpose_chunk_bytes) of double B over n_used rows.
inline std::size_t transpose_chunk_bins(std::size_t basis_memory_bytes,
                                        std::size_t transpose_chunk_bytes, std::size_t n_used) {
  return std::max<std::size_t>(1, std::max(basis_memory_bytes, transpose_chunk_bytes) /
                                      (std::max<std::size_t>(1, n_used) * sizeof(double)));
}

struct BinnedProductInput {
  SspView ssp;  // host view of the template tables
  WaveBins bins;
  const DustExpansion* dust = nullptr;  // the terms of the dust axis (tile.dust); none without
  // With dust, the expansion's terms by segments of bins (make_dust_segments): the product sums
  // each segment over its fewer terms, and B's rows (basis_row, the transpose) are the reduced
  // product's. None: every bin takes the expansion's own terms.
  const DustSegments* dust_segments = nullptr;
  HistogramTile tile;
  int band_first_bin = 0, band_end_bin = 0;  // bins whose energy weighs the light moments
  // Each thread's chunk of B: basis_chunk_bytes of the whole field.
  std::size_t basis_memory_bytes = kMinBasisChunkBytes;
  // binned_product_on_device: B's span on the device (and its pinned host copy) at most.
  std::size_t device_basis_bytes = kDeviceBasisBytes;
  // binned_product_transpose: B's chunks in double over the used columns take at most
  // max(basis_memory_bytes, transpose_chunk_bytes) (kTransposeChunkBytes; smaller in the tests,
  // for several chunks).
  std::size_t transpose_chunk_bytes = kTransposeChunkBytes;
};

// Where a product's (or its transpose's) time went, on the host's clock: H's rows and the row
// blocks (layout), B's rows (basis; the host's forward product sums its voxels there too, chunk by
// chunk), sending B, H and the cotangent rows to a device (transfer), and the sums (sums; on a
// device, with their copy back). The stage logs them at debug level: what to move to a GPU next
// (docs/gpu.md).
struct ProductSeconds {
  double layout = 0.0, basis = 0.0, transfer = 0.0, sums = 0.0;
  ProductSeconds& operator+=(const ProductSeconds& o) {
    layout += o.layout;
    basis += o.basis;
    transfer += o.transfer;
    sums += o.sums;
    return *this;
  }
};

// The seconds since `t`, and `t` moved to now: ProductSeconds' parts (and the stage's own), one
// after another.
inline double lap_seconds(std::chrono::steady_clock::time_point& t) {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - t).count();
  t = now;
  return seconds;
}

struct BinnedProductStats {
  std::size_t populated_columns = 0;  // of tile.columns()
  std::size_t nonzeros = 0;           // of H
  std::size_t dense_blocks = 0, sparse_blocks = 0;
  ProductSeconds seconds;
};

// The reduced histogram of one tile on the host: its non-zero entries, sorted by index
// (row * tile.columns() + column), in M_sun.
struct HostHistogram {
  std::vector<std::uint64_t> index;
  std::vector<double> mass_msun;
};

// histogram: the tile's reduced H, taken (its entries become H's rows over the populated
// columns, and its index is freed before the sums: 16 bytes an entry fewer held during them).
// Adds the tile's rows of the cube (n_spaxels x bins.n, L_sun / A) into cube_rows, which must
// hold zeros (each voxel summed in double over all its columns and rounded to float once), and
// writes the light-weighted moments (w, w v, w v^2 per spaxel, w in L_sun within the band) into
// light_moments.
BinnedProductStats binned_product(const BinnedProductInput& in, HostHistogram histogram,
                                  float* cube_rows, double* light_moments);

// The same product with the voxels made on `device` (a GPU, or a CPU device in the tests: the
// one kernel source, MultiplyBasisSpan in kernels.inl): the host makes the populated columns, H's
// rows, the row blocks and their kinds, B's rows (in the same chunks of bins) and the light
// moments exactly as binned_product does; the device holds H's rows, a span of B and the tile's
// cube rows, and sums each voxel as the host's dense or sparse product sums it, operation for
// operation. The cube rows and the moments are bitwise binned_product's (for a finite B;
// tests/test_stellar_spectra.cpp and tests/test_cuda_product.cpp hold the two together). cube_rows
// must hold zeros, as for binned_product; it is overwritten with the product.
BinnedProductStats binned_product_on_device(const Device& device, const BinnedProductInput& in,
                                            HostHistogram histogram, float* cube_rows,
                                            double* light_moments);
// The bins of B's span on the device: as many whole chunks of chunk_bins as fit
// device_basis_bytes of float B over n_populated rows (at least one), at most n_wave.
inline std::size_t device_span_bins(std::size_t device_basis_bytes, std::size_t n_populated,
                                    std::size_t chunk_bins, std::size_t n_wave) {
  const std::size_t chunk_bytes =
      std::max<std::size_t>(1, n_populated) * chunk_bins * sizeof(float);
  return std::min(n_wave, std::max<std::size_t>(1, device_basis_bytes / chunk_bytes) * chunk_bins);
}
// Bytes binned_product_on_device holds on the device at most: H's rows (offsets, and a column
// index and a mass an entry; with dust segments, a segment's fewer at a time), B's span (its
// pinned host copy is as large; with dust segments one segment) and the tile's float cube rows.
struct DeviceProductBytes {
  std::size_t h_rows = 0, basis_span = 0, cube_rows = 0;
};
inline DeviceProductBytes device_product_bytes(std::size_t n_rows, std::size_t n_wave,
                                               std::size_t nonzeros, std::size_t n_populated,
                                               std::size_t chunk_bins,
                                               std::size_t device_basis_bytes, bool dust_segments) {
  DeviceProductBytes bytes;
  bytes.h_rows = (n_rows + 1) * sizeof(std::size_t) +
                 nonzeros * (sizeof(std::int32_t) + sizeof(double)) +
                 (n_rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const std::size_t span_bins =
      dust_segments ? std::min(n_wave, static_cast<std::size_t>(kDustSegmentBins))
                    : device_span_bins(device_basis_bytes, n_populated, chunk_bins, n_wave);
  bytes.basis_span = n_populated * span_bins * sizeof(float);
  bytes.cube_rows = n_rows * n_wave * sizeof(float);
  return bytes;
}

// Reverse mode (docs/gradients.md): the entries of a tile whose dL/dH is wanted (those the stars
// make), by rows (compressed sparse rows: entries offsets[r] .. offsets[r + 1] of column, each
// row's columns ascending).
struct TileEntries {
  std::vector<std::size_t> offsets;  // tile.n_spaxels + 1
  std::vector<std::uint32_t> column;
  // Where each entry's dL/dH goes in dl_dh (the tile's row windows); empty: r * columns + c.
  std::vector<std::size_t> place;
};

// The product's transpose: for every entry (r, c) of `entries`, adds
// sum_k cotangent_rows[r * bins.n + k] B[c, k] to dl_dh[r * tile.columns() + c], or at the
// entry's place (dL/dH from
// dL/d(the tile's cube rows), in double); other elements of dl_dh are not touched. B is made
// in chunks of bins as the forward product makes it; the chunks are taken in order and each row
// block's sums are made the same way whatever the thread count, so dL/dH is bitwise reproducible.
ProductSeconds binned_product_transpose(const BinnedProductInput& in, const TileEntries& entries,
                                        const double* cotangent_rows, double* dl_dh);

// The same transpose with the dot products made on `device` (a GPU, or a CPU device in the tests:
// the one kernel source, TransposeDotLanes and FinishTransposeDots in kernels.inl): the host
// makes B's chunks (the same used columns, chunk widths and values) and sends them one at a time;
// the device holds the tile's cotangent rows (sent once), each entry's row, its row of B's chunk
// and its dL/dH so far (the caller's value at its place, to which each chunk's dot is added in
// the chunks' order), and sums every entry's dot as multiply_by_transpose sums one element: eight
// lanes (q mod 8), the fixed tree, the last depth mod 8 products in order, no FMA. dl_dh is
// bitwise binned_product_transpose's (for finite B and cotangents; tests/test_stellar_spectra.cpp
// and tests/test_cuda_product.cpp). Entries' places must be distinct, as the stage's are.
ProductSeconds binned_product_transpose_on_device(const Device& device,
                                                  const BinnedProductInput& in,
                                                  const TileEntries& entries,
                                                  const double* cotangent_rows, double* dl_dh);
// The entries whose lanes the device holds at once (8 doubles an entry): the entries are taken
// in batches of at most this many per chunk (a MUSE-WFM tile's tens of millions in a few).
inline constexpr std::size_t kDeviceTransposeBatchEntries = std::size_t(1) << 21;
// Bytes binned_product_transpose_on_device holds on the device at most: the tile's cotangent rows
// (double), each entry's row, row of B and dL/dH, a batch's lanes, and B's chunk in double (its
// pinned host copy is as large).
struct DeviceTransposeBytes {
  std::size_t cotangent_rows = 0, entries = 0, lanes = 0, basis_chunk = 0;
};
inline DeviceTransposeBytes device_transpose_bytes(std::size_t n_rows, std::size_t n_wave,
                                                   std::size_t n_entries, std::size_t n_used,
                                                   std::size_t chunk_bins) {
  DeviceTransposeBytes bytes;
  bytes.cotangent_rows = n_rows * n_wave * sizeof(double);
  bytes.entries = n_entries * (2 * sizeof(std::uint32_t) + sizeof(double));
  bytes.lanes = std::min(n_entries, kDeviceTransposeBatchEntries) * 8 * sizeof(double);
  bytes.basis_chunk = n_used * std::min(chunk_bins, n_wave) * sizeof(double);
  return bytes;
}

// The segments of the observed axis for `dust` (dust_expansion.h, DustSegment): each over the
// attenuation ratios of the rest wavelengths its basis rows reach (the segment's bins, one bin
// beyond each end, over the tile's velocity nodes).
DustSegments make_dust_segments(const DustExpansion& dust, const WaveBins& bins,
                                const HistogramTile& tile);

// Row `column` of B (the tile's column layout, HistogramTile). A spectrum column (node, j, a):
// the node's template for unit initial mass, shifted by (1 + z) e^(u_j), resampled onto the
// observed bins (L_sun / A), continued beyond its ends within their windows (EdgeWindow), and
// with dust times term r's factor psi_r at each bin centre's rest-frame wavelength (the exact
// kernel attenuates there; with dust segments, the bin's segment's projected factor psi~_r, so
// that B is the reduced product's). An S or P column of a template's end: minus the continuation's
// light that one unit of it stands for, times psi_r at the rest wavelengths of a star whose
// step is at that bin's centre. Returns the column's light weight: for a spectrum column, the
// energy of the (uncontinued) template within the band and its velocity; 0 for the ends' columns,
// whose light is not a star's.
struct BasisColumn {
  double band_energy = 0.0;  // L_sun per M_sun
  double velocity_kms = 0.0;
};
BasisColumn basis_row(const BinnedProductInput& in, std::size_t column, double* out);
// Bins [k0, k1) of the same row, out[k - k0], with the band's energy over them added to
// light.band_energy bin after bin (so chunks of a row in order sum it as the whole row does).
void basis_row(const BinnedProductInput& in, std::size_t column, int k0, int k1, double* out,
               BasisColumn& light);

}  // namespace ifusim
