#include "stages/dust/dust.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "data/sharded_array.h"
#include "stages/spaxel_grid/smoothing.h"
#include "stages/spaxel_grid/spaxel_grid.h"

namespace ifusim {

DustParams DustParams::from_json(JsonParams p) {
  DustParams out;
  const std::string curve = p.choice("curve", {"ccm89", "calzetti00"}, "ccm89");
  out.curve.kind = curve == "calzetti00" ? DustCurveKind::calzetti00 : DustCurveKind::ccm89;
  // Each curve's own R_V: the Milky Way average for CCM89, Calzetti et al. 2000's 4.05.
  out.curve.r_v = p.number("r_v", curve == "calzetti00" ? 4.05 : 3.1);
  p.require(out.curve.r_v >= 1.0 && out.curve.r_v <= 10.0, "r_v", "a number from 1 to 10",
            out.curve.r_v);
  out.dust_to_metals = p.number("dust_to_metals", 0.4);
  p.require(out.dust_to_metals > 0.0 && out.dust_to_metals <= 1.0, "dust_to_metals",
            "a number > 0 and <= 1 (the fraction of metals in dust)", out.dust_to_metals);
  out.kappa_v_cm2_per_g = p.number("kappa_v_cm2_per_g", 2.62e4);
  p.require(out.kappa_v_cm2_per_g > 0.0 && std::isfinite(out.kappa_v_cm2_per_g),
            "kappa_v_cm2_per_g", "a number > 0 (cm^2 per gram of dust)", out.kappa_v_cm2_per_g);
  p.finish();
  return out;
}

DustScreens make_dust_screens(std::size_t n_spaxels, double spaxel_size_kpc,
                              const DustParams& params, const FootprintView& footprint,
                              const std::vector<float>& z_kpc, const std::vector<float>& mass_msun,
                              const std::vector<float>& metallicity) {
  const std::size_t n = z_kpc.size();
  if (mass_msun.size() != n || metallicity.size() != n)
    throw std::invalid_argument("make_dust_screens: gas arrays of different lengths");
  // One deposit per gas particle and spaxel of its footprint: 24 bytes each on the host.
  struct Deposit {
    std::int32_t spaxel;
    float z_kpc;
    double mass_times_z_msun;  // w m Z (the weight w alone until the particle is checked)
    std::size_t row;
  };
  std::vector<Deposit> deposits;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t first = deposits.size();
    footprint.for_each(i, [&](std::int32_t s, double weight) {
      if (static_cast<std::size_t>(s) >= n_spaxels)
        throw std::logic_error("dust: gas spaxel index beyond the grid");
      deposits.push_back({s, z_kpc[i], weight, i});
    });
    if (deposits.size() == first) continue;  // the particle does not reach the grid
    if (!(mass_msun[i] >= 0.0f) || !std::isfinite(mass_msun[i]))
      throw std::runtime_error("dust: gas.mass_msun[" + std::to_string(i) + "] = " +
                               std::to_string(mass_msun[i]) + ", expected a finite mass >= 0");
    if (!(metallicity[i] >= 0.0f) || !std::isfinite(metallicity[i]))
      throw std::runtime_error("dust: gas.metallicity[" + std::to_string(i) +
                               "] = " + std::to_string(metallicity[i]) +
                               ", expected a finite mass fraction >= 0");
    if (!std::isfinite(z_kpc[i]))
      throw std::runtime_error("dust: gas.position_kpc[" + std::to_string(i) +
                               "] has a non-finite z");
    // m Z first, then the weight: without smoothing (weight 1) exactly the unsmoothed sum.
    const double mass_times_z =
        static_cast<double>(mass_msun[i]) * static_cast<double>(metallicity[i]);
    for (std::size_t k = first; k < deposits.size(); ++k)
      deposits[k].mass_times_z_msun = mass_times_z * deposits[k].mass_times_z_msun;
  }
  // One fixed order: spaxel, then depth, then the particle's global row (ties).
  std::sort(deposits.begin(), deposits.end(), [](const Deposit& a, const Deposit& b) {
    if (a.spaxel != b.spaxel) return a.spaxel < b.spaxel;
    if (a.z_kpc != b.z_kpc) return a.z_kpc < b.z_kpc;
    return a.row < b.row;
  });
  DustScreens out;
  out.offsets.assign(n_spaxels + 1, 0);
  out.z_kpc.reserve(deposits.size());
  out.av_through.reserve(deposits.size());
  const double per_gas_msun =
      params.av_per_gas_msun_per_kpc2(1.0) / (spaxel_size_kpc * spaxel_size_kpc);
  std::int32_t current = -1;
  double column = 0.0;  // sum of w m Z in the spaxel so far (Msun)
  for (const Deposit& d : deposits) {
    if (d.spaxel != current) {
      current = d.spaxel;
      column = 0.0;
    }
    column += d.mass_times_z_msun;
    out.z_kpc.push_back(d.z_kpc);
    out.av_through.push_back(column * per_gas_msun);
    ++out.offsets[static_cast<std::size_t>(current) + 1];
  }
  std::partial_sum(out.offsets.begin(), out.offsets.end(), out.offsets.begin());
  return out;
}

