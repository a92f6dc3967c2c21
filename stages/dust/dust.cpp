#include "stages/dust/dust.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <utility>

#include "data/collectives/reductions.h"
#include "data/cotangent.h"
#include "data/host_memory.h"
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
      deposits.push_back({s, z_kpc[i], weight, weight, first_row + i});
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

DustScreens make_dust_screens(std::vector<DustDeposit>& deposits, std::size_t n_spaxels,
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

std::vector<double> dust_entry_cotangents(const DustScreens& screens, double spaxel_size_kpc,
                                          const DustParams& params,
                                          const std::vector<DustReceivers>& receivers) {
  const DustScreenView view{screens.offsets.data(), screens.z_kpc.data(),
                            screens.av_through.data()};
  // dL/d av_through[e]: what each receiver's A_V, through each spaxel of its footprint, owes the
  // column up to and including entry e.
  std::vector<double> entry = large_vector<double>(screens.z_kpc.size(), 0.0);
  struct Part {
    std::int64_t entry;
    double weight;
    float av;
  };
  std::vector<Part> parts;
  for (const DustReceivers& r : receivers) {
    const std::size_t n = r.z_kpc->size();
    if (r.av_cotangent->size() != n)
      throw std::logic_error("dust: a gradient of A_V of another length than its particles");
    for (std::size_t i = 0; i < n; ++i) {
      const double g = (*r.av_cotangent)[i];
      if (g == 0.0) continue;
      const float z = (*r.z_kpc)[i];
      parts.clear();
      r.footprint->for_each(i, [&](std::int32_t s, double w) {
        const std::int64_t e = screen_entry_in_front(view, s, z);
        parts.push_back({e, w, e >= 0 ? static_cast<float>(screens.av_through[e]) : 0.0f});
      });
      if (parts.size() == 1) {  // A_V is that spaxel's screen (StarDustAv)
        if (parts[0].entry >= 0) entry[parts[0].entry] += g;
        continue;
      }
      // 10^(-0.4 A_V) = sum_s w_s 10^(-0.4 A_s) / sum_s w_s, so dA_V/dA_s = w_s T_s / sum w T,
      // T_s = 10^(-0.4 A_s), taken relative to the smallest A_s (no underflow).
      float av_min = 0.0f;
      for (std::size_t k = 0; k < parts.size(); ++k)
        av_min = k == 0 ? parts[k].av : std::min(av_min, parts[k].av);
      double total = 0.0;
      for (Part& part : parts) {
        part.weight *= std::pow(10.0, -0.4 * (static_cast<double>(part.av) - av_min));
        total += part.weight;
      }
      for (const Part& part : parts)
        if (part.entry >= 0) entry[part.entry] += g * part.weight / total;
    }
  }
  // av_through[e] = per_gas_msun x the sum of w m Z over the entries up to e in its spaxel, so
  // an entry's own dL/d(w m Z) is per_gas_msun x the sum of dL/d av_through behind it.
  const double per_gas_msun =
      params.av_per_gas_msun_per_kpc2(1.0) / (spaxel_size_kpc * spaxel_size_kpc);
  for (std::size_t s = 0; s + 1 < screens.offsets.size(); ++s) {
    double behind = 0.0;
    for (std::int64_t e = screens.offsets[s + 1] - 1; e >= screens.offsets[s]; --e) {
      behind += entry[e];
      entry[e] = behind * per_gas_msun;
    }
  }
  return entry;
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
    const HostFootprint footprint = gas_host_footprint(gas, grid);
    add_dust_deposits(deposits_, n_gas_seen_, static_cast<std::size_t>(grid.n_side) * grid.n_side,
                      footprint.view(grid), footprint.z, dust_carrying_mass(gas),
                      gas.metallicity.to_host());
    n_gas_seen_ += n;
  }

  // A particle set's footprint over host copies of its fields: its spaxels, or with kernel
  // smoothing its sky positions and smoothing lengths; and its depths.
  struct HostFootprint {
    std::vector<float> x, y, z, length;
    std::vector<std::int32_t> spaxel;
    double sigma_per_length = 0.0;
    FootprintView view(const SpaxelGrid& grid) const {
      FootprintView v;
      v.grid = grid;
      if (length.empty()) {
        v.spaxel_index = spaxel.data();
      } else {
        v.x_kpc = x.data();
        v.y_kpc = y.data();
        v.smoothing_length_kpc = length.data();
        v.sigma_per_length = sigma_per_length;
      }
      return v;
    }
  };
  static HostFootprint host_footprint(const ShardedArray<float>& position,
                                      const ShardedArray<float>* smoothing_length,
                                      const ShardedArray<std::int32_t>* spaxel_index,
                                      double sigma_per_length) {
    HostFootprint out;
    const std::vector<float> xyz = position.to_host();
    const std::size_t n = xyz.size() / 3;
    out.x.resize(n);
    out.y.resize(n);
    out.z.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      out.x[i] = xyz[3 * i];
      out.y[i] = xyz[3 * i + 1];
      out.z[i] = xyz[3 * i + 2];
    }
    if (smoothing_length) {
      out.length = smoothing_length->to_host();
      out.sigma_per_length = sigma_per_length;
    } else {
      out.spaxel = spaxel_index->to_host();
    }
    return out;
  }
  static HostFootprint gas_host_footprint(const Gas& gas, const SpaxelGrid& grid) {
    const bool kernel = static_cast<Smoothing>(grid.smoothing) == Smoothing::kernel;
    return host_footprint(
        gas.position_kpc, kernel ? &gas.derived.at(fields::gas_smoothing_length_kpc) : nullptr,
        kernel ? nullptr : &gas.derived.at(fields::gas_spaxel_index), kGasSigmaPerCellRadius);
  }
  static HostFootprint star_host_footprint(const Stars& stars, const SpaxelGrid& grid) {
    const bool kernel = static_cast<Smoothing>(grid.smoothing) == Smoothing::kernel;
    return host_footprint(stars.position_kpc, kernel ? &stars.smoothing_length_kpc : nullptr,
                          kernel ? nullptr : &stars.derived.at(fields::stars_spaxel_index),
                          kStarSigmaPerSmoothingLength);
  }

  // Whether each cell holds dust (DustCarriers).
  std::vector<std::uint8_t> dust_carriers(const Gas& gas) {
    const std::size_t n = gas.count();
    std::vector<std::uint8_t> out(n, 1);
    if (params_.carriers == DustCarriers::all) return out;
    if (gas.temperature_k.rows() != n) {
      if (!warned_no_temperature_)
        spdlog::warn(
            "dust: the gas has no temperatures (InternalEnergy and ElectronAbundance), so every "
            "cell holds dust, hot halo gas too (stages.dust.carriers)");
      warned_no_temperature_ = true;
      return out;
    }
    const std::vector<float> temperature = gas.temperature_k.to_host();
    std::vector<float> sfr(n, 0.0f);
    if (gas.sfr_msun_per_yr.rows() == n) sfr = gas.sfr_msun_per_yr.to_host();
    for (std::size_t i = 0; i < n; ++i)
      out[i] = sfr[i] > 0.0f || temperature[i] < params_.cold_temperature_k;
    return out;
  }
  // The cells' masses, 0 for a cell that holds no dust.
  std::vector<float> dust_carrying_mass(const Gas& gas) {
    std::vector<float> mass = gas.mass_msun.to_host();
    const std::vector<std::uint8_t> carriers = dust_carriers(gas);
    for (std::size_t i = 0; i < mass.size(); ++i)
      if (!carriers[i]) mass[i] = 0.0f;
    return mass;
  }

  // Reverse mode (docs/gradients.md, "Dust"): dL/d A_V of the stars (stellar_spectra's adjoint)
  // and of the gas cells (emission_lines'), carried back through the screens to each cell's mass
  // and metallicity (dust_entry_cotangents). The screens are made again from the gas as the
  // forward saw it (a held galaxy), with each entry's particle and footprint weight. Held
  // fixed: depths and footprints (positions, smoothing lengths: which gas is in front of what is
  // piecewise constant), which cells hold dust (a cut in temperature and SFR), the birth clouds
  // (a constant A_V, a step in age).
  bool particle_adjoint(RunState& state, const CubeCotangent& /*reduced*/,
                        ParticleGradients& gradients) override {
    if (!screens_) throw std::logic_error("dust: particle_adjoint before the stage's forward run");
    const auto start = std::chrono::steady_clock::now();
    const Gas& gas = state.data.gas;
    const std::size_t n_gas = gas.count();
    if (n_gas == 0) return true;  // no screens: every A_V is a constant
    const SpaxelGrid& grid = state.products.get<SpaxelGrid>("spaxels");
    const std::size_t n_spaxels = static_cast<std::size_t>(grid.n_side) * grid.n_side;
    const HostFootprint gas_footprint = gas_host_footprint(gas, grid);
    const FootprintView gas_view = gas_footprint.view(grid);
    const std::vector<float> mass = dust_carrying_mass(gas);
    const std::vector<float> metallicity = gas.metallicity.to_host();
    std::vector<DustDeposit> deposits;
    add_dust_deposits(deposits, 0, n_spaxels, gas_view, gas_footprint.z, mass, metallicity);
    const DustScreens screens =
        make_dust_screens(deposits, n_spaxels, grid.spaxel_size_kpc, params_);

    std::vector<DustReceivers> receivers;
    HostFootprint star_footprint;
    FootprintView star_view;
    const auto stars_av = gradients.fields.find(fields::stars_dust_av.full_name());
    if (stars_av != gradients.fields.end() && state.data.stars.count() > 0) {
      star_footprint = star_host_footprint(state.data.stars, grid);
      star_view = star_footprint.view(grid);
      receivers.push_back({&star_view, &star_footprint.z, &stars_av->second});
    }
    const auto gas_av = gradients.fields.find(fields::gas_dust_av.full_name());
    if (gas_av != gradients.fields.end())
      receivers.push_back({&gas_view, &gas_footprint.z, &gas_av->second});
    const std::vector<double> entry =
        dust_entry_cotangents(screens, grid.spaxel_size_kpc, params_, receivers);

    // Each entry is w m Z of one cell: dL/d(m Z) of the cell, summed in the entries' order.
    std::vector<double> per_mass_z(n_gas, 0.0);
    for (std::size_t e = 0; e < deposits.size(); ++e)
      per_mass_z[deposits[e].row] += entry[e] * deposits[e].weight;
    const std::vector<std::uint8_t> carriers = dust_carriers(gas);
    std::vector<double>& d_mass = gradients.add_to("gas.mass_msun", n_gas, "dust");
    std::vector<double>& d_metallicity = gradients.add_to("gas.metallicity", n_gas, "dust");
    for (std::size_t j = 0; j < n_gas; ++j) {
      if (!carriers[j]) continue;  // no dust: m and Z reach no screen
      d_mass[j] += per_mass_z[j] * static_cast<double>(metallicity[j]);
      d_metallicity[j] += per_mass_z[j] * static_cast<double>(mass[j]);
    }
    spdlog::info("dust: gradients through {} screen entries of {} gas cells in {:.3f} s",
                 deposits.size(), n_gas,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return true;
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
        make_dust_screens(deposits, n_spaxels, grid.spaxel_size_kpc, params_);
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
