#pragma once
// The psum stage: reduces every partial result the earlier stages declared (RunState::partials)
// over the mesh, exactly (fixed point), and lets each make what it stands for: the cube, the
// kinematic maps, ... After it, the run holds one reduced cube.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "stages/stage.h"

namespace ifusim {

std::unique_ptr<Stage> make_psum_stage(const nlohmann::json& params, const std::string& path);

// What the stage does, for tests and benchmarks that run stages by hand.
void reduce_partials(RunState& state);

// The partial result of a stage whose total is the run's cube, of `shape` in `unit`.
std::unique_ptr<PartialArray> cube_partial(ShardedArray<std::int64_t> sums, FixedPointScale scale,
                                           CubeShape shape, std::string unit);

// The `weighting`-weighted ("mass" or "light") mean and dispersion of v per spaxel, from the
// sums (w, w v, w v^2) laid out as 3 values per spaxel, as maps "velocity_<weighting>_kms" and
// "dispersion_<weighting>_kms"; NaN where w <= 0.
void velocity_moment_maps(const std::vector<double>& moments, const std::string& weighting,
                          std::map<std::string, SkyMap>& maps);

}  // namespace ifusim
