#include "io/rubix/rubix_galaxy.h"

#include <cmath>
#include <filesystem>
#include <optional>
#include <type_traits>
#include <vector>

#include "io/galaxy_field_ranges.h"
#include "io/hdf5.h"

namespace ifusim {
namespace {

namespace fs = std::filesystem;

enum class Species { stars, gas };

// One RUBIX dataset and the GalaxyData field it maps to. `to_rubix` multiplies the ifusim
// value into RUBIX's unit; positions also move to the box frame (+ centre).
struct RubixField {
  Species species;
  const char* name;
  const char* unit;
  int components;
  bool required;
  bool position;
  double to_rubix;
  const char* target;  // FieldSpec name in Stars / Gas
};

// erg/g per (km/s)^2.
constexpr double kErgPerGramPerKm2S2 = 1.0e10;

const std::vector<RubixField>& rubix_table() {
  using S = Species;
  static const std::vector<RubixField> table = {
      {S::stars, "coords", "kpc", 3, true, true, 1.0, "position_kpc"},
      {S::stars, "mass", "Msun", 1, true, false, 1.0, "initial_mass_msun"},
      {S::stars, "velocity", "km/s", 3, true, false, 1.0, "velocity_kms"},
      {S::stars, "metallicity", "", 1, true, false, 1.0, "metallicity"},
      {S::stars, "age", "Gyr", 1, true, false, 1.0, "age_gyr"},
      {S::gas, "coords", "kpc", 3, true, true, 1.0, "position_kpc"},
      {S::gas, "density", "Msun/kpc^3", 1, false, false, 1.0, "density_msun_per_kpc3"},
      {S::gas, "mass", "Msun", 1, true, false, 1.0, "mass_msun"},
      {S::gas, "metallicity", "", 1, false, false, 1.0, "metallicity"},
      {S::gas, "metals", "", 10, false, false, 1.0, "metals"},
      {S::gas, "sfr", "Msun/yr", 1, false, false, 1.0, "sfr_msun_per_yr"},
      {S::gas, "internal_energy", "erg/g", 1, false, false, kErgPerGramPerKm2S2,
       "internal_energy_km2_s2"},
      {S::gas, "velocity", "km/s", 3, false, false, 1.0, "velocity_kms"},
      {S::gas, "electron_abundance", "", 1, false, false, 1.0, "electron_abundance"},
      {S::gas, "temperature", "K", 1, false, false, 1.0, "temperature_k"},
  };
  return table;
}

const char* group_name(Species s) {
  return s == Species::stars ? "stars" : "gas";
}

template <class Set>
ShardedArray<float>* find_target(Set& set, const char* target) {
  ShardedArray<float>* found = nullptr;
  Set::for_each_field(set, [&](const FieldSpec& spec, auto& field) {
    if constexpr (std::is_same_v<std::decay_t<decltype(field)>, ShardedArray<float>>)
      if (std::string(spec.name) == target) found = &field;
  });
  if (!found) throw std::logic_error(std::string("rubix table: no GalaxyData field ") + target);
  return found;
}

ShardedArray<float>* target_of(GalaxyData& d, const RubixField& f) {
  return f.species == Species::stars ? find_target(d.stars, f.target)
                                     : find_target(d.gas, f.target);
}

void write_file(const GalaxyData& data, const std::string& path) {
  h5::File f(path, h5::File::Mode::truncate);
  const Galaxy& g = data.galaxy;
  // meta/: the header values RUBIX copies from the snapshot (one-element arrays, as h5py does).
  const auto meta = f.create_group("meta");
  meta.write_string("SimulationName", g.simulation);
  meta.write<std::int64_t>("SnapshotNumber", {g.snapshot}, {1});
  meta.write<std::int64_t>("CutoutID", {g.subhalo_id}, {1});
  meta.write<double>("Redshift", {g.redshift}, {1});
  meta.write<double>("Time", {g.scale_factor}, {1});
  meta.write<double>("HubbleParam", {g.cosmology.hubble_param}, {1});
  meta.write<double>("Omega0", {g.cosmology.omega_matter}, {1});
  meta.write<double>("OmegaLambda", {g.cosmology.omega_lambda}, {1});

  const auto galaxy = f.create_group("galaxy");
  galaxy.write<double>("center", {g.center_kpc[0], g.center_kpc[1], g.center_kpc[2]}, {3});
  galaxy.set_string_attribute("unit", "kpc", "center");
  galaxy.write<double>("halfmassrad_stars", {g.halfmass_radius_stars_kpc}, {});
  galaxy.set_string_attribute("unit", "kpc", "halfmassrad_stars");
  galaxy.write<double>("redshift", {g.redshift}, {});
  galaxy.set_string_attribute("unit", "", "redshift");

  auto& mutable_data = const_cast<GalaxyData&>(data);  // only to look fields up by name
  for (const auto& rf : rubix_table()) {
    const ShardedArray<float>& field = *target_of(mutable_data, rf);
    if (field.empty()) {
      if (rf.required && rf.species == Species::stars)
        throw std::invalid_argument(std::string("write_rubix_galaxy: stars have no ") + rf.target);
      continue;
    }
    const auto host = field.to_host();
    std::vector<double> values(host.size());
    const std::size_t k = static_cast<std::size_t>(rf.components);
    for (std::size_t i = 0; i < host.size(); ++i)
      values[i] =
          static_cast<double>(host[i]) * rf.to_rubix + (rf.position ? g.center_kpc[i % k] : 0.0);
    const std::string name = std::string("particles/") + group_name(rf.species) + "/" + rf.name;
    std::vector<hsize_t> shape{field.rows()};
    if (rf.components > 1) shape.push_back(k);
    f.write<double>(name, values, shape);
    f.set_string_attribute("unit", rf.unit, name);
  }
  f.close();
}

}  // namespace

void write_rubix_galaxy(const GalaxyData& data, const std::string& path) {
  const std::string tmp = path + ".tmp";
  try {
    write_file(data, tmp);
    fs::rename(tmp, path);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
}

bool is_rubix_galaxy(const std::string& path) {
  try {
    h5::File f(path);
    return f.exists("galaxy") && f.exists("particles");
  } catch (const InputError&) {
    return false;
  }
}

std::array<std::size_t, 2> count_rubix_galaxy(const std::string& path) {
  h5::File f(path);
  std::array<std::size_t, 2> counts{0, 0};
  for (const Species species : {Species::stars, Species::gas}) {
    const std::string coords = std::string("particles/") + group_name(species) + "/coords";
    if (f.exists(coords)) counts[species == Species::stars ? 0 : 1] = f.shape(coords).at(0);
  }
  return counts;
}

namespace {

void check_unit(const h5::Location& loc, const std::string& ds, const char* unit) {
  const std::string got = loc.has_attribute("unit", ds) ? loc.string_attribute("unit", ds) : "";
  if (!loc.has_attribute("unit", ds) || got != unit)
    throw InputError(loc.describe(ds) + ": unit \"" + got + "\", expected \"" + unit + "\"");
}

double scalar(const h5::Location& loc, const std::string& ds) {
  const auto v = loc.read<double>(ds);
  if (v.size() != 1) throw InputError(loc.describe(ds) + ": expected a single value");
  return v[0];
}

// galaxy/ and meta/: the record, with its centre and half-mass radius.
Galaxy read_record(const h5::File& f) {
  Galaxy g;
  const auto galaxy = f.group("galaxy");
  check_unit(galaxy, "center", "kpc");
  const auto center = galaxy.read<double>("center");
  if (center.size() != 3) throw InputError(galaxy.describe("center") + ": expected 3 values");
  for (int c = 0; c < 3; ++c) g.center_kpc[c] = center[c];
  check_unit(galaxy, "halfmassrad_stars", "kpc");
  g.halfmass_radius_stars_kpc = scalar(galaxy, "halfmassrad_stars");
  check_unit(galaxy, "redshift", "");
  g.redshift = scalar(galaxy, "redshift");
  g.scale_factor = 1.0 / (1.0 + g.redshift);
  if (f.exists("meta")) {
    const auto meta = f.group("meta");
    if (meta.exists("SimulationName")) g.simulation = meta.read_string("SimulationName");
    if (meta.exists("SnapshotNumber"))
      g.snapshot = static_cast<int>(scalar(meta, "SnapshotNumber"));
    if (meta.exists("CutoutID")) g.subhalo_id = static_cast<long long>(scalar(meta, "CutoutID"));
    if (meta.exists("Time")) g.scale_factor = scalar(meta, "Time");
    if (meta.exists("HubbleParam")) g.cosmology.hubble_param = scalar(meta, "HubbleParam");
    if (meta.exists("Omega0")) g.cosmology.omega_matter = scalar(meta, "Omega0");
    if (meta.exists("OmegaLambda")) g.cosmology.omega_lambda = scalar(meta, "OmegaLambda");
    g.cosmology.name = g.simulation.empty() ? "rubix meta" : g.simulation;
  }
  return g;
}

// The datasets of one species' group present in the file, checked (unit, rows, components).
struct PresentSpecies {
  Species species;
  hsize_t rows = 0;
  std::vector<const RubixField*> fields;
};

std::optional<PresentSpecies> check_species(const h5::File& f, Species species) {
  const auto particles = f.group("particles");
  if (species == Species::stars && !particles.exists("stars"))
    throw InputError(particles.describe("stars") + ": group not found (no star particles)");
  if (!particles.exists(group_name(species))) return std::nullopt;
  const auto grp = particles.group(group_name(species));
  if (!grp.exists("coords"))
    throw InputError(grp.describe("coords") + ": required dataset missing");
  PresentSpecies out{species, grp.shape("coords").at(0), {}};
  for (const auto& rf : rubix_table()) {
    if (rf.species != species) continue;
    if (!grp.exists(rf.name)) {
      if (rf.required) throw InputError(grp.describe(rf.name) + ": required dataset missing");
      continue;
    }
    check_unit(grp, rf.name, rf.unit);
    const auto shape = grp.shape(rf.name);
    hsize_t comps = 1;
    for (std::size_t d = 1; d < shape.size(); ++d) comps *= shape[d];
    if (shape.empty() || shape[0] != out.rows || comps != static_cast<hsize_t>(rf.components))
      throw InputError(grp.describe(rf.name) + ": shape mismatch: expected " +
                       std::to_string(out.rows) + " rows of " + std::to_string(rf.components) +
                       " component(s) (the rows of coords)");
    out.fields.push_back(&rf);
  }
  return out;
}

// Rows [first_row, first_row + n_rows) of the species' fields into `data`, sharded over the
// mesh: each device reads its share by hyperslab. Positions are made relative to the centre.
void read_species(const Mesh& mesh, const std::string& path, const PresentSpecies& present,
                  const Galaxy& g, std::size_t first_row, std::size_t n_rows, GalaxyData& data) {
  for (const RubixField* rf : present.fields) {
    const std::size_t k = static_cast<std::size_t>(rf->components);
    const GalaxyFieldRange* range = galaxy_field_range(group_name(rf->species), rf->target);
    auto read = [&](IndexRange r, float* out) {
      h5::File file(path);
      const auto dataset = std::string("particles/") + group_name(rf->species) + "/" + rf->name;
      const auto values =
          file.read_rows<double>(dataset, first_row + r.begin, first_row + r.end, k);
      for (std::size_t i = 0; i < values.size(); ++i) {
        const std::size_t row = first_row + r.begin + i / k;
        if (!std::isfinite(values[i]))
          throw InputError(file.describe(dataset) + ": non-finite value in row " +
                           std::to_string(row));
        const double value = values[i] / rf->to_rubix;
        if (range != nullptr && !range->holds(value))
          throw InputError(file.describe(dataset) + ": row " + std::to_string(row) + " is " +
                           std::to_string(values[i]) + "; expected " + range->meaning);
        out[i] = static_cast<float>(value - (rf->position ? g.center_kpc[i % k] : 0.0));
      }
    };
    *target_of(data, *rf) =
        from_callback<float>(mesh, n_rows, rf->components, Sharding::sharded(), read);
    if (rf->species == Species::stars && std::string(rf->name) == "mass")
      data.stars.mass_msun = from_callback<float>(mesh, n_rows, 1, Sharding::sharded(), read);
  }
}

}  // namespace

GalaxyData read_rubix_galaxy(const Mesh& mesh, const std::string& path) {
  h5::File f(path);
  GalaxyData data;
  data.galaxy = read_record(f);
  for (const Species species : {Species::stars, Species::gas})
    if (const auto present = check_species(f, species))
      read_species(mesh, path, *present, data.galaxy, 0, present->rows, data);
  return data;
}

struct RubixStarStream::Impl {
  std::string path;
  Galaxy record;
  PresentSpecies stars;
  std::optional<PresentSpecies> gas;
};

RubixStarStream::RubixStarStream(const std::string& path) : impl_(std::make_unique<Impl>()) {
  h5::File f(path);
  impl_->path = path;
  impl_->record = read_record(f);
  impl_->stars = *check_species(f, Species::stars);
  impl_->gas = check_species(f, Species::gas);
}
RubixStarStream::~RubixStarStream() = default;

std::size_t RubixStarStream::n_rows() const {
  return impl_->stars.rows;
}

Stars RubixStarStream::read(const Mesh& mesh, std::size_t first_row, std::size_t n_rows) const {
  GalaxyData block;
  read_species(mesh, impl_->path, impl_->stars, impl_->record, first_row, n_rows, block);
  return std::move(block.stars);
}

Gas RubixStarStream::read_gas(const Mesh& mesh) const {
  GalaxyData data;
  if (impl_->gas)
    read_species(mesh, impl_->path, *impl_->gas, impl_->record, 0, impl_->gas->rows, data);
  return std::move(data.gas);
}

GalaxyData RubixStarStream::first_pass(const Mesh& mesh, std::size_t block_rows) const {
  GalaxyData data;
  data.galaxy = impl_->record;
  data.star_bounds = read_bounds(mesh, block_rows);
  return data;
}

}  // namespace ifusim
