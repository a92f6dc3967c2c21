#pragma once
// A fresh path under the system's temporary folder, removed with everything in it when the object
// goes: made as an empty directory (TempDir("tag")), or left for the code under test to make
// (TempDir(): a run's output folder, which the tests of refused input check was never made).
// Unique per process and object (the process id and a counter), so that ctest's parallel jobs
// and a test's several folders never meet.
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <filesystem>
#include <iterator>
#include <string>
#include <system_error>

namespace ifusim::test {

class TempDir {
 public:
  TempDir() : TempDir("run", false) {}
  explicit TempDir(const std::string& tag, bool make = true) : path(unique_path(tag)) {
    std::filesystem::remove_all(path);
    if (make) std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string operator/(const std::string& file) const { return (path / file).string(); }
  std::size_t n_files() const {
    return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator(path),
                                                  std::filesystem::directory_iterator{}));
  }

  std::filesystem::path path;

 private:
  static std::filesystem::path unique_path(const std::string& tag) {
    static std::atomic<int> counter{0};
    return std::filesystem::temp_directory_path() /
           ("ifusim_test_" + tag + "_" + std::to_string(::getpid()) + "_" +
            std::to_string(counter++));
  }
};

}  // namespace ifusim::test
