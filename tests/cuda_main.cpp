// The CUDA tests' runner: where no GPU can be used it says so on one visible line and exits 77,
// which CTest reports as "Skipped". With IFUSIM_REQUIRE_CUDA=1 (a GPU node's check, or the
// CMake option IFUSIM_REQUIRE_CUDA) the same reason is a failure: a driver older than the
// toolkit, no /dev/nvidia*, or an empty CUDA_VISIBLE_DEVICES would otherwise pass as a skip.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "data/runtime.h"

namespace {
int cannot_run(const std::string& reason) {
  const char* required = std::getenv("IFUSIM_REQUIRE_CUDA");
  if (required && std::strcmp(required, "1") == 0) {
    std::cout << "FAILED: CUDA tests required (IFUSIM_REQUIRE_CUDA=1) but cannot run: " << reason
              << "\n";
    return 1;
  }
  std::cout << "SKIPPED: CUDA tests: " << reason << "\n";
  return 77;
}
}  // namespace

int main(int argc, char** argv) {
  if (!ifusim::runtime::cuda_built())
    return cannot_run("this build has no CUDA backend (nvcc was not found)");
  if (ifusim::runtime::cuda_device_count() == 0)
    return cannot_run(ifusim::runtime::cuda_unavailable_reason());
  return Catch::Session().run(argc, argv);
}
