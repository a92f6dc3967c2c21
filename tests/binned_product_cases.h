#pragma once
// The binned product's device path (binned_product_on_device) against the host's
// (binned_product), on the same inputs: the CPU suite runs the device functor through the CPU
// backend's dispatch (tests/test_stellar_spectra.cpp), the CUDA suite through a GPU's
// (tests/test_cuda_product.cpp). Both must give the host's cube rows and light moments bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "data/buffer.h"
#include "ssp_fixture.h"
#include "stages/stellar_spectra/binned_product.h"
#include "stages/stellar_spectra/dust_expansion.h"

namespace ifusim::test {

// One product's input: the synthetic library on a linear (MUSE-like: 1.25 A from 7900 A, 333 bins,
// the templates' red end at 8000 A rest inside the band) or a logarithmic (MaNGA-like: dlog10 =
// 1e-4 from 3600 A, 1000 bins, the blue end at 3000 A rest inside the band at z = 0.25) grid, a
// window of bins at that end (the S and P columns, EdgeWindow), velocity nodes +-300 km/s, with
// or without a dust expansion (CCM89, A_V <= 5 mag: rank 7 or so, and its segments' fewer terms),
// 133 rows (blocks of 32, 32, 32, 32 and 5), and H with a dense first and last block, sparse
// second and fourth ones and an empty third (its dust groups mostly not whole: the product makes
// them whole). B in chunks of 64 bins. Held in place: the input points into its tables.
struct ProductCase {
  SspTables tables;
  DustExpansion dust;
  DustSegments dust_segments;
  BinnedProductInput in;
  HostHistogram histogram;
  std::size_t n_populated = 0;

  ProductCase(bool log_grid, bool with_dust) : tables(make_ssp_tables(synthetic_ssp_grid())) {
    in.ssp = tables.host_view(OutsideGrid::clamp);
    if (log_grid) {
      in.bins.start_angstrom = 3600.0;
      in.bins.log10_step = 1e-4;
      in.bins.n = 1000;
      in.tile.one_plus_z = 1.25;
    } else {
      in.bins.start_angstrom = 7900.0;
      in.bins.step_angstrom = 1.25;
      in.bins.n = 333;
      in.tile.one_plus_z = 1.02;
    }
    in.band_first_bin = 40;
    in.band_end_bin = in.bins.n - 30;
    in.tile.n_spaxels = 133;
    in.tile.n_nodes = static_cast<int>(tables.log_age.size() * tables.log_z.size());
    in.tile.velocity = {-1e-3, 1e-4, 20};
    if (with_dust) {
      dust = make_dust_expansion(DustCurve{DustCurveKind::ccm89, 3.1}, 5.0, 2500.0, 8500.0);
      REQUIRE(dust.rank > 1);
      in.dust = &dust;
      in.tile.dust = dust.view(dust.phi.data());
      dust_segments = make_dust_segments(dust, in.bins, in.tile);
      REQUIRE(dust_segments.max_terms < dust.rank);
      in.dust_segments = &dust_segments;
    }
    set_end_window(log_grid ? 0 : 1);
    REQUIRE(in.tile.edges[log_grid ? 0 : 1].n_bins > 0);
    const std::size_t n_columns = in.tile.columns();
    in.basis_memory_bytes = 64 * n_columns * sizeof(float);  // chunks of 64 bins

    // H: (row, column) entries of 1e4 x [0.5, 1.5) Msun from a seeded generator.
    std::uint64_t state = log_grid ? 2024 : 1977;
    auto uniform = [&state] {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<double>(state >> 11) / 9007199254740992.0;
    };
    const std::size_t dense_columns = std::min<std::size_t>(n_columns, 120);
    std::vector<char> populated(n_columns, 0);
    for (std::size_t r = 0; r < static_cast<std::size_t>(in.tile.n_spaxels); ++r)
      for (std::size_t c = 0; c < n_columns; ++c) {
        const std::size_t block = r / kRowsPerBlock;
        const double u = uniform();
        // Dense blocks: most of the first columns, and every edge column now and then (the end's
        // S and P rows of B, which are mostly zero); sparse ones: scattered columns.
        const bool keep =
            (block == 0 || block == 4)
                ? (c < dense_columns && u < 0.9) || (c >= in.tile.spectrum_columns() && u < 0.7)
            : (block == 1 || block == 3) ? u < 0.004
                                         : false;
        if (!keep) continue;
        histogram.index.push_back(r * n_columns + c);
        histogram.mass_msun.push_back(1e4 * (0.5 + uniform()));
        populated[c] = 1;
      }
    n_populated = static_cast<std::size_t>(std::count(populated.begin(), populated.end(), 1));
  }
  ProductCase(const ProductCase&) = delete;
  ProductCase& operator=(const ProductCase&) = delete;

