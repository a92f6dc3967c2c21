#include "io/host_galaxy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "core/number_text.h"
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

// What arrays can hold legally but a reader would never give: see validate_and_complete.
constexpr std::size_t kPlausibilityMinStars = 100;
std::vector<std::string> plausibility_warnings(const HostGalaxy& galaxy) {
  const Galaxy& g = galaxy.galaxy;
  std::vector<std::string> warnings;
  const std::size_t n = galaxy.n_stars();
  const auto& age = galaxy.stars.at("age_gyr").values;
  const double universe_gyr = g.cosmology.cosmic_time_gyr(g.scale_factor);
  const double oldest = *std::max_element(age.begin(), age.end());
  const auto z = number_text(g.redshift, 4), t = number_text(universe_gyr, 4);
  if (oldest > 100.0)
    throw InputError("stars.age_gyr: the oldest star is " + number_text(oldest, 4) +
                     " Gyr, far older than the Universe at z = " + z + " (" + t +
                     " Gyr): expected ages in Gyr (years or Myr given?)");
  // float32 ages of stars formed at the Big Bang may round a little above the Universe's age.
  const auto older =
      std::count_if(age.begin(), age.end(), [&](float a) { return a > universe_gyr * (1 + 1e-4); });
  if (older > 0)
    warnings.push_back("stars.age_gyr: " + std::to_string(older) + " of " + std::to_string(n) +
                       " stars are older than the Universe at z = " + z + " (" + t +
                       " Gyr), the oldest " + number_text(oldest, 4) +
                       " Gyr: ages are at the galaxy's own epoch, not lookback times from today "
                       "(the templates clamp them to their oldest)");
  // Mass-weighted centre, spread and mean velocity; a few stars (a test's one star at a chosen
  // place and velocity) say nothing about a galaxy's centre or bulk motion.
  if (n < kPlausibilityMinStars) return warnings;
  const auto& x = galaxy.stars.at("position_kpc").values;
  const auto& v = galaxy.stars.at("velocity_kms").values;
  const auto& m = galaxy.stars.at("initial_mass_msun").values;
  double total = 0, com[3] = {0, 0, 0}, mean_v[3] = {0, 0, 0};
  for (std::size_t i = 0; i < n; ++i) {
    total += m[i];
    for (int c = 0; c < 3; ++c) {
      com[c] += double(m[i]) * x[3 * i + c];
      mean_v[c] += double(m[i]) * v[3 * i + c];
    }
  }
  double spread2 = 0;
  for (int c = 0; c < 3; ++c) com[c] /= total, mean_v[c] /= total;
  for (std::size_t i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) spread2 += double(m[i]) * std::pow(x[3 * i + c] - com[c], 2);
  const double spread = std::sqrt(spread2 / total);
  const double offset = std::hypot(com[0], com[1], com[2]);
  const double speed = std::hypot(mean_v[0], mean_v[1], mean_v[2]);
  auto vector_text = [](const double* a) {
    char text[96];
    std::snprintf(text, sizeof text, "(%.4g, %.4g, %.4g)", a[0], a[1], a[2]);
    return std::string(text);
  };
  if (offset > 3 * spread)
    warnings.push_back("stars.position_kpc: the stars' centre of mass is at " + vector_text(com) +
                       " kpc, " + number_text(offset, 4) + " kpc from the origin and " +
                       number_text(offset / spread, 4) +
                       " times their rms radius around it: positions are relative to the "
                       "galaxy's centre, which the field is centred on (box coordinates given?)");
  if (speed > 100)
    warnings.push_back("stars.velocity_kms: the stars' mass-weighted mean velocity is " +
                       vector_text(mean_v) + " km/s (" + number_text(speed, 4) +
                       " km/s): velocities are relative to the galaxy, whose bulk motion would "
                       "otherwise shift every spectrum (not subtracted?)");
  return warnings;
}

}  // namespace

std::size_t HostGalaxy::n_stars() const {
  return rows_of(stars);
}
std::size_t HostGalaxy::n_gas() const {
  return rows_of(gas);
}

std::vector<std::string> validate_and_complete(HostGalaxy& galaxy) {
  validate_set<Stars>("stars", galaxy.stars);
  if (galaxy.n_stars() == 0) throw InputError("stars: no star particles given");
  validate_set<Gas>("gas", galaxy.gas);
  Galaxy& g = galaxy.galaxy;
  if (!(g.redshift >= 0 && g.redshift < 20))
    throw InputError("redshift: " + std::to_string(g.redshift) +
                     ", expected the galaxy's redshift in [0, 20)");
  g.scale_factor = 1.0 / (1.0 + g.redshift);
  std::vector<std::string> warnings = plausibility_warnings(galaxy);
  if (g.halfmass_radius_stars_kpc > 0) return warnings;
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
  return warnings;
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
