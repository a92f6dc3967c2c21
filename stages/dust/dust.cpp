#include "stages/dust/dust.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <utility>

#include "data/collectives/reductions.h"
#include "data/sharded_array.h"
#include "stages/common/particle_fields.h"

namespace ifusim {

DustParams DustParams::from_json(JsonParams p) {
  DustParams out;
  const std::string curve = p.choice("curve", {"ccm89", "calzetti00"}, "ccm89");
  out.curve.kind = curve == "calzetti00" ? DustCurveKind::calzetti00 : DustCurveKind::ccm89;
  // Each curve's own R_V: the Milky Way average for CCM89, Calzetti et al. 2000's 4.05.
  out.curve.r_v = p.number("r_v", curve == "calzetti00" ? 4.05 : 3.1);
  p.require(out.curve.r_v >= 1.0 && out.curve.r_v <= 10.0, "r_v", "a number from 1 to 10",
            out.curve.r_v);
  // The nebular lines' curve (dust.h): a Milky-Way-type curve whatever the stars'.
  const std::string line_curve = p.choice("line_curve", {"ccm89", "calzetti00"}, "ccm89");
  out.line_curve.kind =
      line_curve == "calzetti00" ? DustCurveKind::calzetti00 : DustCurveKind::ccm89;
  out.line_curve.r_v = p.number("line_r_v", line_curve == "calzetti00" ? 4.05 : 3.1);
  p.require(out.line_curve.r_v >= 1.0 && out.line_curve.r_v <= 10.0, "line_r_v",
            "a number from 1 to 10", out.line_curve.r_v);
  // Birth clouds (Charlot & Fall 2000, dust.h).
  out.birth_cloud_tau_v = p.number("birth_cloud_tau_v", out.birth_cloud_tau_v);
  p.require(out.birth_cloud_tau_v >= 0.0 && out.birth_cloud_tau_v <= 100.0, "birth_cloud_tau_v",
            "an optical depth from 0 (no birth clouds) to 100", out.birth_cloud_tau_v);
  out.birth_cloud_age_myr = p.number("birth_cloud_age_myr", out.birth_cloud_age_myr);
  p.require(out.birth_cloud_age_myr > 0.0 && out.birth_cloud_age_myr <= 1000.0,
            "birth_cloud_age_myr", "an age > 0 and <= 1000 (Myr)", out.birth_cloud_age_myr);
  out.carriers =
      p.choice("carriers", {"cold_or_star_forming", "all"}, "cold_or_star_forming") == "all"
          ? DustCarriers::all
          : DustCarriers::cold_or_star_forming;
  out.cold_temperature_k = p.number("cold_temperature_k", out.cold_temperature_k);
  p.require(out.cold_temperature_k > 0.0 && std::isfinite(out.cold_temperature_k),
            "cold_temperature_k", "a temperature > 0 (K)", out.cold_temperature_k);
  out.dust_to_metals = p.number("dust_to_metals", 0.4);
  p.require(out.dust_to_metals > 0.0 && out.dust_to_metals <= 1.0, "dust_to_metals",
            "a number > 0 and <= 1 (the fraction of metals in dust)", out.dust_to_metals);
  out.kappa_v_cm2_per_g = p.number("kappa_v_cm2_per_g", 2.62e4);
  p.require(out.kappa_v_cm2_per_g > 0.0 && std::isfinite(out.kappa_v_cm2_per_g),
            "kappa_v_cm2_per_g", "a number > 0 (cm^2 per gram of dust)", out.kappa_v_cm2_per_g);
  p.finish();
  return out;
}

void add_dust_deposits(std::vector<DustDeposit>& deposits, std::size_t first_row,
                       std::size_t n_spaxels, const FootprintView& footprint,
                       const std::vector<float>& z_kpc, const std::vector<float>& mass_msun,
                       const std::vector<float>& metallicity) {
  const std::size_t n = z_kpc.size();
  if (mass_msun.size() != n || metallicity.size() != n)
    throw std::invalid_argument("add_dust_deposits: gas arrays of different lengths");
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t first = deposits.size();
    footprint.for_each(i, [&](std::int32_t s, double weight) {
      if (static_cast<std::size_t>(s) >= n_spaxels)
        throw std::logic_error("dust: gas spaxel index beyond the grid");
      deposits.push_back({s, z_kpc[i], weight, first_row + i});
    });
    if (deposits.size() == first) continue;  // the particle does not reach the grid
    const std::string row = std::to_string(first_row + i);
    if (!(mass_msun[i] >= 0.0f) || !std::isfinite(mass_msun[i]))
      throw std::runtime_error("dust: gas.mass_msun[" + row + "] = " +
                               std::to_string(mass_msun[i]) + ", expected a finite mass >= 0");
    if (!(metallicity[i] >= 0.0f) || !std::isfinite(metallicity[i]))
      throw std::runtime_error("dust: gas.metallicity[" + row +
                               "] = " + std::to_string(metallicity[i]) +
                               ", expected a finite mass fraction >= 0");
    if (!std::isfinite(z_kpc[i]))
      throw std::runtime_error("dust: gas.position_kpc[" + row + "] has a non-finite z");
    // m Z first, then the weight: without smoothing (weight 1) exactly the unsmoothed sum.
    const double mass_times_z =
        static_cast<double>(mass_msun[i]) * static_cast<double>(metallicity[i]);
    for (std::size_t k = first; k < deposits.size(); ++k)
      deposits[k].mass_times_z_msun = mass_times_z * deposits[k].mass_times_z_msun;
  }
}

