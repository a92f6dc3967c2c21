#include "pipeline/runner.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <set>
#include <stdexcept>

#include "core/config_error.h"
#include "data/collectives/processes.h"
#include "data/fibre_bundle.h"
#include "data/runtime.h"
#include "io/cube/cube_io.h"
#include "io/cube/quicklook.h"
#include "io/emission_line_table.h"
#include "io/json_file.h"
#include "io/output_folder.h"
#include "io/run_config.h"
#include "io/sky/sky_tables.h"
#include "io/ssp/ssp_library.h"
#include "io/telescope.h"
#include "pipeline/devices.h"
#include "pipeline/particle_source.h"
#include "pipeline/plan.h"
#include "pipeline/registry.h"
#include "pipeline/vjp.h"

namespace ifusim {
namespace fs = std::filesystem;

namespace {

// Peak resident set since the last reset (VmHWM), and its reset (Linux >= 4.0).
std::size_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}
void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

// The run-config values a stage's parameters may inherit (StageEntry::inherits), by the keys the
// entries name: the galaxy's orientation, the template policy, and the whole resolved telescope
// (preset and overrides) in the form its preset is written (io/telescope.h), so that a stage
// inherits any `telescope.X` it declares without the runner knowing which.
nlohmann::json run_context(const RunConfig& c) {
  nlohmann::json context = {{"galaxy", {{"orientation", c.orientation}}}, {"ssp", c.ssp_params}};
  if (c.ebv_mw_mag) context["galaxy"]["ebv_mw"] = *c.ebv_mw_mag;  // stages/foreground_dust
  context["telescope"] = to_json(c.telescope);
  return context;
}

// Makes a stage of the run from its own "stages.<name>" object, completed with the run-config
// values it inherits (StageEntry::inherits). A dotted parameter ("noise.throughput") goes into its
// parent object, and only where the stage's parameters give that object (an optional part of the
// stage, as the fibres' `noise`). An error in an inherited value names the run-config key the user
// wrote ("galaxy.orientation: ..."), not the stage's parameter.
std::unique_ptr<Stage> make_run_stage(const StageEntry& entry, const StageConfig& s,
                                      const std::string& path, const nlohmann::json& context,
                                      const StageResources& resources) {
  nlohmann::json params = s.params;
  std::vector<const InheritedKey*> inherited;
  auto pointer_of = [](const std::string& dotted) {
    std::string pointer = "/" + dotted;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    return nlohmann::json::json_pointer(pointer);
  };
  for (const InheritedKey& key : entry.inherits) {
    const nlohmann::json::json_pointer at = pointer_of(key.run_key);
    const nlohmann::json::json_pointer param = pointer_of(key.param);
    const nlohmann::json::json_pointer parent = param.parent_pointer();
    if (!parent.empty() && !(params.contains(parent) && params.at(parent).is_object())) continue;
    if (params.contains(param) || !context.contains(at)) continue;
    params[param] = context.at(at);
    inherited.push_back(&key);
  }
  try {
    return entry.make(params, path, resources);
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    for (const InheritedKey* key : inherited) {
      const std::string stage_key = path + "." + key->param;
      const char after = message.size() > stage_key.size() ? message[stage_key.size()] : '\0';
      if (message.rfind(stage_key, 0) == 0 && (after == ':' || after == '.' || after == '['))
        throw ConfigError(key->run_key + message.substr(stage_key.size()));
    }
    throw;
  }
}

Observation make_observation(const RunConfig& c, const GalaxyData& data, const SspGrid& ssp,
                             const CubeMargin& margin) {
  Observation o = observation_of(c, ssp);
  o.cosmology = c.cosmology_source == "snapshot" ? data.galaxy.cosmology : c.cosmology;
  o.luminosity_distance_mpc = o.cosmology.luminosity_distance_mpc(c.redshift);
  o.kpc_per_arcsec = o.cosmology.kpc_per_arcsec(c.redshift);
  o.margin = margin;
  return o;
}

void draw_progress(std::size_t done, std::size_t total, const std::string& label) {
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / std::max<std::size_t>(total, 1));
  std::fprintf(stderr, "\r[%s%s] %zu/%zu %-24s", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), done, total, label.c_str());
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

// The cube's files and the pictures drawn of the cube itself; with every quick-look a stage of
// the registry may draw, every file a run may write into its output folder (an earlier run's
// that this one does not write are removed).
const std::vector<std::string> kCubeOutputs = {"cube.fits", "cube.h5", "white_light.png",
                                               "spectrum.png"};

// A cube file's name for an arm: "cube.fits" becomes "cube_SAMI-red.fits" (the run's only cube
// keeps its name: `arm` empty).
std::string arm_file(const std::string& file, const std::string& arm) {
  if (arm.empty()) return file;
  const std::size_t dot = file.find('.');
  return file.substr(0, dot) + "_" + arm + file.substr(dot);
}

