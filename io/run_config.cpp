#include "io/run_config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/json_params.h"
#include "io/json_file.h"
#include "io/rubix/rubix_galaxy.h"
#include "io/telescope.h"

namespace ifusim {
namespace fs = std::filesystem;

std::string data_dir() {
  if (const char* dir = std::getenv("IFUSIM_DATA_DIR"); dir && *dir) return dir;
  return IFUSIM_DEFAULT_DATA_DIR;
}

std::string provenance_path(const std::string& path) {
  if (path.empty()) return path;
  std::error_code error;
  const fs::path root = fs::weakly_canonical(data_dir(), error);
  if (error) return path;
  const fs::path p = fs::weakly_canonical(path, error);
  if (error) return path;
  const fs::path relative = p.lexically_relative(root);
  if (relative.empty() || *relative.begin() == "..") return path;
  return "${IFUSIM_DATA_DIR}/" + relative.generic_string();
}

std::string resolve_path(const std::string& value, const std::string& config_path) {
  const std::string var = "${IFUSIM_DATA_DIR}";
  std::string out = value;
  if (out.rfind(var, 0) == 0) out = data_dir() + out.substr(var.size());
  fs::path p(out);
  if (p.is_relative() && !config_path.empty())
    p = fs::absolute(config_path).parent_path() / p;  // a bare "cfg.json" has no parent_path
  return p.lexically_normal().string();
}

namespace {

// A stage parameter named *_file is a path, resolved like the config's other paths, at any depth
// of the stage's parameters (stages.fibres.noise.sky_file as stages.noise.sky_file).
void resolve_file_params(nlohmann::json& params, const std::string& config_path) {
  for (auto it = params.begin(); it != params.end(); ++it) {
    if (it.value().is_object()) {
      resolve_file_params(it.value(), config_path);
    } else if (it.value().is_string() && it.key().size() > 5 &&
               it.key().compare(it.key().size() - 5, 5, "_file") == 0) {
      it.value() = resolve_path(it.value().get<std::string>(), config_path);
    }
  }
}

std::vector<std::string> pipeline_preset(const std::string& name, const std::string& path) {
  const char* env = std::getenv("IFUSIM_CONFIG_DIR");
  const std::string dir = std::string(env && *env ? env : IFUSIM_CONFIG_DIR) + "/pipelines";
  std::vector<std::string> presets;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error))
    if (entry.path().extension() == ".json") presets.push_back(entry.path().stem().string());
  std::sort(presets.begin(), presets.end());
  std::string known;
  for (const auto& p : presets) known += (known.empty() ? "" : ", ") + p;
  // A name is a preset's file stem, never a path: "../telescopes/MUSE" would open a telescope.
  const bool plain = !name.empty() && name.find_first_of("/\\") == std::string::npos &&
                     name != "." && name != "..";
  const std::string file = dir + "/" + name + ".json";
  if (!plain || !fs::is_regular_file(file, error))
    throw ConfigError(path + ": unknown pipeline \"" + name + "\": expected a preset (" + known +
                      " in " + dir + ") or a list of stage names");
  const nlohmann::json doc = read_json_file(file, "a JSON pipeline preset");
  const nlohmann::json stages = doc.is_object() ? doc.value("stages", nlohmann::json()) : nullptr;
  if (!stages.is_array() ||
      !std::all_of(stages.begin(), stages.end(), [](const auto& s) { return s.is_string(); }))
    throw ConfigError(file + ": stages: expected a list of stage names, got " + stages.dump());
  return stages.get<std::vector<std::string>>();
}

// A count given as a JSON number: 1e6 is a float in JSON, so whole floats are accepted; below
// 2^40, the generator's limit.
std::size_t whole_number(JsonParams& p, const std::string& key, long long min,
                         std::optional<double> fallback) {
  const double v = p.number(key, fallback);
  p.require(v >= static_cast<double>(min) && v == std::floor(v) && v < 0x1p40, key,
            "an integer >= " + std::to_string(min) + " (below 2^40)",
            p.has(key) ? p.raw(key) : nlohmann::json(v));
  return static_cast<std::size_t>(v);
}

