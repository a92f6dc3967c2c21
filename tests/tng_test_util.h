#pragma once
// Helpers of the [tng] tests: the reference data folder, scratch folders, whole-array reads.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "data/galaxy_data.h"

namespace ifusim::test {

inline std::string data_dir() {
  if (const char* d = std::getenv("IFUSIM_DATA_DIR"); d && *d) return d;
  return std::string(IFUSIM_SOURCE_DIR) + "/../shared/data";
}

inline std::string tng100_cutout() {
  return data_dir() + "/snapshots/tng100-1_snap078_subhalo_subsample.hdf5";
}

// A fresh folder under the system temp dir, removed with the object.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("ifusim_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

template <class T>
std::vector<T> host(const ShardedArray<T>& a) {
  return a.empty() ? std::vector<T>{} : a.to_host();
}

}  // namespace ifusim::test
