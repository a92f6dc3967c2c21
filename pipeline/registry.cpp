#include "pipeline/registry.h"

#include <algorithm>

#include "core/json_params.h"
#include "stages/aperture_mask/aperture_mask.h"
#include "stages/dust/dust.h"
#include "stages/emission_lines/emission_lines.h"
#include "stages/flux/flux.h"
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

std::unique_ptr<Stage> make_stellar_spectra(const nlohmann::json& params, const std::string& path,
                                            const StageResources& resources) {
  if (!resources.ssp) throw ConfigError(path + ": stellar_spectra needs an SSP template library");
  return make_stellar_spectra_stage(resources.ssp,
                                    StellarSpectraParams::from_json(JsonParams(params, path)));
}

// Every stage, in pipeline order.
constexpr StageEntry kStages[] = {
    {"spaxel_grid", "assign stars to a square grid of spaxels (kpc)", &make_spaxel_grid_stage,
     nullptr},
    {"orient", "face-on by the inertia tensor, then Euler angles", &make_orient_stage, nullptr},
    {"aperture", "assign stars to the telescope's spaxels and aperture", &make_aperture_stage,
     nullptr},
    {"dust", "A_V per star from the gas in front of it (CCM89 or Calzetti 2000 curve)",
     &make_dust_stage, nullptr},
    {"mass_image", "accumulate a mass-weighted image per device", &make_mass_image_stage, nullptr},
    {"stellar_spectra", "fused SSP interpolation, Doppler shift and resampling into the cube",
     nullptr, &make_stellar_spectra},
    {"emission_lines",
     "nebular lines of the star-forming gas (Kennicutt H-alpha, Case B, Curti 2020 metal lines)",
     nullptr, &make_emission_lines_stage},
    {"psum", "sum the per-device partial cubes (exact, reproducible)", &make_psum_stage, nullptr},
    {"flux", "luminosity density to observed flux density, L / (4 pi D_L^2)", &make_flux_stage,
     nullptr},
    {"psf", "convolve every wavelength plane with a Gaussian or Moffat PSF", &make_psf_stage,
     nullptr},
    {"lsf", "convolve every spectrum with the instrument's Gaussian LSF", &make_lsf_stage, nullptr},
    {"aperture_mask", "NaN in the spaxels outside a circular or hexagonal aperture",
     &make_aperture_mask_stage, nullptr},
    {"noise", "add seeded Gaussian noise for a target S/N, fill the variance", &make_noise_stage,
     nullptr},
};

}  // namespace

std::span<const StageEntry> stage_registry() {
  return kStages;
}

std::unique_ptr<Stage> make_stage(const std::string& name, const nlohmann::json& params,
                                  const std::string& path, const StageResources& resources) {
  const auto entry = std::find_if(stage_registry().begin(), stage_registry().end(),
                                  [&](const StageEntry& s) { return name == s.name; });
  if (entry == stage_registry().end()) {
    std::string known;
    for (const auto& s : stage_registry())
      known += (known.empty() ? "" : ", ") + std::string(s.name);
    throw ConfigError(path + ": unknown stage \"" + name + "\" (known: " + known + ")");
  }
  return entry->make ? entry->make(params, path)
                     : entry->make_with_resources(params, path, resources);
}

void check_stage_order(const std::vector<std::unique_ptr<Stage>>& stages,
                       const std::vector<std::string>& paths, std::vector<std::string> available) {
  for (std::size_t i = 0; i < stages.size(); ++i) {
    for (const auto& need : stages[i]->needs())
      if (std::find(available.begin(), available.end(), need) == available.end())
        throw ConfigError(paths[i] + ": stage \"" + stages[i]->name() + "\" needs " + need +
                          ", which neither the input nor an earlier stage provides");
    for (const auto& p : stages[i]->provides()) available.push_back(p);
  }
}

std::vector<std::unique_ptr<Stage>> make_stages(const nlohmann::json& stages,
                                                const std::string& path,
                                                std::vector<std::string> available,
                                                const StageResources& resources) {
  if (!stages.is_array() || stages.empty())
    throw ConfigError(path +
                      ": expected a non-empty array of {\"stage\": NAME, \"params\": {...}}");
  std::vector<std::unique_ptr<Stage>> out;
  std::vector<std::string> paths;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    JsonParams entry(stages[i], at);
    std::vector<std::string> names;
    for (const auto& s : stage_registry()) names.push_back(s.name);
    const std::string name = entry.choice("stage", names);
    const nlohmann::json params =
        entry.has("params") ? entry.raw("params") : nlohmann::json::object();
    entry.finish();
    out.push_back(make_stage(name, params, at + ".params", resources));
    paths.push_back(at);
  }
  check_stage_order(out, paths, std::move(available));
  return out;
}

}  // namespace ifusim
