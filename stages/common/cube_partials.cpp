#include "stages/common/cube_partials.h"

#include <cmath>
#include <stdexcept>

#include "data/host_memory.h"

namespace ifusim {

namespace {

void check_partial_size(std::size_t n, const CubeShape& shape) {
  if (n != shape.n_voxels())
    throw std::logic_error("psum: a partial cube of " + std::to_string(n) +
                           " values for a cube of " + std::to_string(shape.n_voxels()));
}

}  // namespace

Cube& cube_for(RunState& state, const CubeShape& shape, const std::string& unit) {
  if (!state.cube) {
    state.cube.emplace();
    state.cube->shape = shape;
    state.cube->unit = unit;
    state.cube->data = large_vector<float>(shape.n_voxels());
    return *state.cube;
  }
  Cube& cube = *state.cube;
  if (!(cube.shape == shape) || cube.unit != unit || cube.data.size() != shape.n_voxels())
    throw std::logic_error("psum: partial cubes of different shapes or units (" + cube.unit + ", " +
                           unit + ")");
  return cube;
}

namespace {

// cube += add, element by element, so on all threads with the same sums (3.3e8 voxels on
// MUSE-WFM); each sum made in double and rounded once to the cube's float.
template <typename T>
void add_into(Cube& cube, const std::vector<T>& add) {
  const long long n = static_cast<long long>(add.size());
  float* sum = cube.data.data();
  const T* values = add.data();
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < n; ++i)
    sum[i] = static_cast<float>(static_cast<double>(sum[i]) + static_cast<double>(values[i]));
}

}  // namespace

void add_to_cube(RunState& state, const CubeShape& shape, const std::string& unit,
                 std::vector<float> data) {
  check_partial_size(data.size(), shape);
  if (!state.cube) {
    state.cube.emplace();
    state.cube->shape = shape;
    state.cube->unit = unit;
    state.cube->data = std::move(data);
    return;
  }
  add_into(cube_for(state, shape, unit), data);
}

void add_to_cube(RunState& state, const CubeShape& shape, const std::string& unit,
                 const std::vector<double>& data) {
  check_partial_size(data.size(), shape);
  add_into(cube_for(state, shape, unit), data);
}

std::unique_ptr<PartialArray> cube_partial(ShardedArray<std::int64_t> sums, FixedPointScale scale,
                                           CubeShape shape, std::string unit) {
  return std::make_unique<PartialArray>(std::move(sums), scale,
                                        [shape, unit](RunState& s, std::vector<double> total) {
                                          add_to_cube(s, shape, unit, total);
                                        });
}

void velocity_moment_maps(const std::vector<double>& moments, const std::string& key,
                          const std::string& weighted, const std::string& tracer,
                          std::map<std::string, SkyMap>& maps) {
  const std::size_t n = moments.size() / 3;
  SkyMap& mean = maps["velocity_" + key + "_kms"];
  SkyMap& dispersion = maps["dispersion_" + key + "_kms"];
  mean = {"km/s", weighted + " mean line-of-sight velocity of " + tracer, {}};
  dispersion = {"km/s", weighted + " line-of-sight velocity dispersion of " + tracer, {}};
  std::vector<double>& mean_kms = mean.values;
  std::vector<double>& dispersion_kms = dispersion.values;
  mean_kms.assign(n, std::nan(""));
  dispersion_kms.assign(n, std::nan(""));
  for (std::size_t s = 0; s < n; ++s) {
    const double w = moments[3 * s], wv = moments[3 * s + 1], wvv = moments[3 * s + 2];
    if (!(w > 0)) continue;
    mean_kms[s] = wv / w;
    dispersion_kms[s] = std::sqrt(std::max(0.0, wvv / w - mean_kms[s] * mean_kms[s]));
  }
}

}  // namespace ifusim