DustScreens make_dust_screens(std::vector<DustDeposit> deposits, std::size_t n_spaxels,
                              double spaxel_size_kpc, const DustParams& params) {
  // One fixed order: spaxel, then depth, then the particle's row (ties).
  std::sort(deposits.begin(), deposits.end(), [](const DustDeposit& a, const DustDeposit& b) {
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
  for (const DustDeposit& d : deposits) {
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

// The screens on every device (replicated), for the kernel.
struct DeviceScreens {
  ShardedArray<std::int64_t> offsets;
  ShardedArray<float> z_kpc;
  ShardedArray<double> av_through;
  DustScreenView on(const Device& d) const {
    return {offsets.local(d).data, z_kpc.local(d).data, av_through.local(d).data};
  }
};

// The gas's screens are built in a pass over the gas (observe: each block's deposits; end_pass:
// every process's, sorted), so that a streamed run, which shows the gas to the stages in its own
// block before the stars' blocks, gives every star the screens of all the gas.
class DustStage final : public Stage {
 public:
  explicit DustStage(DustParams params) : params_(params) {}
  std::string name() const override { return "dust"; }
  // The gas is optional: without gas every star gets A_V = 0 (and a warning).
  // With birth clouds, the stars' ages.
  std::vector<std::string> needs() const override {
    std::vector<std::string> out{fields::stars_spaxel_index.full_name(),
                                 "stars.position_kpc",
                                 "spaxels",
                                 "gas.position_kpc",
                                 "gas.mass_msun",
                                 "gas.metallicity",
                                 fields::gas_spaxel_index.full_name()};
    if (params_.birth_cloud_tau_v > 0.0) out.push_back("stars.age_gyr");
    return out;
  }
  std::vector<Provided> provides() const override {
    return {Provided::field(fields::stars_dust_av, "A_V of the gas in front of each star"),
            Provided::field(fields::gas_dust_av, "A_V of the gas in front of each gas cell"),
            {"dust_attenuation", "", "the attenuation curve, and the largest A_V of any star"}};
  }

  Pass pass(const StreamedInput&) const override { return Pass::gas; }
  void observe(RunState& block) override {
    const SpaxelGrid& grid = block.products.get<SpaxelGrid>("spaxels");
    if (block.spaxels.nx != grid.n_side || block.spaxels.ny != grid.n_side ||
        !(grid.spaxel_size_kpc > 0))
      throw std::logic_error("dust: the spaxel grid was not set by a spaxel stage");
    Gas& gas = block.data.gas;
    const std::size_t n = gas.count();
    if (n == 0) return;
    if (gas.position_kpc.rows() != n || gas.metallicity.rows() != n)
      throw std::runtime_error(
          "dust: the gas needs position_kpc, mass_msun and metallicity for every particle");
    // The gas on the stars' own grid, with the same kernel (the spaxel stage placed it).
    std::vector<std::int32_t> spaxel;
    const std::vector<float> position = gas.position_kpc.to_host();
    std::vector<float> x(n), y(n), z(n), length;
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = position[3 * i];
      y[i] = position[3 * i + 1];
      z[i] = position[3 * i + 2];
    }
    FootprintView footprint;
    footprint.grid = grid;
    if (static_cast<Smoothing>(grid.smoothing) == Smoothing::kernel) {
      length = gas.derived.at(fields::gas_smoothing_length_kpc).to_host();
      footprint.x_kpc = x.data();
      footprint.y_kpc = y.data();
      footprint.smoothing_length_kpc = length.data();
      footprint.sigma_per_length = kGasSigmaPerCellRadius;
    } else {
      spaxel = gas.derived.at(fields::gas_spaxel_index).to_host();
      footprint.spaxel_index = spaxel.data();
    }
    add_dust_deposits(deposits_, n_gas_seen_, static_cast<std::size_t>(grid.n_side) * grid.n_side,
                      footprint, z, dust_carrying_mass(gas), gas.metallicity.to_host());
    n_gas_seen_ += n;
  }
  // The cells' masses, 0 for a cell that holds no dust (DustCarriers).
  std::vector<float> dust_carrying_mass(const Gas& gas) {
    std::vector<float> mass = gas.mass_msun.to_host();
    if (params_.carriers == DustCarriers::all) return mass;
    const std::size_t n = mass.size();
    if (gas.temperature_k.rows() != n) {
      if (!warned_no_temperature_)
        spdlog::warn(
            "dust: the gas has no temperatures (InternalEnergy and ElectronAbundance), so every "
            "cell holds dust, hot halo gas too (stages.dust.carriers)");
      warned_no_temperature_ = true;
      return mass;
    }
    const std::vector<float> temperature = gas.temperature_k.to_host();
    std::vector<float> sfr(n, 0.0f);
    if (gas.sfr_msun_per_yr.rows() == n) sfr = gas.sfr_msun_per_yr.to_host();
    for (std::size_t i = 0; i < n; ++i)
      if (!(sfr[i] > 0.0f) && !(temperature[i] < params_.cold_temperature_k)) mass[i] = 0.0f;
    return mass;
  }

  void end_pass(RunState& state) override {
    const SpaxelGrid& grid = state.products.get<SpaxelGrid>("spaxels");
    const std::size_t n_spaxels = static_cast<std::size_t>(grid.n_side) * grid.n_side;
    // A run across processes: the gas of every process.
    std::vector<DustDeposit> deposits =
        concatenate_over_processes(state.mesh, std::exchange(deposits_, {}));
    const std::int64_t n_gas =
        sum_over_processes(state.mesh, static_cast<std::int64_t>(std::exchange(n_gas_seen_, 0)));
    if (n_gas == 0) spdlog::warn("dust: the galaxy has no gas; every star gets A_V = 0");
    const std::size_t n_deposits = deposits.size();
    const DustScreens screens =
        make_dust_screens(std::move(deposits), n_spaxels, grid.spaxel_size_kpc, params_);
    double deepest = 0.0;
    for (std::size_t s = 0; s < n_spaxels; ++s)
      if (screens.offsets[s + 1] > screens.offsets[s])
        deepest = std::max(
            deepest, screens.av_through[static_cast<std::size_t>(screens.offsets[s + 1] - 1)]);
    auto curve_name = [](const DustCurve& c) {
      return c.kind == DustCurveKind::calzetti00 ? "Calzetti 2000" : "CCM89";
    };
    spdlog::info(
        "dust: {} gas deposits in the grid from {} gas particles{}; largest A_V through a spaxel "
        "{:.3g} mag (stars {}, R_V = {}; lines {}, R_V = {}); birth clouds A_V = {:.3g} mag for "
        "stars younger than {} Myr and the lines",
        n_deposits, n_gas,
        static_cast<Smoothing>(grid.smoothing) == Smoothing::kernel ? " (smoothed)" : "", deepest,
        curve_name(params_.curve), params_.curve.r_v, curve_name(params_.line_curve),
        params_.line_curve.r_v, params_.birth_cloud_av_mag(), params_.birth_cloud_age_myr);
    // A star's A_V is a screen's, or (smoothed) a mean of screens' in 10^(-0.4 A_V): at most the
    // deepest, up to the rounding of its float (margin 1e-6); a young star's, that plus its
    // birth cloud's.
    av_bound_mag_ = (deepest + params_.birth_cloud_av_mag()) * (1.0 + 1e-6) + 1e-6;
    const auto rep = Sharding::replicated();
    screens_.emplace(DeviceScreens{device_put(state.mesh, screens.offsets, 1, rep),
                                   device_put(state.mesh, screens.z_kpc, 1, rep),
                                   device_put(state.mesh, screens.av_through, 1, rep)});
  }

  void run(RunState& state) override {
    if (!screens_) throw std::logic_error("dust: run before its pass over the gas");
    const Mesh& mesh = state.mesh;
    const SpaxelGrid& grid = state.products.get<SpaxelGrid>("spaxels");
    Stars& stars = state.data.stars;
    Gas& gas = state.data.gas;
    auto& star_av = stars.derived.set(
        fields::stars_dust_av, ShardedArray<float>(mesh, stars.count(), 1, Sharding::sharded()));
    const bool birth_clouds = params_.birth_cloud_tau_v > 0.0;
    if (birth_clouds && stars.age_gyr.rows() != stars.count())
      throw std::runtime_error(
          "dust: birth clouds (stages.dust.birth_cloud_tau_v > 0) need stars.age_gyr for every "
          "star");
    shard_map(mesh, [&](const Device& d) {
      BirthCloudView young;
      if (birth_clouds) {
        young.age_gyr = stars.age_gyr.local(d).data;
        young.young_below_gyr = static_cast<float>(params_.birth_cloud_age_myr * 1e-3);
        young.av_mag = static_cast<float>(params_.birth_cloud_av_mag());
      }
      IFUSIM_DISPATCH(d, compute_dust_av, d, screens_->on(d), star_footprint(stars, grid, d), young,
                      stars.position_kpc.local(d, 2), star_av.local(d));
    });
    // The gas cells' own A_V (their emission lines, stages/emission_lines): the same screen in
    // front of each cell, itself excluded (only gas with z_gas < z counts).
    auto& gas_av = gas.derived.set(fields::gas_dust_av,
                                   ShardedArray<float>(mesh, gas.count(), 1, Sharding::sharded()));
    if (gas.count() > 0) {
      shard_map(mesh, [&](const Device& d) {
        IFUSIM_DISPATCH(d, compute_dust_av, d, screens_->on(d), gas_footprint(gas, grid, d),
                        BirthCloudView{}, gas.position_kpc.local(d, 2), gas_av.local(d));
      });
    }
    // The lines: their own curve, and the birth clouds of their H II regions on top of the
    // screen in front of their cell (gas.dust_av).
    state.products.put("dust_attenuation",
                       DustAttenuation{params_.curve, av_bound_mag_, params_.line_curve,
                                       params_.birth_cloud_av_mag()});
  }

 private:
  DustParams params_;
  // The pass: the deposits of the gas seen so far, then the screens they make.
  std::vector<DustDeposit> deposits_;
  std::size_t n_gas_seen_ = 0;
  bool warned_no_temperature_ = false;
  std::optional<DeviceScreens> screens_;
  double av_bound_mag_ = 0.0;
};

}  // namespace

std::unique_ptr<Stage> make_dust_stage(const nlohmann::json& params, const std::string& path) {
  return std::make_unique<DustStage>(DustParams::from_json(JsonParams(params, path)));
}

StageEntry dust_stage() {
  return {.name = "dust",
          .summary =
              "A_V per star from the gas in front of it and birth clouds around young "
              "stars and the lines (CCM89 or Calzetti 2000 curve; lines' own curve)",
          .kind = StageKind::particle,
          .make = &from_params<&make_dust_stage>};
}

}  // namespace ifusim
