#pragma once
// DerivedFields: the per-particle fields a run's stages derive for a block of particles (a
// star's spaxel, the A_V in front of a gas cell), kept by name beside the input fields of
// data/galaxy_data.h rather than declared there: the data layer does not know which stages a
// project has. A stage writes and reads them through typed keys (FieldKey), which give the
// field's particle set, name and unit; the stage that makes one lists it in its provides()
// (stages/stage.h, Provided::field), which is what the run checks a later stage's needs() and
// the plan counts the memory against.
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <variant>

#include "data/sharded_array.h"

namespace ifusim {

template <class T>
struct FieldKey {
  const char* set;   // "stars" or "gas"
  const char* name;  // "dust_av"
  const char* unit;  // "mag"; "" for dimensionless
  std::string full_name() const { return std::string(set) + "." + name; }
};

class DerivedFields {
 public:
  // Stores `values` as the field `key` (replacing the field of a stage run before).
  template <class T>
  ShardedArray<T>& set(const FieldKey<T>& key, ShardedArray<T> values) {
    auto& slot = fields_[key.name];
    slot = std::move(values);
    return std::get<ShardedArray<T>>(slot);
  }

  // The field, or nullptr where no stage derived it for this block.
  template <class T>
  const ShardedArray<T>* find(const FieldKey<T>& key) const {
    const auto it = fields_.find(key.name);
    return it == fields_.end() ? nullptr : std::get_if<ShardedArray<T>>(&it->second);
  }

  // The field, which a stage's needs() made sure an earlier stage provides.
  template <class T>
  const ShardedArray<T>& at(const FieldKey<T>& key) const {
    const ShardedArray<T>* field = find(key);
    if (field == nullptr)
      throw std::logic_error(key.full_name() +
                             ": not derived for this block (the stage that reads it does not "
                             "list it in needs(), or the stage that makes it not in provides())");
    return *field;
  }

 private:
  // Every derived field is float32 or int32 (FieldKey<T> with another T fails to compile here).
  std::map<std::string, std::variant<ShardedArray<float>, ShardedArray<std::int32_t>>> fields_;
};

}  // namespace ifusim
