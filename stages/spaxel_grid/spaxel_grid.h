#pragma once
// Assigns every star to a spaxel of a square grid centred on the galaxy, in the sky plane (x, y)
// with the line of sight along +z. Stars outside the grid get spaxel index -1.
#include <cstdint>
#include <memory>

#include "data/buffer.h"
#include "data/hd.h"
#include "io/json_params.h"
#include "stages/dispatch.h"
#include "stages/stage.h"

namespace ifusim {

// A square grid of n x n spaxels of side spaxel_size_kpc, centred on (0, 0). Trivially
// copyable: kernels receive it by value.
struct SpaxelGrid {
  int n_side = 1;
  double spaxel_size_kpc = 1.0;

  IFUSIM_HD double half_extent_kpc() const { return 0.5 * n_side * spaxel_size_kpc; }
  // iy * n_side + ix, or -1 outside the grid.
  IFUSIM_HD std::int32_t index_of(double x_kpc, double y_kpc) const {
    const double fx = (x_kpc + half_extent_kpc()) / spaxel_size_kpc;
    const double fy = (y_kpc + half_extent_kpc()) / spaxel_size_kpc;
    if (!(fx >= 0.0 && fy >= 0.0 && fx < n_side && fy < n_side)) return -1;
    return static_cast<std::int32_t>(fy) * n_side + static_cast<std::int32_t>(fx);
  }
};

struct SpaxelGridParams {
  SpaxelGrid grid;
  static SpaxelGridParams from_json(JsonParams params);
};

std::unique_ptr<Stage> make_spaxel_grid_stage(const nlohmann::json& params,
                                              const std::string& path);

}  // namespace ifusim

IFUSIM_DECLARE_BACKENDS(void assign_spaxels(const Device& device, SpaxelGrid grid,
                                            Span<const float> x_kpc, Span<const float> y_kpc,
                                            Span<std::int32_t> spaxel_index);)
