#include "io/survey_catalog.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include "core/config_error.h"

namespace ifusim {

namespace fs = std::filesystem;

namespace {

// catalog.csv: RFC 4180 quoting where a field needs it.
std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\n\r") == std::string::npos) return v;
  std::string out = "\"";
  for (const char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// FNV-1a, 64 bits, of a file's bytes: what a resumed survey compares a done cube's files with.
std::string file_checksum(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot read it back to checksum it");
  std::uint64_t h = 1469598103934665603ull;
  std::vector<char> block(1 << 20);
  while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0)
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      h ^= static_cast<unsigned char>(block[static_cast<std::size_t>(i)]);
      h *= 1099511628211ull;
    }
  if (in.bad()) throw InputError(path.string() + ": cannot read it back to checksum it");
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

std::vector<CatalogRow> read_survey_catalog(const std::string& path) {
  std::vector<CatalogRow> rows;
  std::ifstream in(path);
  if (!in) return rows;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CatalogRow row;
  std::string field;
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(std::move(field));
      field.clear();
    } else if (c == '\n') {
      row.push_back(std::move(field));
      field.clear();
      // A catalog written before the `files` column has one column less: its rows are kept, and
      // their cubes checked for existence only.
      if (row.size() == kCatalogColumnCount - 1) row.emplace_back();
      if (row.size() == kCatalogColumnCount) rows.push_back(std::move(row));  // else a torn line
      row.clear();
    } else if (c != '\r') {
      field += c;
    }
  }
  if (!rows.empty() && rows.front()[0] == kCatalogColumns[0]) rows.erase(rows.begin());
  return rows;
}

// The `files` column: "name:bytes:checksum" of each file a cube's run wrote, ';' between them.
std::string catalog_files_record(const fs::path& dir, const std::vector<std::string>& names) {
  std::string record;
  for (const auto& name : names)
    record += (record.empty() ? "" : ";") + name + ":" + std::to_string(fs::file_size(dir / name)) +
              ":" + file_checksum(dir / name);
  return record;
}

// Why a `done` row's files are not those its run wrote (truncated by a full disk, a copy cut
// short, edited), or "" when they are: a rerun makes such a cube again instead of keeping it.
std::string catalog_files_problem(const std::string& out_dir, const CatalogRow& row) {
  const fs::path dir = fs::path(out_dir) / row[0] / row[1];
  if (row[9].empty())  // a row from before the `files` column: no sizes to compare
    return fs::exists(fs::path(out_dir) / row[3])
               ? ""
               : (fs::path(out_dir) / row[3]).string() + ": missing";
  std::size_t start = 0;
  while (start <= row[9].size()) {
    const std::size_t end = std::min(row[9].find(';', start), row[9].size());
    const std::string entry = row[9].substr(start, end - start);
    start = end + 1;
    const std::size_t b = entry.rfind(':'), a = b == 0 ? b : entry.rfind(':', b - 1);
    if (b == std::string::npos || a == std::string::npos || a == 0)
      return "catalog.csv's files field \"" + entry + "\" is not name:bytes:checksum";
    const fs::path path = dir / entry.substr(0, a);
    const std::string bytes = entry.substr(a + 1, b - a - 1), checksum = entry.substr(b + 1);
    std::error_code error;
    const auto size = fs::file_size(path, error);
    if (error) return path.string() + ": " + error.message();
    if (std::to_string(size) != bytes)
      return path.string() + ": " + std::to_string(size) + " bytes, catalog.csv recorded " + bytes;
    try {
      if (file_checksum(path) != checksum)
        return path.string() + ": checksum differs from the one catalog.csv recorded";
    } catch (const std::exception& e) {
      return e.what();
    }
  }
  return "";
}

// Replaces the catalog at once: written beside it, then renamed over it.
void write_survey_catalog(const std::string& path, const std::vector<CatalogRow>& rows) {
  const std::string tmp = path + ".partial";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (std::size_t c = 0; c < kCatalogColumnCount; ++c)
      out << (c ? "," : "") << kCatalogColumns[c];
    out << "\n";
    for (const auto& row : rows) {
      for (std::size_t c = 0; c < kCatalogColumnCount; ++c)
        out << (c ? "," : "") << csv_field(row[c]);
      out << "\n";
    }
    if (!out.flush())
      throw std::runtime_error(tmp + ": cannot write the survey catalog (" + std::strerror(errno) +
                               ")");
  }
  fs::rename(tmp, path);
}

}  // namespace ifusim
