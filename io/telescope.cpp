#include "io/telescope.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/json_params.h"
#include "data/fibre_bundle.h"
#include "io/json_file.h"

namespace ifusim {

std::string telescope_preset_dir() {
  if (const char* dir = std::getenv("IFUSIM_CONFIG_DIR"); dir && *dir)
    return std::string(dir) + "/telescopes";
  return std::string(IFUSIM_CONFIG_DIR) + "/telescopes";
}

std::vector<std::string> telescope_preset_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(telescope_preset_dir(), ec))
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

Telescope parse_telescope(const nlohmann::json& object, const std::string& path) {
  JsonParams p(object, path);
  Telescope t;
  t.name = p.string("name");
  p.string("description", "");
  t.fov_arcsec = p.number("fov_arcsec");
  p.require(t.fov_arcsec > 0, "fov_arcsec", "a number > 0", t.fov_arcsec);
  t.spaxel_arcsec = p.number("spaxel_arcsec");
  p.require(t.spaxel_arcsec > 0 && t.spaxel_arcsec <= t.fov_arcsec, "spaxel_arcsec",
            "a number > 0 and no larger than fov_arcsec", t.spaxel_arcsec);
  const std::string shape = p.choice("aperture", {"square", "circular", "hexagonal"}, "square");
  t.aperture = shape == "circular"    ? ApertureShape::circular
               : shape == "hexagonal" ? ApertureShape::hexagonal
                                      : ApertureShape::square;
  JsonParams w = p.object("wavelength");
  t.wave_start_angstrom = w.number("start_angstrom");
  t.wave_end_angstrom = w.number("end_angstrom");
  w.require(t.wave_start_angstrom > 0, "start_angstrom", "a wavelength > 0", t.wave_start_angstrom);
  w.require(t.wave_end_angstrom > t.wave_start_angstrom, "end_angstrom",
            "a wavelength above start_angstrom", t.wave_end_angstrom);
  // Linear (step_angstrom) or logarithmic (log10_step, as MaNGA's LOGCUBE) sampling: one of
  // the two.
  if (w.has("log10_step")) {
    if (w.has("step_angstrom"))
      throw ConfigError(w.key_path("step_angstrom") +
                        ": give step_angstrom (linear sampling) or log10_step (logarithmic), "
                        "not both");
    t.wave_log10_step = w.number("log10_step");
    w.require(t.wave_log10_step > 0 &&
                  t.wave_log10_step < std::log10(t.wave_end_angstrom / t.wave_start_angstrom),
              "log10_step", "a step in log10(lambda) > 0 and smaller than the range",
              t.wave_log10_step);
  } else {
    t.wave_step_angstrom = w.number("step_angstrom");
    w.require(t.wave_step_angstrom > 0 &&
                  t.wave_step_angstrom < t.wave_end_angstrom - t.wave_start_angstrom,
              "step_angstrom", "a step > 0 and smaller than the range", t.wave_step_angstrom);
  }
  t.wavelength_medium = w.choice("medium", {"air", "vacuum"}, "air");
  w.finish();
  t.fits_layout = p.choice("fits_layout", {"muse", "manga"}, "muse");
  t.lsf_fwhm_angstrom = parse_resolution_curve(p, "lsf_fwhm_angstrom", "fwhm_angstrom", true);
  if (p.has("psf_fwhm_arcsec"))
    t.psf_fwhm_arcsec = parse_resolution_curve(p, "psf_fwhm_arcsec", "fwhm_arcsec", true);
  // The exposure model's data (stages/noise/exposure.h checks them again where it uses them).
  if (p.has("collecting_area_m2")) {
    t.collecting_area_m2 = p.number("collecting_area_m2");
    p.require(t.collecting_area_m2 > 0, "collecting_area_m2", "an area > 0 (m^2)",
              t.collecting_area_m2);
  }
  if (p.has("throughput")) {
    t.throughput = parse_fraction_curve(p, "throughput", "throughput");
  }
  t.site = p.string("site", "");
  if (p.has("fibres")) t.fibres = parse_fibre_bundle(p.object("fibres"));
  p.finish();
  if (t.fov_arcsec / t.spaxel_arcsec > kMaxSpaxelsSide)
    throw ConfigError(path + ": fov_arcsec / spaxel_arcsec = " +
                      std::to_string(t.fov_arcsec / t.spaxel_arcsec) + " spaxels a side; at most " +
                      std::to_string(kMaxSpaxelsSide) + " (spaxel indices must fit in int32)");
  if (static_cast<double>(t.n_spaxels_side()) * t.n_spaxels_side() * t.n_wave() > 4e9)
    throw ConfigError(path + ": the cube would have more than 4e9 voxels");
  return t;
}

