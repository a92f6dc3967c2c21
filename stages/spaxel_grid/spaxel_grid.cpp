#include "stages/spaxel_grid/spaxel_grid.h"

#include "stages/common/particle_fields.h"

namespace ifusim {

SpaxelGridParams SpaxelGridParams::from_json(JsonParams p) {
  SpaxelGridParams out;
  const long long n = p.integer("n_spaxels");
  p.require(n >= 1 && n <= kMaxSpaxelsSide, "n_spaxels",
            "an integer from 1 to " + std::to_string(kMaxSpaxelsSide) +
                " (n x n spaxel indices must fit in int32)",
            n);
  const double size = p.number("spaxel_size_kpc");
  p.require(size > 0, "spaxel_size_kpc", "a number > 0", size);
  out.smoothing = SmoothingParams::from_json(p);
  p.finish();
  out.grid = {static_cast<int>(n), size};
  out.grid.smoothing = static_cast<int>(out.smoothing.kind);
  return out;
}

namespace {

// What both spaxel stages share: they place the stars on a grid, and with kernel smoothing
// give them smoothing lengths. Both stream. Without the input's lengths (StellarHsml) each
// star's comes from its k nearest neighbours among all the stars: a pass over them first
// (KnnPass), which holds their positions.
class SpaxelStage : public Stage {
 public:
  explicit SpaxelStage(SmoothingParams smoothing) : smoothing_(smoothing), knn_(smoothing) {}
  std::vector<std::string> needs() const override { return {"stars.position_kpc"}; }
  std::vector<Provided> provides() const override {
    return {Provided::field(fields::stars_spaxel_index,
                            "the spaxel holding each star, -1 outside the grid"),
            {"spaxels", "", "the spaxel grid (kpc) the stars were placed on, and its smoothing"},
            Provided::field(fields::gas_spaxel_index,
                            "the gas cells (where the run reads gas) on the same grid"),
            Provided::field(fields::gas_smoothing_length_kpc,
                            "the gas cells' radii (smoothing \"kernel\")")};
  }

  Pass pass(const StreamedInput& input) const override { return knn_.pass(input); }
  void observe(RunState& block) override { knn_.observe(block); }
  void end_pass(RunState& state) override { knn_.end_pass(state.mesh); }
  std::vector<MemoryItem> memory_estimate(const PlanContext& c) const override {
    return knn_.memory_estimate(c, name());
  }
  // Reverse mode (docs/gradients.md, "The entry point"): the spaxel index is piecewise constant
  // in the position (its derivative 0 almost everywhere), and kernel smoothing's footprint
  // weights are held as constants (their gradient is not made): the stage adds nothing and maps
  // nothing back, and no gradient w.r.t. stars.position_kpc comes from it.
  bool particle_adjoint(RunState& /*state*/, const CubeCotangent& /*reduced*/,
                        ParticleGradients& /*gradients*/) override {
    return true;
  }

 protected:
  void place(RunState& state, const SpaxelGrid& grid, int n_wave) const {
    assign_stars_to_grid(state, grid, n_wave);
    prepare_star_smoothing(state, smoothing_, knn_);
    if (state.data.gas.count() > 0) place_gas(state, name());
  }
  SmoothingParams smoothing_;

 private:
  KnnPass knn_;
};

class SpaxelGridStage final : public SpaxelStage {
 public:
  explicit SpaxelGridStage(SpaxelGridParams params)
      : SpaxelStage(params.smoothing), grid_(params.grid) {}
  std::string name() const override { return "spaxel_grid"; }
  void run(RunState& state) override { place(state, grid_, 0); }

 private:
  SpaxelGrid grid_;
};

class ApertureStage final : public SpaxelStage {
 public:
  explicit ApertureStage(SmoothingParams smoothing) : SpaxelStage(smoothing) {}
  std::string name() const override { return "aperture"; }

  void run(RunState& state) override {
    const Telescope& t = state.observation.telescope;
    const double kpc_per_arcsec = state.observation.kpc_per_arcsec;
    if (!(kpc_per_arcsec > 0) || !(t.spaxel_arcsec > 0))
      throw std::logic_error("aperture: the observation has no angular scale or telescope");
    SpaxelGrid grid;
    grid.n_side = t.n_spaxels_side();
    grid.spaxel_size_kpc = t.spaxel_arcsec * kpc_per_arcsec;
    grid.aperture = static_cast<int>(t.aperture);
    grid.aperture_kpc = t.fov_arcsec * kpc_per_arcsec;
    grid.smoothing = static_cast<int>(smoothing_.kind);
    place(state, grid, t.n_wave());
  }
};

}  // namespace

void assign_stars_to_grid(RunState& state, SpaxelGrid grid, int n_wave) {
  // The margin the PSF and the LSF need around the field and the band (aperture_mask crops it).
  const CubeMargin margin = state.observation.margin;
  grid.n_side += 2 * margin.spaxels;
  if (n_wave > 0) n_wave += 2 * margin.wavelengths;
  Stars& stars = state.data.stars;
  auto& spaxel_index = stars.derived.set(
      fields::stars_spaxel_index,
      ShardedArray<std::int32_t>(state.mesh, stars.count(), 1, Sharding::sharded()));
  shard_map(state.mesh, [&](const Device& device) {
    IFUSIM_DISPATCH(device, assign_spaxels, device, grid, stars.position_kpc.local(device, 0),
                    stars.position_kpc.local(device, 1), spaxel_index.local(device));
  });
  state.spaxels = {grid.n_side, grid.n_side, n_wave};
  state.products.put("spaxels", grid);
}

std::unique_ptr<Stage> make_aperture_stage(const nlohmann::json& params, const std::string& path) {
  // The grid and the aperture come from the telescope; only the smoothing is the stage's own.
  JsonParams p(params, path);
  const SmoothingParams smoothing = SmoothingParams::from_json(p);
  p.finish();
  return std::make_unique<ApertureStage>(smoothing);
}

std::unique_ptr<Stage> make_spaxel_grid_stage(const nlohmann::json& params,
                                              const std::string& path) {
  return std::make_unique<SpaxelGridStage>(SpaxelGridParams::from_json(JsonParams(params, path)));
}

StageEntry spaxel_grid_stage() {
  return {.name = "spaxel_grid",
          .summary = "assign stars to a square grid of spaxels (kpc)",
          .kind = StageKind::particle,
          .make = &from_params<&make_spaxel_grid_stage>,
          .examples = {{{"n_spaxels", 30}, {"spaxel_size_kpc", 1.0}, {"smoothing", "kernel"}}}};
}

StageEntry aperture_stage() {
  return {.name = "aperture",
          .summary = "assign stars to the telescope's spaxels and aperture",
          .kind = StageKind::particle,
          .make = &from_params<&make_aperture_stage>,
          .examples = {{{"smoothing", "kernel"}}}};
}

}  // namespace ifusim
