#include "pipeline/registry.h"

#include <algorithm>

#include "io/json_params.h"
#include "pipeline/collectives/psum.h"
#include "stages/dust/dust.h"
#include "stages/flux/flux.h"
#include "stages/lsf/lsf.h"
#include "stages/mass_image/mass_image.h"
#include "stages/noise/noise.h"
#include "stages/psf/psf.h"
#include "stages/spaxel_grid/spaxel_grid.h"

namespace ifusim {
namespace {

// psum as a stage: the partial cube becomes the reduced cube.
class PsumStage final : public Stage {
 public:
  explicit PsumStage(std::string unit) : unit_(std::move(unit)) {}
  std::string name() const override { return "psum"; }
  std::vector<std::string> needs() const override { return {"partial_cube"}; }
  std::vector<std::string> provides() const override { return {"cube"}; }
  void run(RunState& state) const override {
    state.cube = reduce_to_cube(state.mesh, *state.partial, unit_);
    state.partial.reset();
  }

 private:
  std::string unit_;
};

std::unique_ptr<Stage> make_psum_stage(const nlohmann::json& params, const std::string& path) {
  JsonParams p(params, path);
  std::string unit = p.string("unit", "Msun");
  p.finish();
  return std::make_unique<PsumStage>(std::move(unit));
}

constexpr StageEntry kStages[] = {
    {"spaxel_grid", "assign stars to a square grid of spaxels", &make_spaxel_grid_stage},
    {"dust", "A_V per star from the gas in front of it (CCM89 or Calzetti 2000 curve)", &make_dust_stage},
    {"mass_image", "accumulate a mass-weighted image per device", &make_mass_image_stage},
    {"psum", "sum the per-device partial cubes (exact, reproducible)", &make_psum_stage},
    {"flux", "luminosity density to observed flux density, L / (4 pi D_L^2)", &make_flux_stage},
    {"psf", "convolve every wavelength plane with a Gaussian or Moffat PSF", &make_psf_stage},
    {"lsf", "convolve every spectrum with the instrument's Gaussian LSF", &make_lsf_stage},
    {"noise", "add seeded Gaussian noise for a target S/N, fill the variance", &make_noise_stage},
};

}  // namespace

std::span<const StageEntry> stage_registry() { return kStages; }

std::vector<std::unique_ptr<Stage>> make_stages(const nlohmann::json& stages,
                                                const std::string& path,
                                                std::vector<std::string> available) {
  if (!stages.is_array() || stages.empty())
    throw ConfigError(path + ": expected a non-empty array of {\"stage\": NAME, \"params\": {...}}");
  std::vector<std::unique_ptr<Stage>> out;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    JsonParams entry(stages[i], at);
    std::vector<std::string> names;
    for (const auto& s : stage_registry()) names.push_back(s.name);
    const std::string name = entry.choice("stage", names);
    const nlohmann::json params = entry.has("params") ? entry.raw("params") : nlohmann::json::object();
    entry.finish();
    const auto& known = *std::find_if(stage_registry().begin(), stage_registry().end(),
                                      [&](const StageEntry& s) { return name == s.name; });
    auto stage = known.make(params, at + ".params");
    for (const auto& need : stage->needs())
      if (std::find(available.begin(), available.end(), need) == available.end())
        throw ConfigError(at + ": stage \"" + name + "\" needs " + need +
                          ", which neither the input nor an earlier stage provides");
    for (const auto& p : stage->provides()) available.push_back(p);
    out.push_back(std::move(stage));
  }
  return out;
}

}  // namespace ifusim
