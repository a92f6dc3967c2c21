#include "pipeline/registry.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/json_params.h"
#include "stages/aperture_mask/aperture_mask.h"
#include "stages/dust/dust.h"
#include "stages/emission_lines/emission_lines.h"
#include "stages/fibres/fibres.h"
#include "stages/flux/flux.h"
#include "stages/foreground_dust/foreground_dust.h"
#include "stages/lsf/lsf.h"
#include "stages/mass_image/mass_image.h"
#include "stages/noise/noise.h"
#include "stages/orient/orient.h"
#include "stages/psf/psf.h"
#include "stages/psum/psum.h"
#include "stages/spaxel_grid/spaxel_grid.h"
#include "stages/stellar_spectra/stellar_spectra.h"

namespace ifusim {
namespace {

// Every stage, in pipeline order: its folder's StageEntry (stages/<folder>/<folder>.h). Adding a
// stage is its folder, its header's include above and one line here.
const std::vector<StageEntry>& registry() {
  static const std::vector<StageEntry> entries = {
      spaxel_grid_stage(),
      orient_stage(),
      aperture_stage(),
      dust_stage(),
      mass_image_stage(),
      stellar_spectra_stage(),
      emission_lines_stage(),
      psum_stage(),
      flux_stage(),
      foreground_dust_stage(),
      psf_stage(),
      lsf_stage(),
      fibres_stage(),
      aperture_mask_stage(),
      noise_stage(),
  };
  return entries;
}

// "a particle stage", "the reduction", "a cube stage".
std::string kind_name(StageKind kind) {
  return kind == StageKind::reduction ? "the reduction"
                                      : std::string("a ") + to_string(kind) + " stage";
}

// Whether `field` is one of the field table's fields of a particle set.
template <class Set>
bool in_field_table(const std::string& field) {
  bool found = false;
  Set set;
  Set::for_each_field(set,
                      [&](const FieldSpec& f, const auto&) { found = found || field == f.name; });
  return found;
}

bool is_particle_field(const std::string& name) {
  return name.rfind("stars.", 0) == 0 || name.rfind("gas.", 0) == 0;
}

// Whether a particle field ("stars.x", "gas.x") is one of the input field table's.
bool in_input_table(const std::string& name) {
  if (name.rfind("stars.", 0) == 0) return in_field_table<Stars>(name.substr(6));
  if (name.rfind("gas.", 0) == 0) return in_field_table<Gas>(name.substr(4));
  return false;
}

}  // namespace

std::span<const StageEntry> stage_registry() {
  return registry();
}

const StageEntry& stage_entry(const std::string& name, const std::string& path) {
  const auto& entries = registry();
  const auto entry = std::find_if(entries.begin(), entries.end(),
                                  [&](const StageEntry& s) { return name == s.name; });
  if (entry != entries.end()) return *entry;
  std::string known;
  for (const auto& s : entries) known += (known.empty() ? "" : ", ") + s.name;
  throw ConfigError(path + ": unknown stage \"" + name + "\" (known: " + known + ")");
}

std::unique_ptr<Stage> make_stage(const std::string& name, const nlohmann::json& params,
                                  const std::string& path, const StageResources& resources) {
  return stage_entry(name, path).make(params, path, resources);
}

StageParameters stage_parameters(const StageEntry& entry, const StageResources& resources) {
  ParamSchema schema;
  StageParameters out;
  const std::string path = "stages." + entry.name;
  const std::vector<nlohmann::json> examples =
      entry.examples.empty() ? std::vector<nlohmann::json>{nlohmann::json::object()}
                             : entry.examples;
  for (const nlohmann::json& example : examples) {
    const ParamSchema::Recording recording(schema, path);
    try {
      entry.make(example, path, resources);
    } catch (const std::exception& e) {
      if (out.error.empty()) out.error = e.what();
    }
  }
  out.params = schema.params();
  return out;
}

std::vector<std::string> input_fields() {
  std::vector<std::string> out;
  auto add = [&](const std::string& set_name, auto set) {
    decltype(set)::for_each_field(
        set, [&](const FieldSpec& f, const auto&) { out.push_back(set_name + "." + f.name); });
  };
  add("stars", Stars{});
  add("gas", Gas{});
  return out;
}

void check_stages(const std::vector<RunStage>& stages, std::vector<std::string> available) {
  std::set<std::string> seen;
  const RunStage* after_particles = nullptr;  // the first stage that is not a particle stage
  const RunStage* first_cube = nullptr;
  auto order_error = [](const RunStage& s, const RunStage& before) {
    return ConfigError(s.path + ": stage \"" + s.entry->name + "\" is " + kind_name(s.entry->kind) +
                       " and must come before " + kind_name(before.entry->kind) + " \"" +
                       before.entry->name + "\" (" + before.path +
                       "): the particles are deposited, then reduced, then the cube transformed");
  };
  for (const RunStage& s : stages) {
    const std::string& name = s.entry->name;
    const StageKind kind = s.entry->kind;
    if (kind == StageKind::particle && after_particles) throw order_error(s, *after_particles);
    if (kind == StageKind::reduction && first_cube) throw order_error(s, *first_cube);
    if (kind != StageKind::particle && !after_particles) after_particles = &s;
    if (kind == StageKind::cube && !first_cube) first_cube = &s;
    if (!seen.insert(name).second && !s.entry->repeatable)
      throw ConfigError(s.path + ": stage \"" + name +
                        "\" is listed twice; a stage may appear once in a pipeline");
  }
  // What each cube stage made, and which stage made it: a cube's product is made once, so that
  // two stages cannot both draw noise on it (noise, and fibres, which draws it per fibre).
  std::map<std::string, const RunStage*> cube_products;
  for (const RunStage& s : stages) {
    const std::string& name = s.entry->name;
    if (s.entry->kind == StageKind::cube)
      for (const auto& p : s.stage->provides()) {
        const auto [at, added] = cube_products.emplace(p.name, &s);
        if (!added && at->second->entry != s.entry) {
          std::string message = s.path + ": stage \"" + name + "\" makes " + p.name;
          message += ", which stage \"" + at->second->entry->name + "\" (" + at->second->path;
          message += ") already makes: remove one of them (a cube's " + p.name;
          message += " is made by one stage)";
          throw ConfigError(message);
        }
      }
  }
  for (const RunStage& s : stages) {
    const std::string& name = s.entry->name;
    for (const auto& need : s.stage->needs()) {
      if (std::find(available.begin(), available.end(), need) == available.end())
        throw ConfigError(s.path + ": stage \"" + name + "\" needs " + need +
                          ", which neither the input nor an earlier stage provides");
    }
    for (const auto& p : s.stage->provides()) {
      // A particle field a stage derives is typed (Provided::field) and is not an input's.
      if (is_particle_field(p.name) && (!p.is_field() || in_input_table(p.name)))
        throw std::logic_error("stage " + name + " provides " + p.name +
                               ", which is an input field or not declared with Provided::field");
      available.push_back(p.name);
    }
  }
}

std::vector<std::unique_ptr<Stage>> make_stages(const nlohmann::json& stages,
                                                const std::string& path,
                                                std::vector<std::string> available,
                                                const StageResources& resources) {
  if (!stages.is_array() || stages.empty())
    throw ConfigError(path +
                      ": expected a non-empty array of {\"stage\": NAME, \"params\": {...}}");
  std::vector<RunStage> run;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    JsonParams entry(stages[i], at);
    std::vector<std::string> names;
    for (const auto& s : stage_registry()) names.push_back(s.name);
    const std::string name = entry.choice("stage", names);
    const nlohmann::json params =
        entry.has("params") ? entry.raw("params") : nlohmann::json::object();
    entry.finish();
    const StageEntry& e = stage_entry(name, at);
    run.push_back({&e, e.make(params, at + ".params", resources), at});
  }
  check_stages(run, std::move(available));
  std::vector<std::unique_ptr<Stage>> out;
  for (auto& s : run) out.push_back(std::move(s.stage));
  return out;
}

}  // namespace ifusim