// Every file a run of `c` may write: each arm's cube files and pictures, and summary.json.
std::vector<std::string> run_outputs(const RunConfig& c) {
  std::vector<std::string> names;
  for (const StageEntry& entry : stage_registry())
    for (const QuickLook& q : entry.quicklooks) names.push_back(q.file);
  names.insert(names.begin(), kCubeOutputs.begin(), kCubeOutputs.end());
  std::vector<std::string> out;
  if (c.arms.empty()) out = names;
  for (const Telescope& arm : c.arms)
    for (const std::string& name : names) out.push_back(arm_file(name, arm.name));
  out.push_back("summary.json");
  return out;
}

// The mesh, the templates and the stages of a run, validated; nothing read yet.
struct RunSetup {
  std::unique_ptr<Mesh> mesh;
  StageResources resources;
  // The stages in run order, the reduction among them (the registry's, where the config lists
  // none): [0, reduction) the particle stages, reduction, then the cube stages.
  std::vector<RunStage> stages;
  std::size_t reduction = 0;
  bool read_gas = false;  // some stage uses the gas and the config allows it
  CubeMargin margin;      // what the stages simulate beyond the field and the band
  std::unique_ptr<ParticleSource> source;
};

std::vector<const Stage*> stage_pointers(const std::vector<RunStage>& stages) {
  std::vector<const Stage*> out;
  for (const RunStage& r : stages) out.push_back(r.stage.get());
  return out;
}

// The reduction stage of the registry, for a run whose config does not list one.
RunStage implicit_reduction(const StageResources& resources) {
  for (const StageEntry& entry : stage_registry())
    if (entry.kind == StageKind::reduction)
      return {&entry, entry.make(nlohmann::json::object(), "stages." + entry.name, resources),
              "stages." + entry.name + " (added: the run's reduction)"};
  throw std::logic_error("the stage registry has no reduction");
}

// A margin must be cropped again: some stage after the last that makes one must crop it.
void check_margin(const std::vector<RunStage>& stages, const Observation& obs,
                  const CubeMargin& margin) {
  if (margin.spaxels == 0 && margin.wavelengths == 0) return;
  std::string makers;
  bool cropped = false;
  for (const RunStage& s : stages) {
    const CubeMargin m = s.stage->margin(obs);
    if (m.spaxels > 0 || m.wavelengths > 0) {
      makers += (makers.empty() ? "" : ", ") + s.entry->name;
      cropped = false;
    }
    cropped = cropped || s.entry->crops_margin;
  }
  if (cropped) return;
  std::string croppers;
  for (const StageEntry& entry : stage_registry())
    if (entry.crops_margin) croppers += (croppers.empty() ? "" : " or ") + entry.name;
  throw ConfigError("pipeline: its stages simulate a margin of " + std::to_string(margin.spaxels) +
                    " spaxels and " + std::to_string(margin.wavelengths) +
                    " wavelengths around the field and the band (" + makers + "); add " + croppers +
                    " after them, which crops it");
}

// A data file a stage names: absolute, "${IFUSIM_DATA_DIR}/...", or relative to the data folder.
std::string data_file(const std::string& file) {
  const std::filesystem::path p(resolve_path(file, ""));
  return p.is_absolute() ? p.string() : (std::filesystem::path(data_dir()) / p).string();
}

// A run key that acts only through a stage inheriting it (InheritedKey::needs_stage, as
// galaxy.ebv_mw through foreground_dust): an astronomer who gives it expects it applied, so a run
// that gives it (other than its no-effect value) with no such stage in its pipeline is refused,
// naming the stages that would apply it, and so is a stage that gives its own, different value
// beside it: one value, one meaning. The keys and the stages come from the registry.
void check_keys_that_need_a_stage(const RunConfig& c, const nlohmann::json& context,
                                  const std::vector<RunStage>& stages) {
  std::set<std::string> run_keys;
  for (const StageEntry& e : stage_registry())
    for (const InheritedKey& k : e.inherits)
      if (k.needs_stage) run_keys.insert(k.run_key);
  for (const std::string& run_key : run_keys) {
    std::string pointer = "/" + run_key;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    const nlohmann::json::json_pointer at(pointer);
    if (!context.contains(at)) continue;
    const nlohmann::json& value = context.at(at);
    const auto key_of = [&](const StageEntry& e) -> const InheritedKey* {
      for (const InheritedKey& k : e.inherits)
        if (k.needs_stage && k.run_key == run_key) return &k;
      return nullptr;
    };
    bool applied = false;
    const InheritedKey* any_key = nullptr;
    for (const RunStage& r : stages) {
      const InheritedKey* key = key_of(*r.entry);
      if (!key) continue;
      applied = true;
      for (const StageConfig& st : c.stages) {
        if (st.name != r.entry->name || !st.params.contains(key->param)) continue;
        const nlohmann::json& own = st.params.at(key->param);
        if (own == value) continue;
        std::string message = run_key + ": " + value.dump() + ", and " + r.path + "." + key->param;
        message += " gives " + own.dump() + ": give the value once (" + run_key + ")";
        throw ConfigError(message);
      }
    }
    std::string takers;
    int n_takers = 0;
    for (const StageEntry& e : stage_registry())
      if (const InheritedKey* key = key_of(e)) {
        any_key = key;
        takers += (takers.empty() ? "" : " or ") + e.name;
        takers += " (a ";
        takers += to_string(e.kind);
        takers += " stage)";
        ++n_takers;
      }
    if (applied || (any_key && value == any_key->no_effect)) continue;
    std::string message = run_key + ": " + value.dump();
    message += ", but no stage of the pipeline applies it: add ";
    if (n_takers == 1) {
      const std::size_t kind = takers.find(" (");
      message += takers.substr(0, kind) + " to the pipeline" + takers.substr(kind);
    } else {
      message += "one of " + takers + " to the pipeline";
    }
    message += ", or leave " + run_key + " out";
    if (any_key && !any_key->no_effect.is_null())
      message += " or set it to " + any_key->no_effect.dump();
    throw ConfigError(message);
  }
}