nlohmann::json to_json(const Telescope& t) {
  nlohmann::json wavelength = {{"start_angstrom", t.wave_start_angstrom},
                               {"end_angstrom", t.wave_end_angstrom},
                               {"medium", t.wavelength_medium}};
  if (t.wave_log10_step > 0)
    wavelength["log10_step"] = t.wave_log10_step;
  else
    wavelength["step_angstrom"] = t.wave_step_angstrom;
  const char* aperture = t.aperture == ApertureShape::circular    ? "circular"
                         : t.aperture == ApertureShape::hexagonal ? "hexagonal"
                                                                  : "square";
  nlohmann::json out = {{"name", t.name},
                        {"fov_arcsec", t.fov_arcsec},
                        {"spaxel_arcsec", t.spaxel_arcsec},
                        {"aperture", aperture},
                        {"wavelength", wavelength},
                        {"fits_layout", t.fits_layout},
                        {"lsf_fwhm_angstrom", to_json(t.lsf_fwhm_angstrom, "fwhm_angstrom")}};
  if (t.psf_fwhm_arcsec.max() > 0)
    out["psf_fwhm_arcsec"] = to_json(t.psf_fwhm_arcsec, "fwhm_arcsec");
  if (t.collecting_area_m2 > 0) out["collecting_area_m2"] = t.collecting_area_m2;
  if (t.has_throughput()) out["throughput"] = to_json(t.throughput, "throughput");
  if (!t.site.empty()) out["site"] = t.site;
  if (t.fibres) out["fibres"] = to_json(*t.fibres);
  return out;
}

namespace {

// The preset file's JSON object, and the file's path.
std::pair<nlohmann::json, std::string> read_telescope_preset(const std::string& name,
                                                             const std::string& path) {
  const std::string file = telescope_preset_dir() + "/" + name + ".json";
  // A name is a preset's file stem, never a path: "../pipelines/calc_ifu" would open a pipeline.
  const bool plain = !name.empty() && name.find_first_of("/\\") == std::string::npos &&
                     name != "." && name != "..";
  std::error_code error;
  if (!plain || !std::filesystem::is_regular_file(file, error)) {
    std::string known;
    for (const auto& n : telescope_preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw ConfigError(path + ": unknown telescope \"" + name + "\" (presets in " +
                      telescope_preset_dir() + ": " + known + ")");
  }
  return {read_json_file(file, "a JSON telescope preset"), file};
}

}  // namespace

Telescope load_telescope_preset(const std::string& name, const std::string& path) {
  const auto [object, file] = read_telescope_preset(name, path);
  return parse_telescope(object, file);
}

Telescope parse_telescope_entry(const nlohmann::json& entry, const std::string& path) {
  if (entry.is_string()) return load_telescope_preset(entry.get<std::string>(), path);
  if (!entry.is_object())
    throw ConfigError(path + ": expected a preset name or a telescope object, got " + entry.dump());
  if (!entry.contains("preset")) return parse_telescope(entry, path);
  const nlohmann::json& preset = entry.at("preset");
  if (!preset.is_string())
    throw ConfigError(path + ".preset: expected a telescope preset's name, got " + preset.dump());
  // The preset's fields, each one given beside "preset" replacing it whole (a table too).
  nlohmann::json merged = read_telescope_preset(preset.get<std::string>(), path + ".preset").first;
  if (!merged.is_object())
    throw ConfigError(path + ".preset: the preset file holds no JSON object");
  for (const auto& [key, value] : entry.items())
    if (key != "preset") merged[key] = value;
  return parse_telescope(merged, path);
}

}  // namespace ifusim