// input.synthetic: the galaxy of `ifusim make-galaxy`, made in memory (docs/config.md). Its
// snapshot redshift defaults to the observed one, its cosmology is the run's.
tng::SyntheticGalaxySpec parse_synthetic(JsonParams p, double observed_redshift,
                                         const Cosmology& cosmology) {
  tng::SyntheticGalaxySpec s;
  s.n_stars = whole_number(p, "stars", 1, std::nullopt);
  s.n_gas = whole_number(p, "gas", 0, static_cast<double>(s.n_stars / 10));
  const long long seed = p.integer("seed", 1);
  p.require(seed >= 0, "seed", "an integer >= 0", seed);
  s.seed = static_cast<std::uint64_t>(seed);
  s.redshift = p.number("redshift", observed_redshift);
  s.block_rows = whole_number(p, "block_rows", 1, static_cast<double>(s.block_rows));
  // The astronomer's knobs, named as in SyntheticGalaxySpec; its validate() checks their ranges.
  const std::pair<const char*, double*> knobs[] = {
      {"stellar_mass_msun", &s.stellar_mass_msun},
      {"gas_mass_msun", &s.gas_mass_msun},
      {"bulge_fraction", &s.bulge_fraction},
      {"disc_scale_length_kpc", &s.disc_scale_length_kpc},
      {"disc_scale_height_kpc", &s.disc_scale_height_kpc},
      {"bulge_scale_radius_kpc", &s.bulge_scale_radius_kpc},
      {"gas_scale_length_kpc", &s.gas_scale_length_kpc},
      {"v_flat_kms", &s.v_flat_kms},
      {"rotation_turnover_kpc", &s.rotation_turnover_kpc},
      {"disc_dispersion_kms", &s.disc_dispersion_kms},
      {"bulge_dispersion_kms", &s.bulge_dispersion_kms},
      {"central_metallicity_dex", &s.central_metallicity_dex},
      {"metallicity_gradient_dex_per_kpc", &s.metallicity_gradient_dex_per_kpc},
      {"inclination_deg", &s.inclination_deg},
      {"position_angle_deg", &s.position_angle_deg}};
  for (const auto& [key, value] : knobs) *value = p.number(key, *value);
  p.finish();
  // Wind cells would make the stars' rows unknown until a pass over all of them
  // (synthetic_source.h): the in-memory galaxy has none.
  s.wind_fraction = 0.0;
  s.cosmology = cosmology;
  s.validate(p.key_path(""));
  return s;
}

}  // namespace

void apply_override(nlohmann::json& document, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set " + assignment + ": expected key.path=value");
  const std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    value = text;  // a bare word is a string
  }
  if (value.is_structured()) value = parse_json(text, "--set " + assignment);  // duplicate keys
  nlohmann::json* node = &document;
  std::size_t start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    const std::string part = key.substr(start, dot - start);
    if (part.empty()) throw ConfigError("--set " + assignment + ": empty key in the path");
    // The telescope's preset name takes overrides of the preset's fields (parse_telescope_entry).
    if (node->is_string() && key.compare(0, start, "telescope.") == 0) *node = {{"preset", *node}};
    if (!node->is_object())
      throw ConfigError("--set " + assignment + ": " + key.substr(0, start - 1) +
                        " is not an object");
    if (dot == std::string::npos) {
      (*node)[part] = value;
      return;
    }
    node = &(*node)[part];
    if (node->is_null()) *node = nlohmann::json::object();
    start = dot + 1;
  }
}

bool RunConfig::input_is_rubix() const {
  return !input_file.empty() &&
         (input_format == "rubix" || (input_format == "auto" && is_rubix_galaxy(input_file)));
}