RunSetup set_up(const RunConfig& c, const RunOptions& options) {
  RunSetup s;
  const Backend backend = options.backend.value_or(c.backend);
  const int n_devices = options.n_devices.value_or(c.n_devices);
  check_run_device_count(backend, n_devices, c.oversubscribe_host,
                         options.n_devices ? "--devices" : "devices.count");
  s.mesh = make_mesh(backend, n_devices, options.across_processes && processes::size() > 1);
  spdlog::info("{} device(s) on backend {}", s.mesh->size(), to_string(backend));
  spdlog::info("loading SSP templates {}", c.ssp_library);
  s.resources.ssp = std::make_shared<const SspGrid>(load_ssp_library(c.ssp_library, c.ssp_format));
  spdlog::info("templates {}: {} ages x {} metallicities x {} wavelengths", s.resources.ssp->name,
               s.resources.ssp->n_age(), s.resources.ssp->n_metallicity(),
               s.resources.ssp->n_wave());
  s.resources.load_line_ratio_table = [](const std::string& file, const std::string& key_path) {
    spdlog::info("{}: line ratios from {}", key_path, file);
    return std::make_shared<const LineRatioTable>(read_line_ratio_table(file));
  };
  s.resources.load_sky_spectrum = [](const std::string& file, const std::string& key_path) {
    const std::string path = data_file(file);
    spdlog::info("{}: night-sky spectrum from {}", key_path, path);
    return std::make_shared<const SkySpectrum>(read_sky_spectrum(path));
  };
  s.resources.load_extinction_curve = [](const std::string& file, const std::string& key_path) {
    const std::string path = data_file(file);
    spdlog::info("{}: atmospheric extinction from {}", key_path, path);
    return std::make_shared<const ExtinctionCurve>(read_extinction_curve(path));
  };
  const nlohmann::json context = run_context(c);
  for (const auto& st : c.stages) {
    const std::string path = "stages." + st.name;
    const StageEntry& entry = stage_entry(st.name, path);
    s.stages.push_back({&entry, make_run_stage(entry, st, path, context, s.resources), path});
  }
  check_keys_that_need_a_stage(c, context, s.stages);
  // The reduction stands between the particle and the cube stages (check_stages checks the
  // order of a listed one).
  auto barrier = std::find_if(s.stages.begin(), s.stages.end(), [](const RunStage& r) {
    return r.entry->kind != StageKind::particle;
  });
  if (barrier == s.stages.end() || barrier->entry->kind != StageKind::reduction)
    barrier = s.stages.insert(barrier, implicit_reduction(s.resources));
  s.reduction = static_cast<std::size_t>(barrier - s.stages.begin());
  check_stages(s.stages, input_fields());
  // The margin needs no cosmology: observation_of is enough.
  const Observation obs = observation_of(c, *s.resources.ssp);
  s.margin = run_margin(stage_pointers(s.stages), obs);
  check_margin(s.stages, obs, s.margin);
  // Only the particle types some stage uses are read (the gas for dust and emission lines).
  bool gas_used = false;
  for (const RunStage& r : s.stages)
    for (const auto& need : r.stage->needs()) gas_used = gas_used || need.rfind("gas.", 0) == 0;
  s.read_gas = c.read_gas && gas_used;
  s.source = open_particle_source(c, *s.mesh, s.read_gas);
  return s;
}

// Times a step of a stage: its seconds summed over the blocks, its memory peaks.
class StageTimer {
 public:
  StageTimer(Backend backend, std::vector<StageReport>& reports)
      : backend_(backend), reports_(reports) {}
  template <class F>
  void operator()(std::size_t stage, const F& work) {
    memory::reset_peak(backend_);
    reset_peak_rss();
    const auto t0 = std::chrono::steady_clock::now();
    work();
    StageReport& r = reports_[stage];
    r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.peak_device_bytes = std::max(r.peak_device_bytes, memory::peak_bytes(backend_));
    r.peak_rss_bytes = std::max(r.peak_rss_bytes, peak_rss_bytes());
  }

 private:
  Backend backend_;
  std::vector<StageReport>& reports_;
};

