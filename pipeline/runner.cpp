#include "pipeline/runner.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/config_error.h"
#include "data/collectives/processes.h"
#include "data/runtime.h"
#include "io/cube/cube_io.h"
#include "io/cube/quicklook.h"
#include "io/emission_line_table.h"
#include "io/output_folder.h"
#include "io/rubix/rubix_galaxy.h"
#include "io/ssp/ssp_library.h"
#include "io/telescope.h"
#include "io/tng/synthetic_source.h"
#include "io/tng/tng_reader.h"
#include "pipeline/devices.h"
#include "pipeline/plan.h"
#include "pipeline/registry.h"

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

// `read_gas`: whether any stage of the run uses the gas (the config can only turn it off).
GalaxyData read_galaxy(const Mesh& mesh, const RunConfig& c, bool read_gas) {
  if (c.galaxy) {
    spdlog::info("the galaxy given: {} stars, {} gas cells ({})", c.galaxy->n_stars(),
                 read_gas ? c.galaxy->n_gas() : 0, c.galaxy->source);
    return put_host_galaxy(mesh, *c.galaxy, read_gas);
  }
  if (c.synthetic) {
    const tng::SyntheticGalaxySpec& s = *c.synthetic;
    spdlog::info(
        "generating a synthetic galaxy in memory: {} stars, {} gas cells, seed {}, z = {} "
        "(blocks of {} rows)",
        s.n_stars, read_gas ? s.n_gas : 0, s.seed, s.redshift, s.block_rows);
    return tng::make_synthetic_galaxy(mesh, s, read_gas);
  }
  if (c.input_is_rubix()) {
    spdlog::info("reading RUBIX galaxy {}", c.input_file);
    return read_rubix_galaxy(mesh, c.input_file);
  }
  TngReadOptions options;
  options.path = c.input_file;
  options.snapshot = c.snapshot;
  options.subhalo_id = c.subhalo_id;
  options.drop_nonfinite = c.drop_nonfinite;
  options.read_gas = read_gas;
  TngIngestReport report;
  spdlog::info("reading IllustrisTNG {} {}", fs::is_directory(c.input_file) ? "snapshot" : "cutout",
               c.input_file);
  GalaxyData data = read_tng(mesh, options, &report);
  spdlog::info("{} stars ({} wind cells dropped), {} gas cells; centre by {}", report.n_stars,
               report.n_wind_dropped, report.n_gas, report.center_method);
  return data;
}

// The stream of a run with input.stream_block_stars (or across processes); `read_gas`: whether
// it will be asked for the gas.
std::unique_ptr<StarStream> open_star_stream(const RunConfig& c, bool read_gas) {
  if (c.synthetic) {
    spdlog::info("streaming a synthetic galaxy: {} stars, seed {}, z = {}", c.synthetic->n_stars,
                 c.synthetic->seed, c.synthetic->redshift);
    return std::make_unique<tng::SyntheticStarStream>(*c.synthetic);
  }
  if (c.input_is_rubix()) {
    spdlog::info("streaming RUBIX galaxy {}", c.input_file);
    return std::make_unique<RubixStarStream>(c.input_file);
  }
  TngReadOptions options;
  options.path = c.input_file;
  options.snapshot = c.snapshot;
  options.subhalo_id = c.subhalo_id;
  options.drop_nonfinite = c.drop_nonfinite;
  options.read_gas = read_gas;
  if (fs::is_directory(c.input_file))
    spdlog::info("streaming subhalo {} of IllustrisTNG snapshot {}", c.subhalo_id.value_or(-1),
                 c.input_file);
  else
    spdlog::info("streaming IllustrisTNG cutout {} (centre by shrinking spheres in passes)",
                 c.input_file);
  return std::make_unique<TngStarStream>(options);
}

