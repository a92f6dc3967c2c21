#pragma once
// The walking skeleton's accumulation: a mass-weighted image (a cube with one wavelength plane)
// built per device in 64-bit fixed point over the stars' footprints (their own spaxels, or their
// smoothing kernels' spaxels), psum'd later.
#include <cstdint>
#include <memory>

#include "core/json_params.h"
#include "data/buffer.h"
#include "data/dispatch.h"
#include "stages/common/footprint.h"
#include "stages/stage.h"

namespace ifusim {

struct MassImageParams {
  bool initial_mass = false;  // weight by initial rather than current mass
  static MassImageParams from_json(JsonParams params);
};

StageEntry mass_image_stage();
std::unique_ptr<Stage> make_mass_image_stage(const nlohmann::json& params, const std::string& path);

}  // namespace ifusim

IFUSIM_DECLARE_BACKENDS(void accumulate_mass_image(const Device& device,
                                                   Span<const float> mass_msun,
                                                   const ifusim::FootprintView& footprint,
                                                   double counts_per_unit,
                                                   Span<std::int64_t> image_sums);)