using Progress = std::function<void(const std::string& label)>;

// The particle stages' loop over the blocks of the galaxy (docs/design.md, "The run loop"). A
// held galaxy is one block that stays in memory: every stage runs on it once, in order, and a
// pass observes it as the stages before the passing one left it. A streamed galaxy's blocks
// (its gas in one block of its own, on process 0, then its stars) are read again for every pass
// and for the deposit, each run through the stages before the one that observes it; a run
// across processes visits only this process's blocks (Mesh::owns_block).
class ParticleLoop {
 public:
  ParticleLoop(RunState& state, std::vector<RunStage>& stages, std::size_t n_particle_stages,
               ParticleSource& source, StageTimer& timed, const Progress& progress)
      : state_(state),
        stages_(stages),
        n_(n_particle_stages),
        source_(source),
        timed_(timed),
        progress_(progress) {}

  // The progress steps the loop takes.
  std::size_t steps() const {
    if (source_.resident()) return n_;
    const StreamedInput input = source_.input();
    std::size_t n = source_.n_star_blocks() + gas_block();  // the deposit
    for (std::size_t k = 0; k < n_; ++k) {
      const Stage::Pass over = stages_[k].stage->pass(input);
      if (over != Stage::Pass::none) n += over == Stage::Pass::stars ? source_.n_star_blocks() : 1;
    }
    return n + 1;  // and one when the blocks are done
  }

  // Every pass a stage asks for, in stage order, then every block deposited.
  void run(std::vector<std::size_t>& stars_per_device, std::size_t& n_gas) {
    const StreamedInput input = source_.input();
    for (std::size_t k = 0; k < n_; ++k) {
      const Stage::Pass over = stages_[k].stage->pass(input);
      if (over == Stage::Pass::none) continue;
      visit(over, k, stages_[k].entry->name + " pass",
            [&] { timed_(k, [&] { stages_[k].stage->observe(state_); }); });
      timed_(k, [&] { stages_[k].stage->end_pass(state_); });
    }
    visit(Stage::Pass::none, n_, "block", [&] {
      for (const auto& shard : state_.data.stars.mass_msun.shards())
        stars_per_device[static_cast<std::size_t>(shard.device->id)] += shard.range.size();
      n_gas += state_.data.gas.count();
    });
    if (!source_.resident()) progress_("streamed");
  }

 private:
  bool gas_block() const {
    if (source_.reads_gas()) return true;
    for (std::size_t k = 0; k < n_; ++k)
      if (stages_[k].stage->pass(source_.input()) == Stage::Pass::gas) return true;
    return false;
  }

  // Runs stage i on the block held.
  void run_stage_on_block(std::size_t i) {
    timed_(i, [&] { stages_[i].stage->run(state_); });
  }

  // Shows `observe` the blocks of `over` (none: every block, the gas's and the stars'), each
  // run through the stages [0, until) first.
  template <class F>
  void visit(Stage::Pass over, std::size_t until, const std::string& what, const F& observe) {
    if (source_.resident()) {  // the one block, advanced through the stages not yet run on it
      for (; advanced_ < until; ++advanced_) {
        progress_(stages_[advanced_].entry->name);
        run_stage_on_block(advanced_);
      }
      observe();
      return;
    }
    const Mesh& mesh = state_.mesh;
    bool any = false;
    auto run_block = [&] {
      for (std::size_t i = 0; i < until; ++i) run_stage_on_block(i);
      observe();
      any = true;
    };
    if (over != Stage::Pass::stars && gas_block()) {
      progress_(what + " gas");
      state_.data.stars = source_.empty_block(mesh);
      if (mesh.process_rank() == 0) state_.data.gas = source_.read_gas(mesh);
      run_block();
      state_.data.gas = {};
    }
    const std::size_t n_blocks = over == Stage::Pass::gas ? 0 : source_.n_star_blocks();
    for (std::size_t b = 0; b < n_blocks; ++b) {
      progress_(what + " " + std::to_string(b + 1) + "/" + std::to_string(n_blocks));
      if (!mesh.owns_block(b)) continue;  // another process's block
      state_.data.stars = source_.read_stars(mesh, b);
      if (state_.data.stars.count() == 0) continue;  // only wind cells
      run_block();
    }
    // A process without a star still declares the stages' partials (an empty block), so that
    // every process takes part in the same collectives.
    if (!any && mesh.process_count() > 1) {
      state_.data.stars = source_.empty_block(mesh);
      run_block();
    }
    state_.data.stars = {};
  }

  RunState& state_;
  std::vector<RunStage>& stages_;
  std::size_t n_;
  ParticleSource& source_;
  StageTimer& timed_;
  const Progress& progress_;
  std::size_t advanced_ = 0;  // a held galaxy: the stages run on it so far
};

