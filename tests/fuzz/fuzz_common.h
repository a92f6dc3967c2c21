#pragma once
// Shared by the fuzz targets (libFuzzer, built with clang: tests/fuzz/CMakeLists.txt).
//
// Each target feeds its input to one reader. The reader must either succeed or throw the
// project's documented errors (ConfigError, InputError), whose message names the file and the
// key or dataset; any other exception, a crash or a sanitizer report is a finding. The
// structured targets read their input as a list of edits of a valid fixture (the mutator then
// explores broken files near real ones instead of random bytes, which HDF5 or cfitsio would
// reject at once).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>

#include "core/config_error.h"
#include "io/hdf5.h"

namespace ifusim::fuzz {

// A scratch folder for this process, removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("ifusim_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(
          std::filesystem::temp_directory_path() / ("ifusim_fuzz_" + std::to_string(::getpid())),
          ec);
    });
    return d;
  }();
  return dir;
}

// Reads the fuzz input as a stream of small integers and doubles.
class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::size_t index(std::size_t n) { return n == 0 ? 0 : byte() % n; }
  // A value that a reader must cope with: special floats, signs, zero, huge and tiny numbers.
  double value() {
    switch (byte() % 10) {
      case 0:
        return 0.0;
      case 1:
        return -1.0;
      case 2:
        return std::numeric_limits<double>::quiet_NaN();
      case 3:
        return (byte() % 2 ? 1.0 : -1.0) * std::numeric_limits<double>::infinity();
      case 4:
        return 1e300;
      case 5:
        return -1e-300;
      case 6:
        return 3.0e38;  // near float's maximum
      default: {
        std::uint32_t bits = 0;
        for (int i = 0; i < 4; ++i) bits = (bits << 8) | byte();
        return static_cast<double>(static_cast<std::int32_t>(bits)) / 65536.0;
      }
    }
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// A fresh copy of `fixture` at `path`, edited by edit(file, in) until the input runs out (8 edits
// at most). An edit the file no longer allows (of a removed group, say) ends the edits.
template <class Edit>
void edited_copy(const std::string& fixture, const std::string& path, Bytes& in, Edit&& edit) {
  std::filesystem::copy_file(fixture, path, std::filesystem::copy_options::overwrite_existing);
  try {
    const h5::File f(path, h5::File::Mode::read_write);
    for (int n = 0; n < 8 && !in.empty(); ++n) edit(f, in);
  } catch (const InputError&) {
  }
}

// Runs `read`; the project's documented errors are expected answers if their message names
// `file` (the input's file name). Anything else escapes or aborts: libFuzzer reports it as a
// crash, with the input that gave it.
template <class Read>
void expect_clean_errors(const std::string& file, Read&& read) {
  auto check_names_file = [&](const std::exception& e) {
    if (std::string(e.what()).find(file) == std::string::npos) {
      std::fprintf(stderr, "fuzz: an error that does not name %s: %s\n", file.c_str(), e.what());
      std::abort();
    }
  };
  try {
    read();
  } catch (const ConfigError& e) {
    check_names_file(e);
  } catch (const InputError& e) {
    check_names_file(e);
  }
}

}  // namespace ifusim::fuzz
