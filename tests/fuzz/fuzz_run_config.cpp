// The run-config parser: the input is a config file's text (seeds: configs/examples/*.json).
#include <fstream>

#include "io/run_config.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = (ifusim::fuzz::scratch_dir() / "config.json").string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  ifusim::fuzz::expect_clean_errors("config.json", [&] { ifusim::load_run_config(path, {}); });
  return 0;
}