// The quick-look pictures: the cube's white light and integrated spectrum, and every map a
// stage of the run declared a quick-look for (the first of its maps the run made).
void draw_quicklooks(const Cube& cube, const std::vector<RunStage>& stages, const std::string& arm,
                     OutputFolder& out) {
  const int nx = cube.shape.nx, ny = cube.shape.ny;
  write_map_png(out.path(arm_file("white_light.png", arm)), cube.maps.at("white_light").values, nx,
                ny, {"White light (band mean)", Colormap::viridis, false, true, cube.unit});
  write_spectrum_png(out.path(arm_file("spectrum.png", arm)), wavelength_angstrom(cube),
                     integrated_spectrum(cube), "Wavelength (Angstrom)", cube.unit,
                     "Integrated spectrum");
  for (const RunStage& s : stages)
    for (const QuickLook& q : s.entry->quicklooks)
      for (const auto& [map, title] : q.maps) {
        const auto it = cube.maps.find(map);
        if (it == cube.maps.end()) continue;
        write_map_png(out.path(arm_file(q.file, arm)), it->second.values, nx, ny,
                      {title, q.diverging ? Colormap::diverging : Colormap::viridis, q.diverging,
                       q.log_scale, it->second.unit});
        break;
      }
}

// The plan's memory check, before any particle is read.
void check_plan(const RunConfig& c, const RunSetup& setup) {
  const RunPlan plan = plan_run(c, *setup.mesh, stage_pointers(setup.stages), *setup.resources.ssp,
                                setup.read_gas, setup.margin);
  spdlog::debug("plan:\n{}", plan.report);
  if (plan.fits()) return;
  std::string message = "the run does not fit in memory (ifusim plan shows why):";
  for (const auto& p : plan.problems) message += "\n  " + p;
  throw ConfigError(message);
}

// The run's state with the galaxy opened: its record, the bounds of its stars and (held) its
// particles, and how it is observed.
void open_galaxy(const RunConfig& c, const RunSetup& setup, RunState& state) {
  state.data = setup.source->open(*setup.mesh);
  state.observation = make_observation(c, state.data, *setup.resources.ssp, setup.margin);
  spdlog::info(
      "z = {}, D_L = {:.2f} Mpc, {:.4f} kpc/arcsec; telescope {} ({} x {} spaxels, {} wavelengths)",
      c.redshift, state.observation.luminosity_distance_mpc, state.observation.kpc_per_arcsec,
      c.telescope.name, c.telescope.n_spaxels_side(), c.telescope.n_spaxels_side(),
      c.telescope.n_wave());
}

// The reduction, then the cube stages on the reduced cube.
void run_cube_stages(RunSetup& setup, RunState& state, StageTimer& timed,
                     const Progress& progress) {
  std::vector<RunStage>& stages = setup.stages;
  for (std::size_t i = setup.reduction; i < stages.size(); ++i) {
    progress(stages[i].entry->name);
    spdlog::debug("stage {}/{}: {}", i + 1, stages.size(), stages[i].entry->name);
    timed(i, [&] { stages[i].stage->run(state); });
  }
  if (!state.cube)
    throw ConfigError(
        "pipeline: no stage of the run deposits into the cube (none provides "
        "partial_cube)");
}

// The reduced cube with its axes, provenance and maps (the white light among them).
Cube finished_cube(const RunConfig& c, const RunSetup& setup, RunState& state) {
  Cube cube = std::move(*state.cube);
  const Mesh& mesh = *setup.mesh;
  cube.axes = state.observation.axes;
  cube.fits_layout = c.telescope.fits_layout;
  if (cube.fits_layout == "manga") {
    // SPECRES: the instrument's resolution at each plane (MaNGA's DRP: Law et al. 2016).
    const ResolutionCurve& lsf = state.observation.telescope_lsf_fwhm_angstrom;
    if (lsf.min() > 0.0)
      for (int k = 0; k < cube.shape.n_wave; ++k)
        cube.lsf_fwhm_angstrom.push_back(lsf.at(cube.axes.wavelength_angstrom(k)));
  }
  cube.provenance = {
      {"IFUSIM_VERSION", IFUSIM_VERSION},
      {"CONFIG_FILE", c.config_path},
      {"CONFIG", c.document.dump()},
      {"INPUT", c.galaxy      ? c.galaxy->source
                : c.synthetic ? "synthetic " + c.document.at("input").at("synthetic").dump()
                              : provenance_path(c.input_file)},
      {"SIMULATION", state.data.galaxy.simulation},
      {"SNAPSHOT", std::to_string(state.data.galaxy.snapshot)},
      {"SUBHALO", std::to_string(state.data.galaxy.subhalo_id)},
      {"SSP", setup.resources.ssp->name + " (" + provenance_path(c.ssp_library) + ")"},
      {"TELESCOPE", c.telescope.name},
      {"REDSHIFT", std::to_string(c.redshift)},
      {"BACKEND", std::string(to_string(mesh.backend())) + " x " + std::to_string(mesh.size())},
      {"SEED", std::to_string(c.seed)}};
  cube.maps = std::move(state.maps);
  cube.maps["white_light"] = {cube.unit, "mean flux density over the band", spaxel_means(cube)};
  const auto& white = cube.maps["white_light"].values;
  if (std::none_of(white.begin(), white.end(), [](double v) { return v != 0 && !std::isnan(v); }))
    spdlog::warn(
        "the cube holds no light: no star fell in the {:.3g} kpc field (positions must "
        "be relative to the galaxy's centre; is the galaxy centred, the redshift right?)",
        state.observation.kpc_per_arcsec * c.telescope.fov_arcsec);
  return cube;
}