namespace {

class DustStage final : public Stage {
 public:
  explicit DustStage(DustParams params) : params_(params) {}
  std::string name() const override { return "dust"; }
  // The gas is optional: without gas every star gets A_V = 0 (and a warning).
  std::vector<std::string> needs() const override {
    return {"stars.spaxel_index", "stars.position_kpc", "spaxels",
            "gas.position_kpc",   "gas.mass_msun",      "gas.metallicity"};
  }
  std::vector<std::string> provides() const override { return {"stars.dust_av", "gas.dust_av"}; }

  void run(RunState& state) const override {
    const Mesh& mesh = state.mesh;
    const SpaxelGrid& grid = state.spaxel_grid;
    if (state.spaxels.nx != grid.n_side || state.spaxels.ny != grid.n_side ||
        !(grid.spaxel_size_kpc > 0))
      throw std::logic_error("dust: the spaxel grid was not set by a spaxel stage");
    const std::size_t n_spaxels = static_cast<std::size_t>(grid.n_side) * grid.n_side;
    Gas& gas = state.data.gas;
    Stars& stars = state.data.stars;

    std::vector<std::int32_t> gas_spaxel;
    std::vector<float> gas_x, gas_y, gas_z, gas_mass, gas_z_metals, gas_length;
    FootprintView host_gas_footprint;
    host_gas_footprint.grid = grid;
    if (gas.count() == 0) {
      spdlog::warn("dust: the galaxy has no gas; every star gets A_V = 0");
    } else {
      if (gas.position_kpc.rows() != gas.count() || gas.metallicity.rows() != gas.count())
        throw std::runtime_error(
            "dust: the gas needs position_kpc, mass_msun and metallicity for every particle");
      // The gas on the stars' own grid, with the same kernel.
      prepare_gas_footprint(state, "dust");
      gas_spaxel = gas.spaxel_index.to_host();
      const std::vector<float> position = gas.position_kpc.to_host();
      gas_x.resize(gas.count());
      gas_y.resize(gas.count());
      gas_z.resize(gas.count());
      for (std::size_t i = 0; i < gas_z.size(); ++i) {
        gas_x[i] = position[3 * i];
        gas_y[i] = position[3 * i + 1];
        gas_z[i] = position[3 * i + 2];
      }
      gas_mass = gas.mass_msun.to_host();
      gas_z_metals = gas.metallicity.to_host();
      if (static_cast<Smoothing>(grid.smoothing) == Smoothing::kernel) {
        gas_length = gas.smoothing_length_kpc.to_host();
        host_gas_footprint.x_kpc = gas_x.data();
        host_gas_footprint.y_kpc = gas_y.data();
        host_gas_footprint.smoothing_length_kpc = gas_length.data();
        host_gas_footprint.sigma_per_length = kGasSigmaPerCellRadius;
      } else {
        host_gas_footprint.spaxel_index = gas_spaxel.data();
      }
    }
    const DustScreens screens =
        make_dust_screens(n_spaxels, grid.spaxel_size_kpc, params_, host_gas_footprint, gas_z,
                          gas_mass, gas_z_metals);
    double deepest = 0.0;
    for (std::size_t s = 0; s < n_spaxels; ++s)
      if (screens.offsets[s + 1] > screens.offsets[s])
        deepest = std::max(
            deepest, screens.av_through[static_cast<std::size_t>(screens.offsets[s + 1] - 1)]);
    spdlog::info(
        "dust: {} gas deposits in the grid from {} gas particles{}; largest A_V through a spaxel "
        "{:.3g} mag ({}, R_V = {})",
        screens.z_kpc.size(), gas.count(), gas_length.empty() ? "" : " (smoothed)", deepest,
        params_.curve.kind == DustCurveKind::calzetti00 ? "Calzetti 2000" : "CCM89",
        params_.curve.r_v);

    const auto rep = Sharding::replicated();
    const auto offsets = device_put(mesh, screens.offsets, 1, rep);
    const auto depths = device_put(mesh, screens.z_kpc, 1, rep);
    const auto av_through = device_put(mesh, screens.av_through, 1, rep);
    stars.dust_av = ShardedArray<float>(mesh, stars.count(), 1, Sharding::sharded());
    shard_map(mesh, [&](const Device& d) {
      const DustScreenView view{offsets.local(d).data, depths.local(d).data,
                                av_through.local(d).data};
      IFUSIM_DISPATCH(d, compute_dust_av, d, view, star_footprint(stars, grid, d),
                      stars.position_kpc.local(d, 2), stars.dust_av.local(d));
    });
    // The gas cells' own A_V (their emission lines, stages/emission_lines): the same screen in
    // front of each cell, itself excluded (only gas with z_gas < z counts).
    gas.dust_av = ShardedArray<float>(mesh, gas.count(), 1, Sharding::sharded());
    if (gas.count() > 0)
      shard_map(mesh, [&](const Device& d) {
        const DustScreenView view{offsets.local(d).data, depths.local(d).data,
                                  av_through.local(d).data};
        IFUSIM_DISPATCH(d, compute_dust_av, d, view, gas_footprint(gas, grid, d),
                        gas.position_kpc.local(d, 2), gas.dust_av.local(d));
      });
    state.dust_curve = params_.curve;
  }

 private:
  DustParams params_;
};

}  // namespace

std::unique_ptr<Stage> make_dust_stage(const nlohmann::json& params, const std::string& path) {
  return std::make_unique<DustStage>(DustParams::from_json(JsonParams(params, path)));
}

}  // namespace ifusim
