#include "io/json_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/config_error.h"
#include "core/json_params.h"

namespace ifusim {

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  // A directory opens as an ifstream on Linux and fails only when read, with the library's
  // "basic_filebuf::underflow" and no path: check first.
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    throw ConfigError(path + ": is a directory, expected " + what);
  std::ifstream in(path, std::ios::binary);
  auto unreadable = [&](const std::string& why) {
    return ConfigError(path + ": cannot read the file: " + why + " (expected " + what + ")");
  };
  if (!in) throw unreadable(std::strerror(errno));
  std::string text;
  try {
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {
    throw unreadable(e.what());
  }
  if (in.bad()) throw unreadable(std::strerror(errno));
  return parse_json(text, path);
}

void write_json_file(const std::string& path, const nlohmann::json& value) {
  const std::string text = value.dump(2) + "\n";
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) throw InputError(path + ": cannot create (" + std::strerror(errno) + ")");
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const int write_error = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed)
    throw InputError(path + ": cannot write (" + std::strerror(written ? errno : write_error) +
                     ")");
}

}  // namespace ifusim
