#include "stages/foreground_dust/foreground_dust.h"

#include <cmath>
#include <stdexcept>

#include "core/config_error.h"
#include "stages/common/dust_curves.h"

namespace ifusim {

ForegroundDustParams ForegroundDustParams::from_json(JsonParams p) {
  ForegroundDustParams out;
  // Inherited from galaxy.ebv_mw (the run config's key, which a run's errors name) where the
  // stage's parameters do not give it.
  const char* expected =
      "a colour excess E(B-V) from 0 to 10 mag (the run config's galaxy.ebv_mw, read from a dust "
      "map at the galaxy's position: ifusim has no dust map to look it up in)";
  if (!p.has("ebv_mag")) {
    std::string message = p.key_path("ebv_mag") + ": expected ";
    message += expected;
    throw ConfigError(message + ", but the key is missing");
  }
  out.ebv_mag = p.number("ebv_mag");
  // The largest E(B-V) of the SFD map away from the Galactic plane is a few magnitudes; beyond
  // 10 the field is opaque and the value is a typo.
  p.require(out.ebv_mag >= 0.0 && out.ebv_mag <= 10.0, "ebv_mag", expected, out.ebv_mag);
  out.r_v = p.number("r_v", out.r_v);
  p.require(out.r_v >= 2.0 && out.r_v <= 6.0, "r_v",
            "R_V from 2 to 6 (the CCM89 curve's range of validity)", out.r_v);
  p.finish();
  return out;
}

double foreground_transmission(const ForegroundDustParams& params, double wavelength_angstrom) {
  const double a_v = params.ebv_mag * params.r_v;
  const DustCurve curve{DustCurveKind::ccm89, params.r_v};
  return std::pow(10.0, -0.4 * a_v * attenuation_ratio(curve, wavelength_angstrom));
}

namespace {

class ForegroundDustStage final : public Stage {
 public:
  explicit ForegroundDustStage(ForegroundDustParams params) : params_(params) {}
  std::string name() const override { return "foreground_dust"; }
  std::vector<std::string> needs() const override { return {"cube"}; }
  std::vector<Provided> provides() const override {
    return {{"cube_foreground_dust", "",
             "the cube dimmed by the Milky Way's dust at each observed wavelength"}};
  }

  void run(RunState& state) override {
    if (!state.cube) throw std::logic_error("foreground_dust: no cube (psum must run first)");
    Cube& cube = *state.cube;
    const Observation& obs = state.observation;
    // Plane k's wavelength, the margin (if not cropped yet) included.
    const auto n_wave = static_cast<std::size_t>(cube.shape.n_wave);
    std::vector<double> factor(n_wave);
    for (std::size_t k = 0; k < n_wave; ++k)
      factor[k] =
          foreground_transmission(params_, obs.simulated_grid().centre(static_cast<double>(k)));
    for (std::size_t i = 0; i < cube.data.size(); ++i) cube.data[i] *= factor[i % n_wave];
    for (std::size_t i = 0; i < cube.variance.size(); ++i)
      cube.variance[i] *= factor[i % n_wave] * factor[i % n_wave];
    factor_ = std::move(factor);
    shape_ = cube.shape;
  }

  // A factor per wavelength (a diagonal map): its own transpose (docs/gradients.md).
  bool adjoint(const RunState& state, CubeCotangent& cotangent) const override {
    return tangent(state, cotangent);
  }
  bool tangent(const RunState&, CubeCotangent& tangent) const override {
    check_cotangent_shape("foreground_dust", shape_, tangent);
    const std::size_t n_wave = factor_.size();
    std::vector<double>& values = tangent.values_to_change();
    for (std::size_t i = 0; i < values.size(); ++i) values[i] *= factor_[i % n_wave];
    return true;
  }

 private:
  ForegroundDustParams params_;
  // What run() applied, for the adjoint: the transmission of each plane.
  std::vector<double> factor_;
  CubeShape shape_;
};

std::unique_ptr<Stage> make_foreground_dust_stage(const nlohmann::json& params,
                                                  const std::string& path) {
  return std::make_unique<ForegroundDustStage>(
      ForegroundDustParams::from_json(JsonParams(params, path)));
}

}  // namespace

StageEntry foreground_dust_stage() {
  return {.name = "foreground_dust",
          .summary = "the Milky Way's foreground extinction, E(B-V) with the CCM89 curve",
          .kind = StageKind::cube,
          .make = &from_params<&make_foreground_dust_stage>,
          .inherits = {{"ebv_mag", "galaxy.ebv_mw", true, 0.0}},
          .examples = {{{"ebv_mag", 0.05}}}};
}

}  // namespace ifusim