// Stage parameters from the run config: the stage's own "stages.<name>" object, completed with
// what the run's other sections say (orientation, template policy, the telescope's PSF).
nlohmann::json stage_params(const StageConfig& s, const RunConfig& c) {
  nlohmann::json p = s.params;
  if (s.name == "orient" && !p.contains("orientation")) p["orientation"] = c.orientation;
  if (s.name == "stellar_spectra")
    for (auto it = c.ssp_params.begin(); it != c.ssp_params.end(); ++it)
      if (!p.contains(it.key())) p[it.key()] = it.value();
  if (s.name == "psf" && !p.contains("fwhm_arcsec")) {
    if (!(c.telescope.psf_fwhm_arcsec.max() > 0))
      throw ConfigError(
          "stages.psf.fwhm_arcsec: expected a number > 0 (the telescope gives no PSF)");
    p["fwhm_arcsec"] = to_json(c.telescope.psf_fwhm_arcsec, "fwhm_arcsec");
  }
  return p;
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

// Every file a run may write into its output folder.
const std::vector<std::string> kRunOutputs = {
    "cube.fits",      "cube.h5",         "white_light.png",  "spectrum.png", "velocity.png",
    "dispersion.png", "halpha_flux.png", "gas_velocity.png", "summary.json"};

// The mesh, the templates and the stages of a run, validated; nothing read yet.
struct RunSetup {
  std::unique_ptr<Mesh> mesh;
  StageResources resources;
  std::vector<std::unique_ptr<Stage>> stages;
  bool read_gas = false;  // some stage uses the gas and the config allows it
  CubeMargin margin;      // what the stages simulate beyond the field and the band
  // Streamed (input.stream_block_stars): the source, and the stages [0, streamed) that run on
  // every block of stars.
  std::unique_ptr<StarStream> stream;
  StreamedInput stream_input;  // what its blocks bring
  std::size_t streamed = 0;
};

// The stages a streamed run gives the particles block by block: all before the first that does
// not stream. Every later stage must then need neither stars nor gas.
// `why`: what makes the run stream (the config key, or mpirun); `instead`: how not to.
std::size_t streamed_stages(const std::vector<std::unique_ptr<Stage>>& stages,
                            const StreamedInput& input, const std::string& why,
                            const std::string& instead) {
  std::size_t k = 0;
  while (k < stages.size() && stages[k]->streams(input)) ++k;
  for (std::size_t i = k; i < stages.size(); ++i) {
    bool particles = false;
    for (const auto& need : stages[i]->needs())
      particles = particles || need.rfind("gas.", 0) == 0 || need.rfind("stars.", 0) == 0;
    if (particles)
      throw ConfigError(why + ": stage " + stages[i]->name() +
                        " needs all the particles at once (" + stages[k]->name() +
                        " cannot take them block by block: " + stages[k]->why_not_streamed() +
                        "); see docs/streaming.md for the stages that stream, or " + instead);
  }
  return k;
}

RunSetup set_up(const RunConfig& c, const RunOptions& options) {
  RunSetup s;
  const Backend backend = options.backend.value_or(c.backend);
  const int n_devices = options.n_devices.value_or(c.n_devices);
  check_run_device_count(backend, n_devices, c.oversubscribe_host,
                         options.n_devices ? "--devices" : "devices.count");
  s.mesh = make_mesh(backend, n_devices);
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
  std::vector<std::string> paths;
  for (const auto& st : c.stages) {
    paths.push_back("stages." + st.name);
    s.stages.push_back(make_stage(st.name, stage_params(st, c), paths.back(), s.resources));
  }
  check_stage_order(
      s.stages, paths,
      {"stars.position_kpc", "stars.velocity_kms", "stars.mass_msun", "stars.initial_mass_msun",
       "stars.age_gyr", "stars.metallicity", "gas.position_kpc", "gas.velocity_kms",
       "gas.mass_msun", "gas.metallicity", "gas.sfr_msun_per_yr"});
  // A margin around the field (the PSF's and LSF's reach) must be cropped again.
  // (The margin needs no cosmology: observation_of is enough.)
  s.margin = run_margin(s.stages, observation_of(c, *s.resources.ssp));
  const CubeMargin& margin = s.margin;
  bool crops = false;
  for (const auto& stage : s.stages)
    for (const auto& p : stage->provides()) crops = crops || p == "cube_masked";
  if ((margin.spaxels > 0 || margin.wavelengths > 0) && !crops)
    throw ConfigError(
        "pipeline: its stages simulate a margin of " + std::to_string(margin.spaxels) +
        " spaxels and " + std::to_string(margin.wavelengths) +
        " wavelengths around the field and the band (psf, lsf); add aperture_mask after them, "
        "which crops it");
  // Only the particle types some stage uses are read (the gas for dust and emission lines).
  bool gas_used = false;
  for (const auto& stage : s.stages)
    for (const auto& need : stage->needs()) gas_used = gas_used || need.rfind("gas.", 0) == 0;
  s.read_gas = c.read_gas && gas_used;
  // A run across processes streams its stars too: each process deposits its share of the blocks.
  s.mesh->set_spans_processes(options.across_processes && processes::size() > 1);
  if (c.stream_block_stars > 0 || s.mesh->spans_processes()) {
    s.stream = open_star_stream(c, s.read_gas);
    s.stream_input = {s.stream->optional_star_fields()};
    const bool by_key = c.stream_block_stars > 0;
    s.streamed = streamed_stages(
        s.stages, s.stream_input, by_key ? "input.stream_block_stars" : "mpirun ifusim run",
        by_key ? "remove the key to hold the galaxy at once"
               : "run it in one process to hold the galaxy at once (a run across processes "
                 "streams its stars)");
  }
  return s;
}

}  // namespace

