// The binned product's voxels on a GPU (binned_product_on_device, MultiplyBasisSpan in
// stages/stellar_spectra/kernels.inl compiled by nvcc) against the host's product: bitwise the same
// cube rows and light moments, on the cases the CPU suite runs through the CPU backend
// (tests/binned_product_cases.h): an FMA nvcc contracted, a float sum in another order, or a
// skipped entry that the host counts would each change the last bits of some voxel. The same for
// the product's transpose (binned_product_transpose_on_device, TransposeDotLanes and
// FinishTransposeDots): bitwise the host's dL/dH, whose eight lanes, tree and tail an FMA or
// another order would change.
#include <catch2/catch.hpp>

#include "binned_product_cases.h"
#include "pipeline/devices.h"

using namespace ifusim;

TEST_CASE("cuda: the binned product on a GPU is bitwise the host's, dense and sparse blocks",
          "[cuda]") {
  // Two logical devices on the GPU: the product runs on the first, as BinnedSpectra::reduce does.
  auto mesh = make_mesh(Backend::cuda, 2);
  const Device& device = mesh->device(0);
  REQUIRE(device.is_cuda());
  for (const bool log_grid : {false, true})
    for (const bool dust : {false, true}) {
      INFO((log_grid ? "logarithmic" : "linear") << " grid, " << (dust ? "" : "no ") << "dust");
      test::ProductCase c(log_grid, dust);
      const test::ProductResult host =
          test::run_product(c, [](auto&&... args) { return binned_product(args...); });
      const std::size_t chunk_bytes = c.n_populated * 64 * sizeof(float);
      for (const std::size_t span_bytes : {kDeviceBasisBytes, 2 * chunk_bytes}) {
        INFO("device span of B: " << span_bytes << " bytes");
        c.in.device_basis_bytes = span_bytes;
        test::check_bitwise(host, test::run_on_device(device, c));
      }
    }
}

TEST_CASE("cuda: the binned product transposed on a GPU is bitwise the host's", "[cuda]") {
  auto mesh = make_mesh(Backend::cuda, 2);
  const Device& device = mesh->device(0);
  REQUIRE(device.is_cuda());
  for (const bool log_grid : {false, true})
    for (const bool dust : {false, true}) {
      INFO((log_grid ? "logarithmic" : "linear") << " grid, " << (dust ? "" : "no ") << "dust");
      test::ProductCase c(log_grid, dust);
      for (const bool windows : {false, true}) {
        INFO((windows ? "entries at places in row windows" : "entries at row * columns + column"));
        const test::TransposeCase t(c, windows);
        for (const std::size_t chunk : test::transpose_test_chunks()) {
          INFO("chunks of " << chunk << " bins (0: the default bound, one chunk)");
          test::set_transpose_chunk(c, chunk);
          const std::vector<double> host =
              t.run(c, [](auto&&... args) { binned_product_transpose(args...); });
          test::check_transpose_bitwise(t, host, test::run_transpose_on_device(device, c, t));
        }
      }
    }
}