  std::size_t n_voxels() const { return static_cast<std::size_t>(in.tile.n_spaxels) * in.bins.n; }

  // The window of template end e (0 blue, 1 red), as the stage sets it (stellar_spectra.cpp's
  // set_edge_windows): the bins that lambda_end D reaches over the velocity nodes.
  void set_end_window(int e) {
    const VelocityBins& v = in.tile.velocity;
    const double d_lo = in.tile.one_plus_z * std::exp(v.u_min);
    const double d_hi = in.tile.one_plus_z * std::exp(v.u_min + (v.n - 1) * v.du);
    EdgeWindow& window = in.tile.edges[e];
    window.red = e == 1;
    window.rest_angstrom = window.red ? tables.edges.back() : tables.edges.front();
    double max_flux = 0.0;
    for (int node = 0; node < in.ssp.n_age * in.ssp.n_z; ++node)
      max_flux = std::max(max_flux, std::abs(end_flux_density(in.ssp, node, window.red)));
    window.first_bin = in.bins.vacuum_bin(window.rest_angstrom * d_lo, 0, in.bins.n);
    window.n_bins =
        in.bins.vacuum_bin(window.rest_angstrom * d_hi, 0, in.bins.n) - window.first_bin + 1;
    window.flux_scale = max_flux / d_lo;
  }
};

// The product's cube rows and light moments.
struct ProductResult {
  std::vector<float> cube;
  std::vector<double> moments;
  BinnedProductStats stats;
};

template <class Product>
ProductResult run_product(const ProductCase& c, Product&& product) {
  ProductResult out{std::vector<float>(c.n_voxels(), 0.0f),
                    std::vector<double>(3 * static_cast<std::size_t>(c.in.tile.n_spaxels), 0.0),
                    {}};
  out.stats = product(c.in, c.histogram, out.cube.data(), out.moments.data());
  return out;
}

// The host's result has light and no NaN, both kinds of block; the device's is the same bits,
// voxel by voxel and moment by moment.
inline void check_bitwise(const ProductResult& host, const ProductResult& device) {
  double peak = 0.0;
  std::size_t nonzero = 0;
  for (const float v : host.cube) {
    REQUIRE(std::isfinite(v));
    peak = std::max(peak, std::abs(static_cast<double>(v)));
    nonzero += v != 0.0f;
  }
  REQUIRE(peak > 0.0);
  CHECK(host.stats.dense_blocks == 2);
  CHECK(host.stats.sparse_blocks == 2);
  CHECK(device.stats.populated_columns == host.stats.populated_columns);
  CHECK(device.stats.nonzeros == host.stats.nonzeros);
  CHECK(device.stats.dense_blocks == host.stats.dense_blocks);
  CHECK(device.stats.sparse_blocks == host.stats.sparse_blocks);
  REQUIRE(device.cube.size() == host.cube.size());
  std::size_t differ = 0, first_differ = host.cube.size();
  for (std::size_t i = 0; i < host.cube.size(); ++i) {
    REQUIRE_FALSE(std::isnan(device.cube[i]));
    if (std::memcmp(&device.cube[i], &host.cube[i], sizeof(float)) != 0) {
      if (differ++ == 0) first_differ = i;
    }
  }
  INFO(nonzero << " non-zero voxels of " << host.cube.size() << "; first differing voxel "
               << first_differ);
  CHECK(differ == 0);
  REQUIRE(device.moments.size() == host.moments.size());
  for (std::size_t i = 0; i < host.moments.size(); ++i) {
    REQUIRE(std::isfinite(device.moments[i]));
    CHECK(std::memcmp(&device.moments[i], &host.moments[i], sizeof(double)) == 0);
  }
}

// binned_product_on_device on `device`, with its peak memory on the device's backend
// (DeviceBuffer's counters) held to device_product_bytes, the plan's estimate
// (stellar_spectra.cpp), given the product's own counts.
inline ProductResult run_on_device(const Device& device, const ProductCase& c) {
  const std::size_t before = memory::bytes_in_use(device.backend);
  memory::reset_peak(device.backend);
  ProductResult out =
      run_product(c, [&](auto&&... args) { return binned_product_on_device(device, args...); });
  const std::size_t peak = memory::peak_bytes(device.backend) - before;
  const DeviceProductBytes planned = device_product_bytes(
      static_cast<std::size_t>(c.in.tile.n_spaxels), static_cast<std::size_t>(c.in.bins.n),
      out.stats.nonzeros, out.stats.populated_columns,
      basis_chunk_bins(c.in.basis_memory_bytes, c.in.tile.columns()), c.in.device_basis_bytes,
      c.in.dust_segments != nullptr);
  INFO("peak " << peak << " bytes; planned: H's rows " << planned.h_rows << ", B's span "
               << planned.basis_span << ", cube rows " << planned.cube_rows);
  CHECK(peak >= planned.cube_rows + planned.basis_span);
  CHECK(peak <= planned.h_rows + planned.basis_span + planned.cube_rows);
  return out;
}

// The transpose's case (binned_product_transpose against binned_product_transpose_on_device): the
// product case's H as the entries (its dense first and last blocks are dense for the transpose
// too, its sparse ones sparse), cotangent rows of seeded values in [-1, 1), and dL/dH holding
// a seeded value in every 7th element beforehand (the transpose adds to them). With `windows`, the
// entries' places are spread over a longer array (3 free elements before each row's, one more at
// the start), as the stage's row windows place them; without, each at row * columns + column.
struct TransposeCase {
  TileEntries entries;
  std::vector<double> cotangent, dl_dh;

