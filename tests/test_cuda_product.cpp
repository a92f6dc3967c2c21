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
  REQUIRE(mesh->device(0).is_cuda());
  test::check_device_product(mesh->device(0), false);
}

TEST_CASE("cuda: the binned product transposed on a GPU is bitwise the host's", "[cuda]") {
  auto mesh = make_mesh(Backend::cuda, 2);
  REQUIRE(mesh->device(0).is_cuda());
  test::check_device_transpose(mesh->device(0));
}
