// The survey catalog's reader, as a resumed survey uses it: the input is a catalog.csv's text
// (seeds: catalogs written by write_survey_catalog, tests/fuzz/seeds/fuzz_survey_catalog). A
// resume must never fail on the catalog's content: every row is read or skipped, a `done` row's
// files are checked against its `files` field (a bad field or file is a reason to make the cube
// again, not an error), and the rows survive being written and read back unchanged.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "io/survey_catalog.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  const fs::path dir = ifusim::fuzz::scratch_dir() / "survey";
  const fs::path cube_dir = dir / "1" / "face-on";
  if (!fs::exists(cube_dir / "cube.h5")) {
    // The done cube the seeds' rows record (5 bytes); rows the fuzzer edits see a size or a
    // checksum differ, a file missing, or a `files` field that does not parse.
    fs::create_directories(cube_dir);
    std::ofstream(cube_dir / "cube.h5", std::ios::binary) << "cube\n";
  }
  const std::string path = (dir / "catalog.csv").string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));

  const auto rows = ifusim::read_survey_catalog(path);
  for (const auto& row : rows) {
    if (row.size() != ifusim::kCatalogColumnCount) std::abort();
    if (row[2] == "done") (void)ifusim::catalog_files_problem(dir.string(), row);
  }
  const std::string copy = (dir / "copy.csv").string();
  ifusim::write_survey_catalog(copy, rows);
  if (ifusim::read_survey_catalog(copy) != rows) {
    std::fprintf(stderr, "fuzz: catalog rows changed by a write and a read\n");
    std::abort();
  }
  return 0;
}
