#include "io/host_galaxy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/config_error.h"
#include "io/galaxy_field_ranges.h"

namespace ifusim {
namespace {

// The input fields of a particle set's table: name -> spec (derived fields left out).
template <class Set>
std::map<std::string, FieldSpec> input_fields() {
  std::map<std::string, FieldSpec> out;
  Set set;
  Set::for_each_field(set, [&](const FieldSpec& spec, auto&) {
    if (!spec.derived()) out.emplace(spec.name, spec);
  });
  return out;
}

std::string shape_text(std::size_t rows, int components) {
  return "(" + std::to_string(rows) + (components > 1 ? ", " + std::to_string(components) : "") +
         ")";
}

template <class Set>
void validate_set(const std::string& set_name, const std::map<std::string, HostField>& fields) {
  const auto table = input_fields<Set>();
  std::size_t rows = 0;
  std::string rows_from;
  for (const auto& [name, field] : fields) {
    const std::string key = set_name + "." + name;
    const auto spec = table.find(name);
    if (spec == table.end()) {
      std::string known;
      for (const auto& [n, s] : table) known += (known.empty() ? "" : ", ") + n;
      throw InputError(key + ": unknown field; expected one of " + known);
    }
    const int k = spec->second.components;
    if (field.components != k || field.values.size() != field.rows * static_cast<std::size_t>(k))
      throw InputError(key + ": shape " + shape_text(field.rows, field.components) + ", expected " +
                       (k > 1 ? "(N, " + std::to_string(k) + ")" : "(N,)"));
    if (rows_from.empty()) {
      rows = field.rows;
      rows_from = name;
    } else if (field.rows != rows) {
      throw InputError(key + ": " + std::to_string(field.rows) + " rows, but " + set_name + "." +
                       rows_from + " has " + std::to_string(rows));
    }
    const GalaxyFieldRange* rule = galaxy_field_range(set_name, name);
    for (std::size_t i = 0; i < field.values.size(); ++i) {
      const double v = field.values[i];
      if (!rule->holds(v))
        throw InputError(key + ": row " + std::to_string(i / static_cast<std::size_t>(k)) + " is " +
                         std::to_string(v) + "; expected finite " + rule->meaning);
    }
  }
  if (rows == 0) return;  // an empty or absent set needs nothing
  for (const auto& r : galaxy_field_ranges())
    if (set_name == r.set && r.required && !fields.count(r.name))
      throw InputError(set_name + "." + r.name + ": required field missing (" +
                       std::to_string(rows) + " " + set_name + " rows given)");
}

template <class Set>
Set put_set(const Mesh& mesh, const std::map<std::string, HostField>& fields) {
  Set set;
  Set::for_each_field(set, [&](const FieldSpec& spec, auto& field) {
    using Array = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<Array, ShardedArray<float>>) {
      const auto it = fields.find(spec.name);
      if (it != fields.end() && !spec.derived())
        field = device_put(mesh, it->second.values, spec.components, Sharding::sharded());
    }
  });
  return set;
}

template <class Set>
std::map<std::string, HostField> host_set(const Set& set) {
  std::map<std::string, HostField> out;
  Set::for_each_field(set, [&](const FieldSpec& spec, const auto& field) {
    using Array = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<Array, ShardedArray<float>>)
      if (!spec.derived() && !field.empty())
        out[spec.name] = {field.to_host(), field.rows(), spec.components};
  });
  return out;
}

std::size_t rows_of(const std::map<std::string, HostField>& fields) {
  return fields.empty() ? 0 : fields.begin()->second.rows;
}

}  // namespace

std::size_t HostGalaxy::n_stars() const {
  return rows_of(stars);
}
std::size_t HostGalaxy::n_gas() const {
  return rows_of(gas);
}

void validate_and_complete(HostGalaxy& galaxy) {
  validate_set<Stars>("stars", galaxy.stars);
  if (galaxy.n_stars() == 0) throw InputError("stars: no star particles given");
  validate_set<Gas>("gas", galaxy.gas);
  Galaxy& g = galaxy.galaxy;
  if (!(g.redshift >= 0 && g.redshift < 20))
    throw InputError("redshift: " + std::to_string(g.redshift) +
                     ", expected the galaxy's redshift in [0, 20)");
  g.scale_factor = 1.0 / (1.0 + g.redshift);
  if (g.halfmass_radius_stars_kpc > 0) return;
  // The radius holding half the stellar mass, as the TNG reader finds it (tng_reader.cpp).
  const auto& x = galaxy.stars.at("position_kpc").values;
  const auto mass_it = galaxy.stars.find("mass_msun");
  const auto& m =
      (mass_it != galaxy.stars.end() ? mass_it->second : galaxy.stars.at("initial_mass_msun"))
          .values;
  std::vector<std::pair<double, double>> radius_mass(m.size());
  double total = 0;
  for (std::size_t i = 0; i < m.size(); ++i) {
    const double r2 = double(x[3 * i]) * x[3 * i] + double(x[3 * i + 1]) * x[3 * i + 1] +
                      double(x[3 * i + 2]) * x[3 * i + 2];
    radius_mass[i] = {std::sqrt(r2), m[i]};
    total += m[i];
  }
  std::stable_sort(radius_mass.begin(), radius_mass.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  double cumulative = 0;
  for (const auto& [r, mass] : radius_mass) {
    cumulative += mass;
    if (cumulative >= 0.5 * total) {
      g.halfmass_radius_stars_kpc = r;
      break;
    }
  }
}

GalaxyData put_host_galaxy(const Mesh& mesh, const HostGalaxy& galaxy, bool with_gas) {
  GalaxyData data;
  data.galaxy = galaxy.galaxy;
  data.stars = put_set<Stars>(mesh, galaxy.stars);
  if (data.stars.mass_msun.empty())
    data.stars.mass_msun =
        device_put(mesh, galaxy.stars.at("initial_mass_msun").values, 1, Sharding::sharded());
  if (with_gas && galaxy.n_gas() > 0) data.gas = put_set<Gas>(mesh, galaxy.gas);
  return data;
}

HostGalaxy host_galaxy_of(const GalaxyData& data, std::string source) {
  HostGalaxy h;
  h.galaxy = data.galaxy;
  h.source = std::move(source);
  h.stars = host_set(data.stars);
  h.gas = host_set(data.gas);
  return h;
}

}  // namespace ifusim
