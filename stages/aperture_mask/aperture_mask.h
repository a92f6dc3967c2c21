#pragma once
// aperture_mask: the last step of the observation model before noise. Particles are deposited on
// the telescope's whole square grid plus a margin (Observation::margin: the PSF's and LSF's
// reach) and blurred there, so light from just outside the field, the band and a circular or
// hexagonal aperture comes in as on the sky; then every spaxel whose centre lies outside the
// aperture becomes NaN, in the cube and in its maps, as in a real MUSE, MaNGA or SAMI cube (no
// measurement there), and the margin is cropped. The noise stage leaves NaN voxels NaN (variance
// too). A square aperture masks nothing.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "stages/common/spaxel_grid.h"
#include "stages/stage.h"

namespace ifusim {

// NaN in every voxel of `cube` and value of `maps` at the spaxels of `grid` outside its aperture.
void apply_aperture_mask(const SpaxelGrid& grid, Cube& cube, std::map<std::string, SkyMap>& maps);

// Cuts `margin` off every side of the cube (spaxels) and both ends of its band (wavelengths),
// and off every map of the cube's field.
void crop_margin(const CubeMargin& margin, Cube& cube, std::map<std::string, SkyMap>& maps);

StageEntry aperture_mask_stage();
std::unique_ptr<Stage> make_aperture_mask_stage(const nlohmann::json& params,
                                                const std::string& path);

}  // namespace ifusim