  TransposeCase(const ProductCase& c, bool windows) {
    const auto n_rows = static_cast<std::size_t>(c.in.tile.n_spaxels);
    const std::size_t n_columns = c.in.tile.columns();
    entries.offsets.assign(n_rows + 1, 0);
    for (const std::uint64_t i : c.histogram.index) {  // ascending: by rows, columns ascending
      ++entries.offsets[i / n_columns + 1];
      entries.column.push_back(static_cast<std::uint32_t>(i % n_columns));
    }
    for (std::size_t r = 0; r < n_rows; ++r) entries.offsets[r + 1] += entries.offsets[r];
    if (windows)
      for (std::size_t r = 0; r < n_rows; ++r)
        for (std::size_t e = entries.offsets[r]; e < entries.offsets[r + 1]; ++e)
          entries.place.push_back(1 + e + 3 * r);
    std::uint64_t state = windows ? 31 : 37;
    auto uniform = [&state] {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<double>(state >> 11) / 9007199254740992.0;
    };
    cotangent.resize(c.n_voxels());
    for (double& g : cotangent) g = 2.0 * uniform() - 1.0;
    dl_dh.resize(windows ? entries.column.size() + 3 * n_rows + 1 : n_rows * n_columns);
    // Zero but every 7th element: a value held beforehand would hide the dots' last bits.
    for (std::size_t i = 0; i < dl_dh.size(); ++i) dl_dh[i] = i % 7 ? 0.0 : 2.0 * uniform() - 1.0;
  }

