#include "stages/spaxel_grid/spaxel_grid.h"

namespace ifusim {

SpaxelGridParams SpaxelGridParams::from_json(JsonParams p) {
  SpaxelGridParams out;
  const long long n = p.integer("n_spaxels");
  p.require(n >= 1 && n <= 100000, "n_spaxels", "an integer from 1 to 100000", n);
  const double size = p.number("spaxel_size_kpc");
  p.require(size > 0, "spaxel_size_kpc", "a number > 0", size);
  p.finish();
  out.grid = {static_cast<int>(n), size};
  return out;
}

namespace {

class SpaxelGridStage final : public Stage {
 public:
  explicit SpaxelGridStage(SpaxelGridParams params) : params_(params) {}
  std::string name() const override { return "spaxel_grid"; }
  std::vector<std::string> needs() const override { return {"stars.position_kpc"}; }
  std::vector<std::string> provides() const override { return {"stars.spaxel_index", "spaxels"}; }

  void run(RunState& state) const override {
    Stars& stars = state.data.stars;
    stars.spaxel_index =
        ShardedArray<std::int32_t>(state.mesh, stars.count(), 1, Sharding::sharded());
    shard_map(state.mesh, [&](const Device& device) {
      IFUSIM_DISPATCH(device, assign_spaxels, device, params_.grid,
                      stars.position_kpc.local(device, 0), stars.position_kpc.local(device, 1),
                      stars.spaxel_index.local(device));
    });
    state.spaxels = {params_.grid.n_side, params_.grid.n_side, 0};
  }

 private:
  SpaxelGridParams params_;
};

}  // namespace

std::unique_ptr<Stage> make_spaxel_grid_stage(const nlohmann::json& params,
                                              const std::string& path) {
  return std::make_unique<SpaxelGridStage>(SpaxelGridParams::from_json(JsonParams(params, path)));
}

}  // namespace ifusim
