#pragma once
// Reads one JSON object of parameters, checking types and ranges, and naming the key's path in
// every error ("stages[1].params.spaxel_size_kpc: expected a number > 0, got -2"). finish()
// rejects keys that were never read, so a misspelt key is an error rather than a silent default.
#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/config_error.h"

namespace ifusim {

// One parameter as a stage's parsing reads it: the parameter schema a stage describes itself by
// (ifusim stages) is recorded from the parsing itself, so it is declared in one place, its
// from_json.
struct ParamRecord {
  std::string key;          // relative to the object described ("orientation.alpha_deg")
  std::string kind;         // "number", "integer", "true or false", "string", "one of ...", ...
  bool required = true;     // read with no default, and never only probed (has)
  nlohmann::json fallback;  // the default, where there is one
  std::vector<std::string> expected;  // what require() holds it to ("a number > 0")
};

// The parameters every JsonParams made on this thread reads while a Recording lives.
class ParamSchema {
 public:
  class Recording {
   public:
    // Records into `schema` the keys read under `path` (a stage's "stages.<name>").
    Recording(ParamSchema& schema, std::string path);
    ~Recording();
    Recording(const Recording&) = delete;
    Recording& operator=(const Recording&) = delete;

   private:
    ParamSchema* previous_;
  };
  const std::vector<ParamRecord>& params() const { return params_; }

 private:
  friend class JsonParams;
  // The record of `key_path` (a full path), made where it is new; nullptr outside `path_`.
  ParamRecord* at(const std::string& key_path);
  std::string path_;
  std::vector<ParamRecord> params_;
};

// Parses JSON text (comments allowed), refusing a key given twice in one object: nlohmann keeps
// the last one silently, so a config with "redshift" twice would run with whichever came last and
// nobody would know. Every error starts with `source` (the file, or "--set galaxy=...") and names
// the duplicated key's path ("galaxy.orientation.alpha_deg").
nlohmann::json parse_json(const std::string& text, const std::string& source);

class JsonParams {
 public:
  // `path` is the object's own path, e.g. "stages[0].params"; "" for the root.
  JsonParams(const nlohmann::json& object, std::string path);

  std::string key_path(const std::string& key) const;
  const std::string& path() const { return path_; }
  bool has(const std::string& key) const;
  const nlohmann::json& raw(const std::string& key) const;  // marks the key used

  double number(const std::string& key, std::optional<double> fallback = std::nullopt);
  long long integer(const std::string& key, std::optional<long long> fallback = std::nullopt);
  bool boolean(const std::string& key, std::optional<bool> fallback = std::nullopt);
  std::string string(const std::string& key, std::optional<std::string> fallback = std::nullopt);
  // A string that must be one of `choices`.
  std::string choice(const std::string& key, const std::vector<std::string>& choices,
                     std::optional<std::string> fallback = std::nullopt);
  // An array of finite numbers: exactly `count` of them, or at least `min_count` when count is 0.
  std::vector<double> numbers(const std::string& key, std::size_t count, std::size_t min_count = 0);
  JsonParams object(const std::string& key);  // a nested object (must exist)
  // A nested object, or an empty one (every key then takes its fallback) where the key is absent.
  JsonParams object_or_empty(const std::string& key);

  // Range checks that name the key: require(v > 0, "spaxel_size_kpc", "a number > 0").
  void require(bool ok, const std::string& key, const std::string& expected,
               const nlohmann::json& got) const;

  void finish() const;  // every key must have been read

 private:
  const nlohmann::json* find(const std::string& key) const;
  [[noreturn]] void fail(const std::string& key, const std::string& expected,
                         const nlohmann::json* got) const;
  // Notes a read of `key` in the schema being recorded, if any.
  void record(const std::string& key, const char* kind, const nlohmann::json& fallback,
              bool required) const;
  const nlohmann::json& object_;
  std::string path_;
  mutable std::set<std::string> used_;
  ParamSchema* schema_;  // the recording in force when the object was made, or nullptr
};

}  // namespace ifusim
