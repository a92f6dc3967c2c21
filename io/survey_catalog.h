#pragma once
// A survey's catalog.csv (docs/survey.md): one row per cube, RFC 4180 quoting, replaced at once
// whenever a row changes. Its `files` column records each done cube's files with their sizes and
// checksums, so a resumed survey can tell a done cube from one truncated or changed since.
#include <cstddef>
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

namespace ifusim {

inline constexpr const char* kCatalogColumns[] = {"subhalo_id",  "orientation", "status", "cube",
                                                  "seconds",     "n_stars",     "n_gas",  "error",
                                                  "config_hash", "files"};
inline constexpr std::size_t kCatalogColumnCount = std::size(kCatalogColumns);

// One row: kCatalogColumnCount fields, in kCatalogColumns' order.
using CatalogRow = std::vector<std::string>;

// The rows of `path` (none when it does not exist), header dropped. A line with the wrong number
// of fields (torn by a crash while an older ifusim wrote it in place) is skipped; a row from
// before the `files` column gets an empty one. Never throws for the file's content.
std::vector<CatalogRow> read_survey_catalog(const std::string& path);

// Writes the header and `rows` beside `path` and renames the result over it; throws
// std::runtime_error naming the file and the system's reason when it cannot be written.
void write_survey_catalog(const std::string& path, const std::vector<CatalogRow>& rows);

// The `files` field for the files `names` in `dir`: "name:bytes:checksum" (FNV-1a, 64 bits, in
// hex), ';' between them. Throws InputError naming a file it cannot read.
std::string catalog_files_record(const std::filesystem::path& dir,
                                 const std::vector<std::string>& names);

// Why a `done` row's files (in out_dir/<subhalo_id>/<orientation>/) are not those its run wrote
// (missing, truncated, changed, or a `files` field that does not parse), or "" when they are.
std::string catalog_files_problem(const std::string& out_dir, const CatalogRow& row);

}  // namespace ifusim
