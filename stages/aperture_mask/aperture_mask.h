#pragma once
// aperture_mask: the last step of the observation model before noise. Particles are deposited on
// the telescope's whole square grid and blurred by the PSF there, so light from just outside a
// circular or hexagonal aperture scatters into it as on the sky; then every spaxel whose centre
// lies outside the aperture becomes NaN, in the cube and in its maps, as in a real MUSE, MaNGA or
// SAMI cube (no measurement there). The noise stage leaves NaN voxels NaN (variance too). A square
// aperture masks nothing.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "stages/stage.h"

namespace ifusim {

// NaN in every voxel of `cube` and value of `maps` at the spaxels of `grid` outside its aperture.
void apply_aperture_mask(const SpaxelGrid& grid, Cube& cube, std::map<std::string, SkyMap>& maps);

std::unique_ptr<Stage> make_aperture_mask_stage(const nlohmann::json& params,
                                                const std::string& path);

}  // namespace ifusim
