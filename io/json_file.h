#pragma once
// Reads a JSON file (a run config, a telescope or pipeline preset) through parse_json, so every
// file the user hands ifusim refuses duplicated keys the same way, and every error names the file.
#include <nlohmann/json.hpp>

#include <string>

namespace ifusim {

// Throws ConfigError starting with `path`: a directory, a missing or unreadable file, invalid JSON
// or a duplicated key. `what` says what the file should be ("a JSON run config file").
nlohmann::json read_json_file(const std::string& path, const std::string& what);

// Writes `value` indented by 2 and a newline; throws InputError naming `path` and the system's
// reason when any byte cannot be written (a full disk), so a truncated file is never taken as
// written. The caller writes into a staging folder or a temporary and removes it on error.
void write_json_file(const std::string& path, const nlohmann::json& value);

}  // namespace ifusim
