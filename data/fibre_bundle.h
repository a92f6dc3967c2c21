#pragma once
// A fibre bundle (data/telescope.h, FibreBundle) in JSON, the way telescope presets write it
// (`telescope.fibres`, docs/config.md), and its geometry.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/json_params.h"
#include "data/telescope.h"

namespace ifusim {

// The bundle described by `p` (the `fibres` object): n_fibres, core_diameter_arcsec,
// pitch_arcsec, and optionally dither_x_arcsec / dither_y_arcsec (as many of each). Errors name
// the key's path ("telescope.fibres.pitch_arcsec: expected ...").
FibreBundle parse_fibre_bundle(JsonParams p);
nlohmann::json to_json(const FibreBundle& bundle);

// The fibres' centres (arcsec, relative to the bundle's centre, before any dither): the central
// fibre and its rings on a hexagonal lattice of the bundle's pitch, rows along x.
struct FibrePositions {
  std::vector<double> x_arcsec, y_arcsec;
};
FibrePositions fibre_positions(const FibreBundle& bundle);

// The fraction of the sky a hexagonal lattice of these fibres covers: the core's area over the
// lattice cell's, pi d^2 / (2 sqrt(3) p^2).
double fibre_filling_factor(const FibreBundle& bundle);

}  // namespace ifusim
