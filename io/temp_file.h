#pragma once
// Write-to-temp-then-rename, shared by the writers of cubes, pictures and TNG files: the temporary
// "<path>.tmp" (a file, or a folder the caller creates and fills) is removed on destruction unless
// commit() renamed it onto the final path, so an error leaves no partial output.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "core/config_error.h"

namespace ifusim::detail {

// " (No space left on device)" when errno, read right after a failed write, says the disk or the
// file-size limit refused it, else "": cfitsio and libpng say only that a write failed, and an
// errno left over from an earlier, unrelated call must not be blamed.
inline std::string write_refused_reason(int system_error) {
  if (system_error == ENOSPC || system_error == EFBIG || system_error == EDQUOT ||
      system_error == EROFS || system_error == EIO)
    return " (" + std::string(std::strerror(system_error)) + ")";
  return "";
}

class TempFile {
 public:
  explicit TempFile(std::string final_path)
      : final_(std::move(final_path)), temp_(final_ + ".tmp") {
    std::error_code ec;
    std::filesystem::remove_all(temp_, ec);  // a stale temporary from an interrupted run
  }
  ~TempFile() {
    if (!committed_) {
      std::error_code ec;
      std::filesystem::remove_all(temp_, ec);
    }
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return temp_; }
  void commit() {
    std::error_code ec;
    std::filesystem::rename(temp_, final_, ec);
    if (ec)
      throw InputError(final_ + ": cannot rename " + temp_ + " onto it (" + ec.message() + ")");
    committed_ = true;
  }

 private:
  std::string final_;
  std::string temp_;
  bool committed_ = false;
};

}  // namespace ifusim::detail