  template <class Transpose>
  std::vector<double> run(const ProductCase& c, Transpose&& transpose) const {
    std::vector<double> out = dl_dh;
    transpose(c.in, entries, cotangent.data(), out.data());
    return out;
  }
};

// The host's dL/dH is finite, and its entries changed from what they held; the device's is the
// same bits, element by element (the entries' and the others, which neither may touch).
inline void check_transpose_bitwise(const TransposeCase& t, const std::vector<double>& host,
                                    const std::vector<double>& device) {
  REQUIRE(host.size() == t.dl_dh.size());
  REQUIRE(device.size() == host.size());
  std::size_t changed = 0;
  for (std::size_t i = 0; i < host.size(); ++i) {
    REQUIRE(std::isfinite(host[i]));
    changed += host[i] != t.dl_dh[i];
  }
  INFO(changed << " of " << t.entries.column.size() << " entries changed by the host's transpose");
  REQUIRE(changed > t.entries.column.size() / 2);
  std::size_t differ = 0, first_differ = host.size();
  for (std::size_t i = 0; i < host.size(); ++i) {
    REQUIRE_FALSE(std::isnan(device[i]));
    if (std::memcmp(&device[i], &host[i], sizeof(double)) != 0 && differ++ == 0) first_differ = i;
  }
  INFO("first differing element " << first_differ << " (host "
                                  << (first_differ < host.size() ? host[first_differ] : 0.0)
                                  << ", device "
                                  << (first_differ < host.size() ? device[first_differ] : 0.0)
                                  << ")");
  CHECK(differ == 0);
}

// binned_product_transpose_on_device on `device`, its peak memory on the device's backend held
// to device_transpose_bytes.
inline std::vector<double> run_transpose_on_device(const Device& device, const ProductCase& c,
                                                   const TransposeCase& t) {
  const std::size_t before = memory::bytes_in_use(device.backend);
  memory::reset_peak(device.backend);
  std::vector<double> out =
      t.run(c, [&](auto&&... args) { binned_product_transpose_on_device(device, args...); });
  const std::size_t peak = memory::peak_bytes(device.backend) - before;
  const DeviceTransposeBytes planned = device_transpose_bytes(
      static_cast<std::size_t>(c.in.tile.n_spaxels), static_cast<std::size_t>(c.in.bins.n),
      t.entries.column.size(), c.n_populated,
      transpose_chunk_bins(c.in.basis_memory_bytes, c.in.transpose_chunk_bytes, c.n_populated));
  INFO("peak " << peak << " bytes; planned: cotangent rows " << planned.cotangent_rows
               << ", entries " << planned.entries << ", lanes " << planned.lanes << ", B's chunk "
               << planned.basis_chunk);
  CHECK(peak == planned.cotangent_rows + planned.entries + planned.lanes + planned.basis_chunk);
  return out;
}

// The transpose's chunk widths the tests take (bins): one chunk (the default bound), and chunks
// of 104 (whole eights), 100 (4 left over a chunk) and 3 (every product past the lanes) bins,
// set through basis_memory_bytes over the case's used (= populated) columns.
inline std::vector<std::size_t> transpose_test_chunks() {
  return {0, 104, 100, 3};
}
inline void set_transpose_chunk(ProductCase& c, std::size_t chunk_bins) {
  if (chunk_bins == 0) {
    c.in.basis_memory_bytes = 64 * c.in.tile.columns() * sizeof(float);
    c.in.transpose_chunk_bytes = kTransposeChunkBytes;
    return;
  }
  c.in.basis_memory_bytes = chunk_bins * c.n_populated * sizeof(double);
  c.in.transpose_chunk_bytes = 1;
  REQUIRE(transpose_chunk_bins(c.in.basis_memory_bytes, c.in.transpose_chunk_bytes,
                               c.n_populated) == chunk_bins);
}

// The device paths on `device` (a CPU device: the functors through the CPU backend's dispatch; a
// GPU in the CUDA suite) against the host's, both grids, with and without dust: the product with
// B sent whole, two chunks a span and (one_chunk_spans) a chunk at a time; the transpose at each
// of transpose_test_chunks() with both kinds of places.
inline void check_device_product(const Device& device, bool one_chunk_spans) {
  for (const bool log_grid : {false, true})
    for (const bool dust : {false, true}) {
      INFO((log_grid ? "logarithmic" : "linear") << " grid, " << (dust ? "" : "no ") << "dust");
      ProductCase c(log_grid, dust);
      const ProductResult host =
          run_product(c, [](auto&&... args) { return binned_product(args...); });
      const std::size_t chunk_bytes = c.n_populated * 64 * sizeof(float);
      std::vector<std::size_t> spans{kDeviceBasisBytes, 2 * chunk_bytes};
      if (one_chunk_spans) spans.push_back(1);
      for (const std::size_t span_bytes : spans) {
        INFO("device span of B: " << span_bytes << " bytes");
        c.in.device_basis_bytes = span_bytes;
        check_bitwise(host, run_on_device(device, c));
      }
    }
}

inline void check_device_transpose(const Device& device) {
  for (const bool log_grid : {false, true})
    for (const bool dust : {false, true}) {
      INFO((log_grid ? "logarithmic" : "linear") << " grid, " << (dust ? "" : "no ") << "dust");
      ProductCase c(log_grid, dust);
      for (const bool windows : {false, true}) {
        INFO((windows ? "entries at places in row windows" : "entries at row * columns + column"));
        const TransposeCase t(c, windows);
        for (const std::size_t chunk : transpose_test_chunks()) {
          INFO("chunks of " << chunk << " bins (0: the default bound, one chunk)");
          set_transpose_chunk(c, chunk);
          const std::vector<double> host =
              t.run(c, [](auto&&... args) { binned_product_transpose(args...); });
          check_transpose_bitwise(t, host, run_transpose_on_device(device, c, t));
        }
      }
    }
}

}  // namespace ifusim::test