// summary.json: devices and their stars, every stage's time and memory, the cube's shape.
nlohmann::json run_summary(const RunConfig& c, const RunReport& report, const Cube& cube,
                           Backend backend, std::size_t n_stars, std::size_t n_gas) {
  nlohmann::json summary;
  summary["ifusim_version"] = IFUSIM_VERSION;
  summary["config"] = c.config_path;
  summary["backend"] = to_string(backend);
  summary["n_stars"] = n_stars;
  summary["n_gas"] = n_gas;
  for (std::size_t d = 0; d < report.devices.size(); ++d)
    summary["devices"].push_back(
        {{"device", report.devices[d]}, {"stars", report.stars_per_device.at(d)}});
  for (const auto& s : report.stages)
    summary["stages"].push_back({{"stage", s.name},
                                 {"seconds", s.seconds},
                                 {"peak_device_bytes", s.peak_device_bytes},
                                 {"peak_rss_bytes", s.peak_rss_bytes}});
  summary["cube"] = {{"nx", cube.shape.nx},
                     {"ny", cube.shape.ny},
                     {"n_wave", cube.shape.n_wave},
                     {"unit", cube.unit}};
  summary["total_seconds"] = report.total_seconds;
  return summary;
}

// The cube's files and quick-looks (into the staging folder), named for `arm` (arm_file).
// The pictures are drawn on a second thread while this one writes the cube's files (at 1e6
// stars on MUSE a third of the writing time each, issue 22): separate files, libpng on that
// thread only, cfitsio and HDF5 on this one only; `out` is asked for the cube's paths first, so
// that while both run only the pictures' thread calls it.
void write_cube_files(const RunConfig& c, const Cube& cube, const std::vector<RunStage>& stages,
                      const std::string& arm, OutputFolder& out) {
  // Each file's time in the log (issue 22: writing was a third of the MUSE-WFM disc run); the
  // pictures are drawn on a second thread meanwhile, the paths fetched before it starts.
  auto timed_write = [](const std::string& what, auto&& write) {
    const auto t0 = std::chrono::steady_clock::now();
    write();
    spdlog::info("wrote {:<16} {:8.3f} s", what,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  const std::string fits = c.write_fits ? out.path(arm_file("cube.fits", arm)) : std::string();
  const std::string hdf5 = c.write_hdf5 ? out.path(arm_file("cube.h5", arm)) : std::string();
  std::future<void> pictures;
  if (c.write_png)
    pictures = std::async(std::launch::async, [&] {
      timed_write("quick-looks", [&] { draw_quicklooks(cube, stages, arm, out); });
    });
  if (!fits.empty()) timed_write("cube.fits", [&] { write_cube_fits(cube, fits); });
  if (!hdf5.empty()) timed_write("cube.h5", [&] { write_cube_hdf5(cube, hdf5); });
  if (pictures.valid()) pictures.get();
}

// The galaxy read and its particles through every stage: the passes, the deposit, the reduction
// and the cube stages. `state` is left as the stages left it (the final cube in state.cube), the
// stages as their run() left them (what their adjoints need): run_cube finishes the cube from
// there, run_pipeline_vjp goes back through the stages. Returns the gas cells deposited.
std::size_t run_stages(const RunConfig& c, RunSetup& setup, const RunOptions& options,
                       const std::string& arm, RunState& state, RunReport& report) {
  auto on_progress = options.on_progress;
  if (!on_progress && options.progress && ::isatty(STDERR_FILENO)) on_progress = draw_progress;
  const Mesh& mesh = *setup.mesh;
  for (std::size_t d = 0; d < mesh.size(); ++d)
    report.devices.push_back(mesh.device(d).description);
  for (const RunStage& r : setup.stages) report.stages.push_back({r.entry->name, 0.0, 0, 0});
  StageTimer timed(mesh.backend(), report.stages);

  // The galaxy opened: its record and star bounds (and a held galaxy's particles).
  open_galaxy(c, setup, state);
  std::size_t step = 0, n_steps = 0;
  const std::string label_prefix = arm.empty() ? "" : arm + ": ";
  const Progress progress = [&](const std::string& label) {
    if (on_progress) on_progress(step++, n_steps, label_prefix + label);
  };
  ParticleLoop particles(state, setup.stages, setup.reduction, *setup.source, timed, progress);
  n_steps = 1 + particles.steps() + (setup.stages.size() - setup.reduction);
  progress("input");

  // The passes, then every block deposited by the particle stages.
  report.stars_per_device.assign(mesh.size(), 0);
  std::size_t n_gas = 0;  // the gas cells deposited (this process's)
  particles.run(report.stars_per_device, n_gas);

  // The reduction, then the cube stages.
  run_cube_stages(setup, state, timed, progress);
  for (const auto& r : report.stages)
    spdlog::info("{}{:<16} {:8.3f} s", label_prefix, r.name, r.seconds);
  step = n_steps;
  progress("done");
  return n_gas;
}

// One cube of the run: the galaxy read, its particles through the stages, the reduced cube and
// its files (into `out`, named for `arm`, when given). `setup` was checked before any output.
RunReport run_cube(const RunConfig& c, RunSetup& setup, const RunOptions& options,
                   const std::string& arm, OutputFolder* out) {
  const auto start = std::chrono::steady_clock::now();
  RunReport report;
  RunState state(*setup.mesh);
  const std::size_t n_gas = run_stages(c, setup, options, arm, state, report);

  // The cube with its maps and quick-looks.
  report.cube = finished_cube(c, setup, state);
  if (out) write_cube_files(c, report.cube, setup.stages, arm, *out);
  report.total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.summary = run_summary(c, report, report.cube, setup.mesh->backend(),
                               state.data.star_bounds->count, n_gas);
  return report;
}

}  // namespace

// What a forward run leaves for its backward pass: the set-up (the mesh, the templates, the stage
// objects as their run() left them) and the run's state, which refers to the set-up's mesh (so it
// is destroyed first).
struct ForwardSession::Held {
  RunSetup setup;
  std::unique_ptr<RunState> state;
  RunReport report;
  CubeShape shape;  // the final cube's
  std::size_t n_stars = 0, n_gas = 0;
  double forward_seconds = 0.0;
};

ForwardSession::ForwardSession(const RunConfig& c, const RunOptions& options)
    : held_(std::make_unique<Held>()) {
  const auto start = std::chrono::steady_clock::now();
  if (!c.arms.empty())
    throw ConfigError(
        "telescope: gradients are made for one telescope; a spectrograph's arms are not "
        "supported (run each arm's telescope on its own)");
  if (options.across_processes)
    throw ConfigError(
        "gradients: a run across processes (mpirun) is not supported; run them in one process");
  Held& h = *held_;
  h.setup = set_up(c, options);
  check_plan(c, h.setup);
  if (!h.setup.source->resident())
    throw ConfigError(
        "input.stream_block_stars: gradients need the galaxy held at once; a streamed galaxy is "
        "not supported (leave input.stream_block_stars out)");
  // Forward, the stages kept as their run() left them, then the cube finished as run_pipeline
  // finishes it (its maps moved into it: no adjoint reads the cube or the maps).
  h.state = std::make_unique<RunState>(*h.setup.mesh);
  h.n_gas = run_stages(c, h.setup, options, "", *h.state, h.report);
  h.shape = h.state->cube->shape;
  h.n_stars = h.state->data.star_bounds->count;
  h.report.cube = finished_cube(c, h.setup, *h.state);
  h.state->cube.reset();
  const auto end = std::chrono::steady_clock::now();
  h.forward_seconds = std::chrono::duration<double>(end - start).count();
  h.report.total_seconds = h.forward_seconds;
  h.report.summary =
      run_summary(c, h.report, h.report.cube, h.setup.mesh->backend(), h.n_stars, h.n_gas);
  h.report.summary["forward_seconds"] = h.forward_seconds;
}

ForwardSession::ForwardSession(ForwardSession&&) noexcept = default;
ForwardSession& ForwardSession::operator=(ForwardSession&&) noexcept = default;
ForwardSession::~ForwardSession() = default;

RunReport& ForwardSession::report() {
  return held_->report;
}
const RunReport& ForwardSession::report() const {
  return held_->report;
}
const CubeShape& ForwardSession::cube_shape() const {
  return held_->shape;
}
double ForwardSession::forward_seconds() const {
  return held_->forward_seconds;
}
std::size_t ForwardSession::n_stars() const {
  return held_->n_stars;
}
std::size_t ForwardSession::n_gas() const {
  return held_->n_gas;
}

ParticleGradients ForwardSession::backward(std::span<const double> cotangent) {
  if (!held_) throw std::logic_error("ForwardSession::backward on a moved-from session");
  Held& h = *held_;
  const CubeShape& shape = h.shape;
  if (cotangent.size() != shape.n_voxels())
    throw std::invalid_argument("gradient: the cotangent holds " +
                                std::to_string(cotangent.size()) + " values; the run's cube is " +
                                to_string(shape) + " (" + std::to_string(shape.n_voxels()) +
                                " values)");
  // Back through the cube stages (after the reduction), then the particle stages (before it),
  // each last first. The runner knows no stage: each says whether it has an adjoint.
  const std::vector<RunStage>& stages = h.setup.stages;
  std::vector<const Stage*> cube_stages;
  for (std::size_t i = h.setup.reduction + 1; i < stages.size(); ++i)
    cube_stages.push_back(stages[i].stage.get());
  const CubeCotangent reduced =
      cube_stages_vjp(cube_stages, *h.state, CubeCotangent::borrowing(shape, cotangent.data()));
  ParticleGradients gradients;
  for (std::size_t i = h.setup.reduction; i-- > 0;) {
    const RunStage& r = stages[i];
    const auto start = std::chrono::steady_clock::now();
    if (!r.stage->particle_adjoint(*h.state, reduced, gradients))
      throw ConfigError(r.path + ": the stage \"" + r.entry->name +
                        "\" has no adjoint (it is not differentiable; docs/gradients.md lists "
                        "those that are): take it out of the run to differentiate it");
    log_adjoint_seconds(r.entry->name, start);
  }
  return gradients;
}

VjpReport run_pipeline_vjp(const RunConfig& c, const RunOptions& options,
                           const std::vector<double>& cotangent) {
  return run_pipeline_vjp(c, options,
                          [&](const CubeShape&) { return std::span<const double>(cotangent); });
}

VjpReport run_pipeline_vjp(
    const RunConfig& c, const RunOptions& options,
    const std::function<std::span<const double>(const CubeShape&)>& cotangent_of) {
  ForwardSession session(c, options);
  const auto forward_end = std::chrono::steady_clock::now();
  VjpReport report;
  report.forward_seconds = session.forward_seconds();
  report.gradients = session.backward(cotangent_of(session.cube_shape()));
  report.backward_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - forward_end).count();
  report.forward = std::move(session.report());
  report.forward.total_seconds = report.forward_seconds + report.backward_seconds;
  report.forward.summary["backward_seconds"] = report.backward_seconds;
  return report;
}

