#include "stages/mass_image/mass_image.h"

#include <algorithm>

#include "data/collectives/reductions.h"
#include "stages/common/cube_partials.h"
#include "stages/common/particle_fields.h"

namespace ifusim {

MassImageParams MassImageParams::from_json(JsonParams p) {
  MassImageParams out;
  out.initial_mass = p.choice("weight", {"mass", "initial_mass"}, "mass") == "initial_mass";
  p.finish();
  return out;
}

namespace {

class MassImageStage final : public Stage {
 public:
  explicit MassImageStage(MassImageParams params) : params_(params) {}
  std::string name() const override { return "mass_image"; }
  std::vector<std::string> needs() const override {
    return {fields::stars_spaxel_index.full_name(), "spaxels",
            params_.initial_mass ? "stars.initial_mass_msun" : "stars.mass_msun"};
  }
  std::vector<Provided> provides() const override {
    return {{"partial_cube", "Msun",
             std::string("the stars' ") + (params_.initial_mass ? "initial" : "current") +
                 " mass per spaxel (a one-plane cube)"}};
  }

  void run(RunState& state) override {
    const Mesh& mesh = state.mesh;
    const Stars& stars = state.data.stars;
    const ShardedArray<float>& weight =
        params_.initial_mass ? stars.initial_mass_msun : stars.mass_msun;
    // A streamed galaxy's first block declares the image; every block adds to it.
    PartialArray* image = image_.get(state);
    if (!image) {
      // The fixed-point scale must not depend on the split: bound every pixel's total by
      // N * max|weight| over the whole galaxy (a star's footprint weights sum to at most 1).
      const StarBounds& b = state.star_bounds();
      const double bound = static_cast<double>(b.count) *
                           (params_.initial_mass ? b.max_initial_mass_msun : b.max_mass_msun);
      const CubeShape shape{state.spaxels.nx, state.spaxels.ny, 1};
      image = &image_.declare(
          state,
          cube_partial(ShardedArray<std::int64_t>(mesh, shape.n_voxels(), 1, Sharding::partial()),
                       FixedPointScale::for_bound(bound, "mass_image: the mass per spaxel"), shape,
                       "Msun"));
    }
    const SpaxelGrid& grid = state.products.get<SpaxelGrid>("spaxels");
    shard_map(mesh, [&](const Device& device) {
      IFUSIM_DISPATCH(device, accumulate_mass_image, device,
                      Span<const float>(weight.local(device)), star_footprint(stars, grid, device),
                      image->scale().counts_per_unit, image->sums().local(device));
    });
  }

 private:
  MassImageParams params_;
  PartialHandle<PartialArray> image_;  // declared by the first block, reduced by the reduction
};

}  // namespace

std::unique_ptr<Stage> make_mass_image_stage(const nlohmann::json& params,
                                             const std::string& path) {
  return std::make_unique<MassImageStage>(MassImageParams::from_json(JsonParams(params, path)));
}

StageEntry mass_image_stage() {
  return {.name = "mass_image",
          .summary = "accumulate a mass-weighted image per device",
          .kind = StageKind::particle,
          .make = &from_params<&make_mass_image_stage>};
}

}  // namespace ifusim
