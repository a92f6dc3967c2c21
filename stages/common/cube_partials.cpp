#include "stages/common/cube_partials.h"

#include <cmath>
#include <stdexcept>

namespace ifusim {

void check_same_cube(const Cube& cube, const CubeShape& shape, const std::string& unit) {
  if (!(cube.shape == shape) || cube.unit != unit || cube.data.size() != shape.n_voxels())
    throw std::logic_error("psum: partial cubes of different shapes or units (" + cube.unit + ", " +
                           unit + ")");
}

void add_to_cube(RunState& state, const CubeShape& shape, const std::string& unit,
                 std::vector<double> data) {
  if (!state.cube) {
    state.cube = Cube{};
    state.cube->shape = shape;
    state.cube->unit = unit;
    state.cube->data = std::move(data);
    return;
  }
  Cube& cube = *state.cube;
  check_same_cube(cube, shape, unit);
  if (cube.data.size() != data.size())
    throw std::logic_error("psum: a partial cube of " + std::to_string(data.size()) +
                           " values for a cube of " + std::to_string(cube.data.size()));
  // Element by element, so on all threads with the same sums (3.3e8 voxels on MUSE-WFM).
  const long long n = static_cast<long long>(data.size());
  double* sum = cube.data.data();
  const double* add = data.data();
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < n; ++i) sum[i] += add[i];
}

std::unique_ptr<PartialArray> cube_partial(ShardedArray<std::int64_t> sums, FixedPointScale scale,
                                           CubeShape shape, std::string unit) {
  return std::make_unique<PartialArray>(std::move(sums), scale,
                                        [shape, unit](RunState& s, std::vector<double> total) {
                                          add_to_cube(s, shape, unit, std::move(total));
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