RunPlan plan_pipeline(const RunConfig& c, const RunOptions& options) {
  if (c.arms.empty()) {
    RunSetup setup = set_up(c, options);
    return plan_run(c, *setup.mesh, stage_pointers(setup.stages), *setup.resources.ssp,
                    setup.read_gas, setup.margin);
  }
  // Arms run one after the other: each arm's plan, the run fitting where each fits.
  RunPlan plan;
  for (const Telescope& arm : c.arms) {
    RunConfig arm_config = c;
    arm_config.telescope = arm;
    RunSetup setup = set_up(arm_config, options);
    const RunPlan p = plan_run(arm_config, *setup.mesh, stage_pointers(setup.stages),
                               *setup.resources.ssp, setup.read_gas, setup.margin);
    plan.report += "arm " + arm.name + ":\n" + p.report;
    for (const std::string& problem : p.problems)
      plan.problems.push_back(arm.name + ": " + problem);
  }
  return plan;
}

RunReport run_pipeline(const RunConfig& c, const RunOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  // 1. Everything that can be checked is checked before any particle is read: every arm's
  // stages and plan, so that no arm's cube is made for a run that would fail on the next.
  std::vector<RunConfig> configs;
  for (const Telescope& arm : c.arms) {
    configs.push_back(c);
    configs.back().telescope = arm;
    // Each arm is its own detector: its noise must not repeat the first arm's draws (the noise
    // stream is indexed by voxel, and mixes its seed first, so seed + k is an unrelated stream).
    // The first arm keeps the run's seed; an explicit stages.noise.seed is every arm's.
    configs.back().seed = c.seed + (configs.size() - 1);
  }
  if (configs.empty()) configs.push_back(c);
  std::vector<RunSetup> setups;
  for (const RunConfig& arm : configs) {
    try {
      setups.push_back(set_up(arm, options));
      check_plan(arm, setups.back());
    } catch (const ConfigError& e) {
      if (c.arms.empty()) throw;
      throw ConfigError("telescope arm " + arm.telescope.name + ": " + e.what());
    }
  }
  std::optional<OutputFolder> out;
  if (options.write_outputs && setups.front().mesh->process_rank() == 0)  // process 0 writes
    out.emplace(options.output_dir.value_or(c.output_dir), run_outputs(c));

  // 2. Each arm's cube (the run's one cube without arms).
  RunReport report;
  if (c.arms.empty()) {
    report = run_cube(c, setups.front(), options, "", out ? &*out : nullptr);
  } else {
    for (std::size_t a = 0; a < configs.size(); ++a) {
      RunReport arm =
          run_cube(configs[a], setups[a], options, c.arms[a].name, out ? &*out : nullptr);
      arm.summary["telescope"] = c.arms[a].name;
      report.summary["arms"].push_back(std::move(arm.summary));
      if (a == 0) {
        report.devices = arm.devices;
        report.stars_per_device = arm.stars_per_device;
        report.stages = arm.stages;
        report.cube = arm.cube;
      }
      report.arms.push_back(std::move(arm.cube));
    }
    report.summary["ifusim_version"] = IFUSIM_VERSION;
    report.summary["config"] = c.config_path;
  }
  report.total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.summary["total_seconds"] = report.total_seconds;

  // 3. summary.json, the last file moved into the output folder: it marks a complete set.
  if (out) {
    report.output_dir = options.output_dir.value_or(c.output_dir);
    write_json_file(out->path("summary.json"), report.summary);
    report.files = out->commit();
  }
  return report;
}

}  // namespace ifusim
