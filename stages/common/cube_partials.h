#pragma once
// What the particle stages' partial results become once reduced: their share of the run's cube,
// and kinematic maps from velocity moments. Shared by every stage that deposits light.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "stages/stage.h"

namespace ifusim {

// The run's cube, made (zero, float) where there is none yet, into which a partial result of
// `shape` in `unit` is added (add_to_cube, or in place as the emission lines' total does); a
// cube of another shape or unit is a logic error.
Cube& cube_for(RunState& state, const CubeShape& shape, const std::string& unit);
// Adds `data` (of `shape`, in `unit`) into the run's cube: the cube itself where none is there
// yet. Several stages' totals (stars, emission lines) make one cube; a shape or unit that differs
// from the cube's is a logic error (cube_for). Each voxel's sum is made in double and rounded once
// to the cube's float.
void add_to_cube(RunState& state, const CubeShape& shape, const std::string& unit,
                 std::vector<float> data);
// The same from a double total (a fixed-point partial reduced on the host): the float cube is
// made here where there is none, so that no second copy of the total is held.
void add_to_cube(RunState& state, const CubeShape& shape, const std::string& unit,
                 const std::vector<double>& data);

// The partial result of a stage whose total is the run's cube (or its share), of `shape` in
// `unit`.
std::unique_ptr<PartialArray> cube_partial(ShardedArray<std::int64_t> sums, FixedPointScale scale,
                                           CubeShape shape, std::string unit);

// The weighted mean and dispersion of v per spaxel, from the sums (w, w v, w v^2) laid out as 3
// values per spaxel, as maps "velocity_<key>_kms" and "dispersion_<key>_kms" described as
// `weighted` ("light-weighted") values of `tracer` ("the stars"); NaN where w <= 0.
void velocity_moment_maps(const std::vector<double>& moments, const std::string& key,
                          const std::string& weighted, const std::string& tracer,
                          std::map<std::string, SkyMap>& maps);

}  // namespace ifusim
