// The CUDA tests' runner: where no GPU can be used it says so on one visible line and exits 77,
// which CTest reports as "Skipped".
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <iostream>

#include "data/runtime.h"

int main(int argc, char** argv) {
  if (!ifusim::runtime::cuda_built()) {
    std::cout << "SKIPPED: CUDA tests: this build has no CUDA backend (nvcc was not found)\n";
    return 77;
  }
  if (ifusim::runtime::cuda_device_count() == 0) {
    std::cout << "SKIPPED: CUDA tests: " << ifusim::runtime::cuda_unavailable_reason() << "\n";
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
