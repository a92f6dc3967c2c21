#pragma once
// Assigns every star to a spaxel of a square grid centred on the galaxy, in the sky plane (x, y)
// with the line of sight along +z. Stars outside the grid get spaxel index -1. Both spaxel stages
// also choose how a star's light is spread over the spaxels ("smoothing": "none" or "kernel",
// footprint.h); the choice travels in the grid (RunState::spaxel_grid).
#include <cstdint>
#include <memory>

#include "core/json_params.h"
#include "data/buffer.h"
#include "data/dispatch.h"
#include "data/hd.h"
#include "stages/common/spaxel_grid.h"
#include "stages/spaxel_grid/smoothing.h"
#include "stages/stage.h"

namespace ifusim {

struct SpaxelGridParams {
  SpaxelGrid grid;
  SmoothingParams smoothing;
  static SpaxelGridParams from_json(JsonParams params);
};

StageEntry spaxel_grid_stage();
StageEntry aperture_stage();
std::unique_ptr<Stage> make_spaxel_grid_stage(const nlohmann::json& params,
                                              const std::string& path);

// The telescope's spaxels on the galaxy: the grid from its field of view and spaxel size, in kpc
// through the angular scale at the galaxy's redshift (state.observation), and its aperture.
// Parameters: "smoothing" and "knn_neighbours" (SmoothingParams).
std::unique_ptr<Stage> make_aperture_stage(const nlohmann::json& params, const std::string& path);

// Assigns state.data.stars.spaxel_index for `grid` widened by the run's margin
// (Observation::margin, also added to `n_wave` when that is > 0) and sets state.spaxels and
// the product "spaxels" (the grid).
void assign_stars_to_grid(RunState& state, SpaxelGrid grid, int n_wave);

}  // namespace ifusim

IFUSIM_DECLARE_BACKENDS(void assign_spaxels(const Device& device, SpaxelGrid grid,
                                            Span<const float> x_kpc, Span<const float> y_kpc,
                                            Span<std::int32_t> spaxel_index);)
