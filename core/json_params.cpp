#include "core/json_params.h"

#include <algorithm>
#include <cmath>

namespace ifusim {
namespace {
thread_local ParamSchema* t_recording = nullptr;
}

ParamSchema::Recording::Recording(ParamSchema& schema, std::string path) : previous_(t_recording) {
  schema.path_ = std::move(path);
  t_recording = &schema;
}

ParamSchema::Recording::~Recording() {
  t_recording = previous_;
}

ParamRecord* ParamSchema::at(const std::string& key_path) {
  if (key_path.rfind(path_ + ".", 0) != 0) return nullptr;
  const std::string key = key_path.substr(path_.size() + 1);
  for (auto& p : params_)
    if (p.key == key) return &p;
  params_.push_back({key, "", true, nullptr, {}});
  return &params_.back();
}

void JsonParams::record(const std::string& key, const char* kind, const nlohmann::json& fallback,
                        bool required) const {
  if (!schema_) return;
  ParamRecord* p = schema_->at(key_path(key));
  if (!p) return;
  if (*kind && (p->kind.empty() || p->kind == "value" || p->kind == "string")) p->kind = kind;
  if (!fallback.is_null()) p->fallback = fallback;
  p->required = p->required && required;
}

nlohmann::json parse_json(const std::string& text, const std::string& source) {
  // The objects and arrays open at the parser's position, each with the key or index it is at,
  // so a duplicate's full path can be named.
  struct Frame {
    bool array = false;
    long long index = -1;
    std::string key;
    std::set<std::string> keys;
  };
  std::vector<Frame> open;
  auto path = [&] {
    std::string p;
    for (const auto& f : open)
      p += f.array ? "[" + std::to_string(f.index) + "]" : (p.empty() ? "" : ".") + f.key;
    return p;
  };
  auto element = [&] {  // a value, object or array starts: in an array it is the next element
    if (!open.empty() && open.back().array) ++open.back().index;
  };
  using Event = nlohmann::json::parse_event_t;
  const nlohmann::json::parser_callback_t check = [&](int, Event event, nlohmann::json& parsed) {
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        element();
        open.push_back({event == Event::array_start, -1, {}, {}});
        break;
      case Event::object_end:
      case Event::array_end:
        open.pop_back();
        break;
      case Event::key:
        open.back().key = parsed.get<std::string>();
        if (!open.back().keys.insert(open.back().key).second)
          throw ConfigError(source + ": " + path() +
                            ": duplicate key (given twice in one object; expected each key once)");
        break;
      case Event::value:
        element();
        break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, check, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(source + ": not valid JSON: " + e.what());
  }
}

JsonParams::JsonParams(const nlohmann::json& object, std::string path)
    : object_(object), path_(std::move(path)), schema_(t_recording) {
  if (!object_.is_object())
    throw ConfigError((path_.empty() ? std::string("config") : path_) +
                      ": expected a JSON object, got " + object_.dump());
}

std::string JsonParams::key_path(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

bool JsonParams::has(const std::string& key) const {
  record(key, "", nullptr, false);  // probed: optional
  return object_.contains(key);
}

const nlohmann::json* JsonParams::find(const std::string& key) const {
  used_.insert(key);
  auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

const nlohmann::json& JsonParams::raw(const std::string& key) const {
  record(key, "value", nullptr, true);
  const auto* v = find(key);
  if (!v) fail(key, "a value (the key is required)", nullptr);
  return *v;
}

void JsonParams::fail(const std::string& key, const std::string& expected,
                      const nlohmann::json* got) const {
  throw ConfigError(key_path(key) + ": expected " + expected +
                    (got ? ", got " + got->dump() : std::string(", but the key is missing")));
}

void JsonParams::require(bool ok, const std::string& key, const std::string& expected,
                         const nlohmann::json& got) const {
  if (schema_)
    if (ParamRecord* p = schema_->at(key_path(key));
        p && std::find(p->expected.begin(), p->expected.end(), expected) == p->expected.end())
      p->expected.push_back(expected);
  if (!ok) fail(key, expected, &got);
}

double JsonParams::number(const std::string& key, std::optional<double> fallback) {
  record(key, "number", fallback ? nlohmann::json(*fallback) : nlohmann::json(), !fallback);
  const auto* v = find(key);
  if (!v) {
    if (fallback) return *fallback;
    fail(key, "a number", nullptr);
  }
  if (!v->is_number() || !std::isfinite(v->get<double>())) fail(key, "a finite number", v);
  return v->get<double>();
}

long long JsonParams::integer(const std::string& key, std::optional<long long> fallback) {
  record(key, "integer", fallback ? nlohmann::json(*fallback) : nlohmann::json(), !fallback);
  const auto* v = find(key);
  if (!v) {
    if (fallback) return *fallback;
    fail(key, "an integer", nullptr);
  }
  if (!v->is_number_integer()) fail(key, "an integer", v);
  return v->get<long long>();
}

bool JsonParams::boolean(const std::string& key, std::optional<bool> fallback) {
  record(key, "true or false", fallback ? nlohmann::json(*fallback) : nlohmann::json(), !fallback);
  const auto* v = find(key);
  if (!v) {
    if (fallback) return *fallback;
    fail(key, "true or false", nullptr);
  }
  if (!v->is_boolean()) fail(key, "true or false", v);
  return v->get<bool>();
}

std::string JsonParams::string(const std::string& key, std::optional<std::string> fallback) {
  record(key, "string", fallback ? nlohmann::json(*fallback) : nlohmann::json(), !fallback);
  const auto* v = find(key);
  if (!v) {
    if (fallback) return *fallback;
    fail(key, "a string", nullptr);
  }
  if (!v->is_string()) fail(key, "a string", v);
  return v->get<std::string>();
}

std::string JsonParams::choice(const std::string& key, const std::vector<std::string>& choices,
                               std::optional<std::string> fallback) {
  std::string expected = "one of";
  for (std::size_t i = 0; i < choices.size(); ++i)
    expected += (i ? ", \"" : " \"") + choices[i] + "\"";
  record(key, expected.c_str(), nullptr, true);
  const std::string value = string(key, std::move(fallback));
  for (const auto& c : choices)
    if (c == value) return value;
  const nlohmann::json got = value;
  fail(key, expected, &got);
}

std::vector<double> JsonParams::numbers(const std::string& key, std::size_t count,
                                        std::size_t min_count) {
  record(key, "array of numbers", nullptr, true);
  const auto& v = raw(key);
  const std::string expected =
      count > 0 ? "an array of " + std::to_string(count) + " numbers"
                : "an array of at least " + std::to_string(min_count) + " numbers";
  if (!v.is_array() || (count > 0 ? v.size() != count : v.size() < min_count))
    fail(key, expected, &v);
  std::vector<double> out;
  for (const auto& x : v) {
    if (!x.is_number() || !std::isfinite(x.get<double>())) fail(key, expected, &v);
    out.push_back(x.get<double>());
  }
  return out;
}

JsonParams JsonParams::object(const std::string& key) {
  record(key, "object", nullptr, true);
  const auto& v = raw(key);
  if (!v.is_object()) fail(key, "a JSON object", &v);
  return JsonParams(v, key_path(key));
}

JsonParams JsonParams::object_or_empty(const std::string& key) {
  // JsonParams keeps a reference: the empty object must outlive it.
  static const nlohmann::json empty = nlohmann::json::object();
  return has(key) ? object(key) : JsonParams(empty, key_path(key));
}

void JsonParams::finish() const {
  for (auto it = object_.begin(); it != object_.end(); ++it)
    if (!used_.count(it.key()))
      throw ConfigError(key_path(it.key()) + ": unknown key (misspelt, or not valid here)");
}

}  // namespace ifusim
