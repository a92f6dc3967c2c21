#include "stages/flux/flux.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace ifusim {

FluxParams FluxParams::from_json(JsonParams p) {
  FluxParams out;
  out.unit_scale = p.number("unit_scale", out.unit_scale);
  p.require(power_of_ten(out.unit_scale).has_value(), "unit_scale",
            "a power of ten from 1e-99 to 1e99 (FITS units allow no other factor; e.g. 1e-20)",
            out.unit_scale);
  if (p.has("luminosity_distance_mpc")) {
    const double d = p.number("luminosity_distance_mpc");
    p.require(d > 0.0, "luminosity_distance_mpc", "a number > 0", d);
    out.luminosity_distance_mpc = d;
  }
  p.finish();
  return out;
}

double flux_per_solar_luminosity(double luminosity_distance_mpc) {
  const double d_cm = luminosity_distance_mpc * kCmPerMpc;
  return kSolarLuminosityErgPerS / (4.0 * std::numbers::pi * d_cm * d_cm);
}

std::optional<int> power_of_ten(double unit_scale) {
  if (!(unit_scale > 0.0) || !std::isfinite(unit_scale)) return std::nullopt;
  const double k = std::round(std::log10(unit_scale));
  if (std::abs(k) > 99 || std::abs(unit_scale / std::pow(10.0, k) - 1.0) > 1e-12)
    return std::nullopt;
  return static_cast<int>(k);
}

std::string flux_unit(int power_of_ten) {
  const std::string unit = "erg/(s*cm**2*Angstrom)";
  if (power_of_ten == 0) return unit;
  return "10**(" + std::to_string(power_of_ten) + ")*" + unit;
}

namespace {

class FluxStage final : public Stage {
 public:
  FluxStage(FluxParams params, std::string path) : params_(params), path_(std::move(path)) {}
  std::string name() const override { return "flux"; }
  std::vector<std::string> needs() const override { return {"cube"}; }
  std::vector<Provided> provides() const override {
    return {{"cube_flux", "erg/(s cm^2 Angstrom)",
             "the cube as observed flux density, L / (4 pi D_L^2)"}};
  }

  void run(RunState& state) override {
    if (!state.cube) throw std::logic_error("flux: no cube (psum must run first)");
    const double observed = state.observation.luminosity_distance_mpc;
    double d_l = observed;
    if (params_.luminosity_distance_mpc) {
      d_l = *params_.luminosity_distance_mpc;
      if (observed > 0.0 && std::abs(d_l - observed) > 1e-9 * observed)
        spdlog::warn("flux: {}.luminosity_distance_mpc = {} Mpc replaces the {} Mpc of redshift {}",
                     path_, d_l, observed, state.observation.redshift);
    }
    if (!(d_l > 0.0) || !std::isfinite(d_l))
      throw ConfigError("flux: the luminosity distance is " + std::to_string(d_l) +
                        " Mpc (redshift " + std::to_string(state.observation.redshift) +
                        "), so the flux would be infinite: observe the galaxy at a redshift > 0 "
                        "or give " +
                        path_ + ".luminosity_distance_mpc (a number > 0)");
    const double factor = flux_per_solar_luminosity(d_l) / params_.unit_scale;
    Cube& cube = *state.cube;
    factor_ = factor;
    shape_ = cube.shape;
    const long long n = static_cast<long long>(cube.data.size());
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < n; ++i) cube.data[i] *= factor;
    // A variance (if a noise stage already ran) scales with the square.
    const long long nv = static_cast<long long>(cube.variance.size());
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < nv; ++i) cube.variance[i] *= factor * factor;
    cube.unit = flux_unit(*power_of_ten(params_.unit_scale));
    // Luminosity maps (emission lines: L_sun per spaxel) become flux maps, in erg/s/cm^2 whatever
    // the cube's unit_scale (their values, ~1e-17, are far from float32's limits).
    const double map_factor = flux_per_solar_luminosity(d_l);
    for (auto& [name, map] : state.maps) {
      if (map.unit != "Lsun") continue;
      for (double& v : map.values) v *= map_factor;
      map.unit = "erg/(s*cm**2)";
    }
  }

  // A scaling by one constant: its own transpose (docs/gradients.md).
  bool adjoint(const RunState& state, CubeCotangent& cotangent) const override {
    return tangent(state, cotangent);
  }
  bool tangent(const RunState&, CubeCotangent& tangent) const override {
    check_cotangent_shape("flux", shape_, tangent);
    // In parallel: a MUSE-WFM cotangent is 2.7 GB of double (0.36 s on one thread).
    std::vector<double>& values = tangent.values_to_change();
    double* v = values.data();
    const auto n = static_cast<std::ptrdiff_t>(values.size());
#pragma omp parallel for simd schedule(static)
    for (std::ptrdiff_t i = 0; i < n; ++i) v[i] *= factor_;
    return true;
  }

 private:
  FluxParams params_;
  std::string path_;
  // What run() applied, for the adjoint.
  double factor_ = 0.0;
  CubeShape shape_;
};

}  // namespace

std::unique_ptr<Stage> make_flux_stage(const nlohmann::json& params, const std::string& path) {
  return std::make_unique<FluxStage>(FluxParams::from_json(JsonParams(params, path)), path);
}

StageEntry flux_stage() {
  return {.name = "flux",
          .summary = "luminosity density to observed flux density, L / (4 pi D_L^2)",
          .kind = StageKind::cube,
          .make = &from_params<&make_flux_stage>,
          .examples = {{{"luminosity_distance_mpc", 100.0}}}};
}

}  // namespace ifusim