RunConfig parse_run_config(const nlohmann::json& document, const std::string& config_path,
                           std::shared_ptr<const HostGalaxy> host_galaxy) {
  RunConfig c;
  c.config_path = config_path;
  c.document = document;
  c.galaxy = std::move(host_galaxy);
  JsonParams root(document, "");

  // input.synthetic is read after galaxy and cosmology, whose values it takes as defaults; the
  // keys that only mean something for a file are unknown keys beside it.
  JsonParams input = c.galaxy ? root.object_or_empty("input") : root.object("input");
  const bool has_file = !c.galaxy && input.has("file");
  const bool has_synthetic = !c.galaxy && input.has("synthetic");
  if (!c.galaxy && has_file == has_synthetic)
    throw ConfigError(
        "input: expected exactly one of \"file\" (a TNG or RUBIX file) and \"synthetic\" (a "
        "galaxy made in memory), got " +
        std::string(has_file ? "both" : "neither"));
  if (has_file) {
    c.input_file = resolve_path(input.string("file"), config_path);
    c.input_format =
        input.choice("format", {"auto", "tng", "swift", "eagle", "gadget", "rubix"}, "auto");
    if (input.has("region")) {
      JsonParams region = input.object("region");
      const nlohmann::json& centre = region.raw("centre");
      if (!centre.is_array() || centre.size() != 3 ||
          !std::all_of(centre.begin(), centre.end(), [](const auto& v) { return v.is_number(); }))
        throw ConfigError(
            "input.region.centre: expected 3 numbers (comoving, in the file's "
            "Coordinates units)");
      c.region_centre = std::array<double, 3>{centre[0].get<double>(), centre[1].get<double>(),
                                              centre[2].get<double>()};
      c.region_radius = region.number("radius");
      region.require(c.region_radius > 0, "radius", "a number > 0", c.region_radius);
    }
    if (input.has("particle_ids")) {
      const nlohmann::json& ids = input.raw("particle_ids");
      if (!ids.is_array() || ids.empty() ||
          !std::all_of(ids.begin(), ids.end(), [](const auto& v) { return v.is_number_integer(); }))
        throw ConfigError("input.particle_ids: expected a non-empty list of integers");
      for (const auto& v : ids) c.particle_ids.push_back(v.get<long long>());
    }
    if (input.has("subfind_group")) {
      const nlohmann::json& g = input.raw("subfind_group");
      if (!g.is_array() || g.size() != 2 || !g[0].is_number_integer() || !g[1].is_number_integer())
        throw ConfigError("input.subfind_group: expected [GroupNumber, SubGroupNumber]");
      c.subfind_group = std::array<long long, 2>{g[0].get<long long>(), g[1].get<long long>()};
    }
    if (input.has("subhalo")) c.subhalo_id = input.integer("subhalo");
    if (input.has("snapshot")) c.snapshot = static_cast<int>(input.integer("snapshot"));
    c.drop_nonfinite = input.boolean("drop_nonfinite", false);
  }
  c.read_gas = input.boolean("read_gas", true);
  if (!c.galaxy && input.has("stream_block_stars"))
    c.stream_block_stars = whole_number(input, "stream_block_stars", 1, std::nullopt);

  if (root.has("cosmology") && !root.raw("cosmology").is_object()) {
    c.cosmology_source = root.choice("cosmology", {"planck2015", "snapshot"});
  } else if (root.has("cosmology")) {
    JsonParams cosmo = root.object("cosmology");
    c.cosmology_source = "custom";
    c.cosmology.name = "custom";
    c.cosmology.hubble_param = cosmo.number("hubble_param");
    c.cosmology.omega_matter = cosmo.number("omega_matter");
    cosmo.require(c.cosmology.hubble_param > 0, "hubble_param", "a number > 0",
                  c.cosmology.hubble_param);
    cosmo.require(c.cosmology.omega_matter > 0 && c.cosmology.omega_matter <= 1, "omega_matter",
                  "a number in (0, 1]", c.cosmology.omega_matter);
    c.cosmology.omega_lambda = 1.0 - c.cosmology.omega_matter;  // flat
    cosmo.finish();
  }

  JsonParams galaxy = root.object("galaxy");
  if (galaxy.has("luminosity_distance_mpc") && !galaxy.has("redshift")) {
    // A distance instead of a redshift: the redshift whose luminosity distance it is in the
    // run's cosmology (D_L grows monotonically with z: bisection).
    const double d_l = galaxy.number("luminosity_distance_mpc");
    galaxy.require(d_l > 0 && d_l < c.cosmology.luminosity_distance_mpc(20.0),
                   "luminosity_distance_mpc", "a distance in Mpc > 0 (below that of z = 20)", d_l);
    double lo = 0.0, hi = 20.0;
    for (int i = 0; i < 100 && hi - lo > 1e-12; ++i)
      (c.cosmology.luminosity_distance_mpc(0.5 * (lo + hi)) < d_l ? lo : hi) = 0.5 * (lo + hi);
    c.redshift = 0.5 * (lo + hi);
  } else if (c.galaxy && !galaxy.has("redshift")) {
    c.redshift = c.galaxy->galaxy.redshift;
    galaxy.require(c.redshift > 0, "redshift",
                   "an observed redshift > 0 (the galaxy given has redshift 0; give "
                   "galaxy.redshift or galaxy.luminosity_distance_mpc)",
                   c.redshift);
  } else {
    c.redshift = galaxy.number("redshift");
    galaxy.require(c.redshift > 0 && c.redshift < 20, "redshift",
                   "an observed redshift in (0, 20) (the cube needs a distance; or give "
                   "luminosity_distance_mpc)",
                   c.redshift);
  }
  if (galaxy.has("orientation")) c.orientation = galaxy.raw("orientation");
  c.ra_deg = galaxy.number("ra_deg", 0.0);
  c.dec_deg = galaxy.number("dec_deg", 0.0);
  galaxy.require(c.ra_deg >= 0 && c.ra_deg < 360, "ra_deg", "a number in [0, 360)", c.ra_deg);
  galaxy.require(c.dec_deg >= -90 && c.dec_deg <= 90, "dec_deg", "a number in [-90, 90]",
                 c.dec_deg);
  // The Milky Way's foreground colour excess, applied by the foreground_dust stage (which
  // inherits it as its ebv_mag; a run with ebv_mw > 0 and no such stage is refused by the
  // runner). ra_deg/dec_deg are not used to look it up: that needs a dust map (SFD98 / SF11,
  // Planck) that ifusim does not have. Beyond 10 mag the field is opaque and the value a typo.
  if (galaxy.has("ebv_mw")) {
    c.ebv_mw_mag = galaxy.number("ebv_mw");
    galaxy.require(*c.ebv_mw_mag >= 0.0 && *c.ebv_mw_mag <= 10.0, "ebv_mw",
                   "the Milky Way's colour excess E(B-V) towards the galaxy, from 0 to 10 mag "
                   "(read it from a dust map, e.g. Schlafly & Finkbeiner 2011 at ra_deg, dec_deg: "
                   "ifusim has no dust map to look it up in)",
                   *c.ebv_mw_mag);
  }
  galaxy.finish();

  if (has_synthetic)
    c.synthetic = parse_synthetic(input.object("synthetic"), c.redshift, c.cosmology);
  if (!c.galaxy) input.finish();

  const nlohmann::json& telescope = root.raw("telescope");
  if (telescope.is_array()) {
    // Arms: each a telescope entry; their names name their files (cube_<name>.fits), so they
    // must be distinct and safe in a file name.
    if (telescope.size() < 2)
      throw ConfigError(
          "telescope: a list names the arms of one spectrograph: expected at least "
          "two entries, got " +
          std::to_string(telescope.size()));
    for (std::size_t i = 0; i < telescope.size(); ++i) {
      const std::string path = "telescope[" + std::to_string(i) + "]";
      Telescope arm = parse_telescope_entry(telescope[i], path);
      const bool safe = !arm.name.empty() && arm.name.find_first_not_of(
                                                 "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
                                                 "vwxyz0123456789._-") == std::string::npos;
      if (!safe)
        throw ConfigError(path +
                          ".name: an arm's name names its files: expected letters, digits, "
                          "'.', '_' or '-', got \"" +
                          arm.name + "\"");
      for (const Telescope& other : c.arms)
        if (other.name == arm.name)
          throw ConfigError(path + ".name: \"" + arm.name + "\" is already an arm's name");
      c.arms.push_back(std::move(arm));
    }
    c.telescope = c.arms.front();
  } else {
    c.telescope = parse_telescope_entry(telescope, "telescope");
  }

  JsonParams ssp = root.object("ssp");
  c.ssp_library = resolve_path(ssp.string("library"), config_path);
  c.ssp_format = ssp.choice("format", {"auto", "miles", "pypipe3d", "hdf5"}, "auto");
  c.ssp_params = nlohmann::json::object();
  if (ssp.has("interpolation")) c.ssp_params["interpolation"] = ssp.raw("interpolation");
  if (ssp.has("outside_grid")) c.ssp_params["outside_grid"] = ssp.raw("outside_grid");
  ssp.finish();

  std::vector<std::string> names;
  if (!root.has("pipeline") || root.raw("pipeline").is_string())
    names = pipeline_preset(root.string("pipeline", "calc_ifu"), "pipeline");
  else if (root.raw("pipeline").is_array())
    for (const auto& s : root.raw("pipeline")) {
      if (!s.is_string()) throw ConfigError("pipeline: expected stage names, got " + s.dump());
      names.push_back(s.get<std::string>());
    }
  else
    throw ConfigError("pipeline: expected a pipeline name or a list of stage names");
  const nlohmann::json stage_params =
      root.has("stages") ? root.raw("stages") : nlohmann::json::object();
  if (!stage_params.is_object())
    throw ConfigError("stages: expected an object of per-stage parameters");
  for (auto it = stage_params.begin(); it != stage_params.end(); ++it)
    if (std::find(names.begin(), names.end(), it.key()) == names.end())
      throw ConfigError("stages." + it.key() + ": the pipeline has no such stage");
  for (const auto& n : names) {
    nlohmann::json params =
        stage_params.contains(n) ? stage_params.at(n) : nlohmann::json::object();
    // Checked here, before the runner adds the keys a stage inherits (psf's telescope PSF) to it.
    if (!params.is_object())
      throw ConfigError("stages." + n + ": expected a JSON object of the stage's parameters, got " +
                        params.dump());
    resolve_file_params(params, c.config_path);
    c.stages.push_back({n, std::move(params)});
  }

  if (root.has("devices")) {
    JsonParams dev = root.object("devices");
    c.backend = backend_from_string(dev.choice("backend", {"cpu", "cuda"}, "cpu"));
    c.n_devices = static_cast<int>(dev.integer("count", 1));
    dev.require(c.n_devices >= 0 && c.n_devices <= 4096, "count",
                "a device count from 0 (cuda: one per GPU) to 4096", c.n_devices);
    c.oversubscribe_host = dev.boolean("oversubscribe", false);
    if (dev.has("memory_limit_gb")) {
      c.memory_limit_gb = dev.number("memory_limit_gb");
      dev.require(*c.memory_limit_gb > 0, "memory_limit_gb", "a number > 0 (GB)",
                  *c.memory_limit_gb);
    }
    dev.finish();
  }

  JsonParams out = root.object_or_empty("output");
  c.output_dir = resolve_path(out.string("dir", "out"), config_path);
  c.write_fits = out.boolean("fits", true);
  // FITS by default, the astronomers' format (and the one mpdaf/astropy read); the HDF5 copy of
  // the same cube on request: at MUSE-WFM size each is 1.3 GB and a minute of writing here.
  c.write_hdf5 = out.boolean("hdf5", false);
  c.write_png = out.boolean("png", true);
  out.finish();

  const long long seed = root.integer("seed", 0);
  root.require(seed >= 0, "seed", "an integer >= 0", seed);
  c.seed = static_cast<std::uint64_t>(seed);
  root.finish();
  return c;
}

nlohmann::json load_config_document(const std::string& path,
                                    const std::vector<std::string>& overrides) {
  nlohmann::json document = read_json_file(path, "a JSON run config file");
  for (const auto& o : overrides) apply_override(document, o);
  return document;
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides,
                          std::shared_ptr<const HostGalaxy> galaxy) {
  const nlohmann::json document = load_config_document(path, overrides);
  try {
    return parse_run_config(document, path, std::move(galaxy));
  } catch (const ConfigError& e) {
    throw ConfigError(path + ": " + e.what());
  }
}

}  // namespace ifusim
