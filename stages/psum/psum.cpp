#include "stages/psum/psum.h"

#include <cmath>

#include "core/json_params.h"
#include "data/collectives/psum.h"

namespace ifusim {

void PartialArray::reduce(RunState& state) {
  on_total_(state, reduce_to_host(state.mesh, sums_, scale_));
}

void reduce_partials(RunState& state) {
  // Each reduction may free its device memory before the next one allocates.
  auto partials = std::move(state.partials);
  state.partials.clear();
  for (auto& p : partials) {
    p->reduce(state);
    p.reset();
  }
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
  if (!(cube.shape == shape) || cube.unit != unit || cube.data.size() != data.size())
    throw std::logic_error("psum: partial cubes of different shapes or units (" + cube.unit + ", " +
                           unit + ")");
  for (std::size_t i = 0; i < data.size(); ++i) cube.data[i] += data[i];
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

namespace {

class PsumStage final : public Stage {
 public:
  std::string name() const override { return "psum"; }
  std::vector<std::string> needs() const override { return {"partial_cube"}; }
  std::vector<std::string> provides() const override { return {"cube"}; }
  void run(RunState& state) const override { reduce_partials(state); }
};

}  // namespace

std::unique_ptr<Stage> make_psum_stage(const nlohmann::json& params, const std::string& path) {
  JsonParams(params, path).finish();
  return std::make_unique<PsumStage>();
}

}  // namespace ifusim