RunPlan plan_pipeline(const RunConfig& c, const RunOptions& options) {
  RunSetup setup = set_up(c, options);
  return plan_run(c, *setup.mesh, setup.stages, *setup.resources.ssp, setup.read_gas, setup.margin);
}

RunReport run_pipeline(const RunConfig& c, const RunOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  RunReport report;
  auto progress = options.on_progress;
  if (!progress && options.progress && ::isatty(STDERR_FILENO)) progress = draw_progress;

  // 1. Everything that can be checked is checked before any particle is read.
  RunSetup setup = set_up(c, options);
  const Backend backend = setup.mesh->backend();
  auto& mesh = setup.mesh;
  auto& resources = setup.resources;
  auto& stages = setup.stages;
  for (std::size_t d = 0; d < mesh->size(); ++d)
    report.devices.push_back(mesh->device(d).description);
  const RunPlan plan = plan_run(c, *mesh, stages, *resources.ssp, setup.read_gas, setup.margin);
  spdlog::debug("plan:\n{}", plan.report);
  if (!plan.fits()) {
    std::string message = "the run does not fit in memory (ifusim plan shows why):";
    for (const auto& p : plan.problems) message += "\n  " + p;
    throw ConfigError(message);
  }
  std::optional<OutputFolder> out;
  // A run across processes writes its outputs from process 0 only.
  const int rank = mesh->spans_processes() ? processes::rank() : 0;
  const int n_processes = mesh->spans_processes() ? processes::size() : 1;
  if (options.write_outputs && rank == 0) {
    report.output_dir = options.output_dir.value_or(c.output_dir);
    out.emplace(report.output_dir, kRunOutputs);
  }

  // 2. The galaxy, sharded over the devices: all of it, or (streamed) its record and the bounds
  // of its stars from a first pass. Blocks of input.stream_block_stars rows, or across processes
  // without it, one block per process.
  const std::unique_ptr<StarStream>& stream = setup.stream;
  const auto processes_count = static_cast<std::size_t>(n_processes);
  const std::size_t block_rows =
      c.stream_block_stars > 0 || !stream
          ? c.stream_block_stars
          : std::max<std::size_t>(1, (stream->n_rows() + processes_count - 1) / processes_count);
  const std::size_t n_blocks = stream ? (stream->n_rows() + block_rows - 1) / block_rows : 1;
  // A streamed run holds its gas: one block of all of it, on process 0, shown to the stages
  // before the stars' blocks (the other processes show them an empty block in its place, so
  // that they all take part in the same collectives). Only where a stage uses the gas.
  const StreamedInput& input = setup.stream_input;
  bool gas_block = setup.read_gas;
  for (std::size_t k = 0; k < setup.streamed; ++k)
    gas_block = gas_block || stages[k]->pass(input) == Stage::Pass::gas;
  // Progress steps: the input, then every block of every pass (streamed), then each stage.
  std::size_t n_steps = 1 + stages.size();
  if (stream) {
    n_steps += n_blocks + gas_block - setup.streamed;  // the deposit
    for (std::size_t k = 0; k < setup.streamed; ++k)
      if (stages[k]->pass(input) != Stage::Pass::none)
        n_steps += stages[k]->pass(input) == Stage::Pass::stars ? n_blocks : 1;
  }
  std::size_t step = 0;
  if (progress) progress(step, n_steps, "input");
  RunState state(*mesh);
  std::size_t n_gas = 0;  // the gas cells read
  if (stream) {
    spdlog::info("streaming the stars: {} rows in {} blocks of up to {}", stream->n_rows(),
                 n_blocks, block_rows);
    state.data = stream->first_pass(*mesh, block_rows);
    report.stars_per_device.assign(mesh->size(), 0);
  } else {
    state.data = read_galaxy(*mesh, c, setup.read_gas);
    n_gas = state.data.gas.count();
    state.data.star_bounds = measure_star_bounds(*mesh, state.data.stars);
    for (const auto& shard : state.data.stars.mass_msun.shards())
      report.stars_per_device.push_back(shard.range.size());
  }
  state.observation = make_observation(c, state.data, *resources.ssp, setup.margin);
  spdlog::info(
      "z = {}, D_L = {:.2f} Mpc, {:.4f} kpc/arcsec; telescope {} ({} x {} spaxels, {} wavelengths)",
      c.redshift, state.observation.luminosity_distance_mpc, state.observation.kpc_per_arcsec,
      c.telescope.name, c.telescope.n_spaxels_side(), c.telescope.n_spaxels_side(),
      c.telescope.n_wave());

  // 3. The stages, timed (summed over the blocks of a streamed galaxy), with their memory peaks.
  for (const auto& stage : stages) report.stages.push_back({stage->name(), 0.0, 0, 0});
  auto timed = [&](std::size_t i, const auto& work) {
    memory::reset_peak(backend);
    reset_peak_rss();
    const auto t0 = std::chrono::steady_clock::now();
    work();
    StageReport& r = report.stages[i];
    r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.peak_device_bytes = std::max(r.peak_device_bytes, memory::peak_bytes(backend));
    r.peak_rss_bytes = std::max(r.peak_rss_bytes, peak_rss_bytes());
  };
  std::size_t first_whole = 0;  // the first stage that runs once, on the whole galaxy
  if (stream) {
    // Every block (the gas's, the stars') goes through the streamed stages up to `until`;
    // observe then sees it.
    const std::size_t streamed = setup.streamed;
    auto for_each_block = [&](std::size_t until, bool gas, bool stars, const std::string& what,
                              const auto& observe) {
      bool any = false;
      auto run_block = [&] {
        for (std::size_t i = 0; i < until; ++i) timed(i, [&] { stages[i]->run(state); });
        observe();
        any = true;
      };
      if (gas && gas_block) {
        if (progress) progress(++step, n_steps, what + " gas");
        state.data.stars = stream->empty_block(*mesh);
        if (rank == 0 && setup.read_gas) {
          state.data.gas = stream->read_gas(*mesh);
          n_gas = state.data.gas.count();
        }
        run_block();
        state.data.gas = {};
      }
      for (std::size_t b = 0; stars && b < n_blocks; ++b) {
        if (progress)
          progress(++step, n_steps,
                   what + " " + std::to_string(b + 1) + "/" + std::to_string(n_blocks));
        if (b % processes_count != static_cast<std::size_t>(rank))
          continue;  // another process's block
        const std::size_t first = b * block_rows;
        state.data.stars =
            stream->read(*mesh, first, std::min(block_rows, stream->n_rows() - first));
        if (state.data.stars.count() == 0) continue;  // only wind cells
        run_block();
      }
      // A process without a star still declares the stages' partials (an empty block), so that
      // every process takes part in the same collectives.
      if (!any && n_processes > 1) {
        state.data.stars = stream->empty_block(*mesh);
        run_block();
      }
      state.data.stars = {};
    };
    for (std::size_t k = 0; k < streamed; ++k) {
      const Stage::Pass over = stages[k]->pass(input);
      if (over == Stage::Pass::none) continue;
      for_each_block(k, over == Stage::Pass::gas, over == Stage::Pass::stars,
                     stages[k]->name() + " pass",
                     [&] { timed(k, [&] { stages[k]->observe(state); }); });
      timed(k, [&] { stages[k]->end_pass(state); });
    }
    // The deposit: every streamed stage runs on the block; count where its stars went.
    for_each_block(streamed, true, true, "block", [&] {
      for (const auto& shard : state.data.stars.mass_msun.shards())
        report.stars_per_device[static_cast<std::size_t>(shard.device->id)] += shard.range.size();
    });
    first_whole = streamed;
    if (progress) progress(++step, n_steps, "streamed");
  }
  for (std::size_t i = first_whole; i < stages.size(); ++i) {
    if (progress) progress(++step, n_steps, stages[i]->name());
    spdlog::debug("stage {}/{}: {}", i + 1, stages.size(), stages[i]->name());
    timed(i, [&] { run_stage(*stages[i], state); });
  }
  for (const auto& r : report.stages) spdlog::info("{:<16} {:8.3f} s", r.name, r.seconds);
  if (progress) progress(n_steps, n_steps, "done");
  if (!state.cube)
    throw ConfigError("pipeline: no stage produced the reduced cube (is psum missing?)");
  Cube& cube = *state.cube;
  cube.axes = state.observation.axes;
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
      {"SSP", resources.ssp->name + " (" + provenance_path(c.ssp_library) + ")"},
      {"TELESCOPE", c.telescope.name},
      {"REDSHIFT", std::to_string(c.redshift)},
      {"BACKEND", std::string(to_string(backend)) + " x " + std::to_string(mesh->size())},
      {"SEED", std::to_string(c.seed)}};

  cube.maps = std::move(state.maps);
  cube.maps["white_light"] = {cube.unit, "mean flux density over the band",
                              white_light_image(cube)};

  // 4. Outputs: the cube with its maps, and quick-look pictures drawn from them.
  if (out && c.write_fits) write_cube_fits(cube, out->path("cube.fits"));
  if (out && c.write_hdf5) write_cube_hdf5(cube, out->path("cube.h5"));
  if (out && c.write_png) {
    const int nx = cube.shape.nx, ny = cube.shape.ny;
    write_map_png(out->path("white_light.png"), cube.maps.at("white_light").values, nx, ny,
                  {"White light (band mean)", Colormap::viridis, false, true, cube.unit});
    write_spectrum_png(out->path("spectrum.png"), wavelength_angstrom(cube),
                       integrated_spectrum(cube), "Wavelength (Angstrom)", cube.unit,
                       "Integrated spectrum");
    // The kinematic maps: light-weighted where the spectral stage gave them.
    auto draw_kinematics = [&](const std::string& kind, const std::string& title, Colormap colours,
                               bool symmetric) {
      for (const std::string weighting : {"light", "mass"}) {
        const auto it = cube.maps.find(kind + "_" + weighting + "_kms");
        if (it == cube.maps.end()) continue;
        write_map_png(
            out->path(kind + ".png"), it->second.values, nx, ny,
            {title + " (" + weighting + "-weighted)", colours, symmetric, false, it->second.unit});
        return;
      }
    };
    draw_kinematics("velocity", "Line-of-sight velocity", Colormap::diverging, true);
    draw_kinematics("dispersion", "Velocity dispersion", Colormap::viridis, false);
    // With emission lines: the H-alpha flux and the ionised gas's velocity.
    if (const auto it = cube.maps.find("flux_halpha"); it != cube.maps.end())
      write_map_png(out->path("halpha_flux.png"), it->second.values, nx, ny,
                    {"H-alpha flux", Colormap::viridis, false, true, it->second.unit});
    if (const auto it = cube.maps.find("velocity_gas_kms"); it != cube.maps.end())
      write_map_png(out->path("gas_velocity.png"), it->second.values, nx, ny,
                    {"Gas line-of-sight velocity (H-alpha-weighted)", Colormap::diverging, true,
                     false, it->second.unit});
  }
  report.total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  nlohmann::json& summary = report.summary;
  summary["ifusim_version"] = IFUSIM_VERSION;
  summary["config"] = c.config_path;
  summary["backend"] = to_string(backend);
  summary["n_stars"] = state.data.star_bounds->count;
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
  if (out) {
    std::ofstream(out->path("summary.json")) << summary.dump(2) << "\n";
    report.files = out->commit();
  }
  report.cube = std::move(cube);
  return report;
}

}  // namespace ifusim
