#include "io/tng/galaxy_summary.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace ifusim {
namespace {

double sum(const std::vector<float>& v) {
  double s = 0;
  for (const float x : v) s += static_cast<double>(x);
  return s;
}

double weighted_mean(const std::vector<float>& value, const std::vector<float>& weight) {
  double s = 0, w = 0;
  for (std::size_t i = 0; i < value.size(); ++i) {
    s += static_cast<double>(weight[i]) * static_cast<double>(value[i]);
    w += static_cast<double>(weight[i]);
  }
  return w > 0 ? s / w : 0.0;
}

double median(std::vector<float> v) {
  if (v.empty()) return 0.0;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

}  // namespace

GalaxySummary summarize(const GalaxyData& data, const TngIngestReport& report) {
  GalaxySummary s;
  const Galaxy& g = data.galaxy;
  s.layout = report.layout;
  s.format = report.format;
  s.simulation = g.simulation;
  s.snapshot = g.snapshot;
  s.subhalo_id = g.subhalo_id;
  s.redshift = g.redshift;
  s.scale_factor = g.scale_factor;
  s.hubble_param = g.cosmology.hubble_param;
  s.n_stars = data.stars.count();
  s.n_wind_dropped = report.n_wind_dropped;
  s.n_gas = data.gas.count();
  s.n_nonfinite_dropped = report.n_nonfinite_dropped;
  s.center_kpc = g.center_kpc;
  s.center_method = report.center_method;
  s.stellar_half_mass_radius_kpc = g.halfmass_radius_stars_kpc;
  if (!data.stars.mass_msun.empty()) {
    const auto mass = data.stars.mass_msun.to_host();
    s.stellar_mass_msun = sum(mass);
    if (!data.stars.initial_mass_msun.empty())
      s.stellar_initial_mass_msun = sum(data.stars.initial_mass_msun.to_host());
    if (!data.stars.age_gyr.empty()) {
      const auto age = data.stars.age_gyr.to_host();
      s.mass_weighted_age_gyr = weighted_mean(age, mass);
      s.median_age_gyr = median(age);
    }
    if (!data.stars.metallicity.empty())
      s.mass_weighted_metallicity = weighted_mean(data.stars.metallicity.to_host(), mass);
  }
  if (!data.gas.mass_msun.empty()) s.gas_mass_msun = sum(data.gas.mass_msun.to_host());
  return s;
}

nlohmann::json to_json(const GalaxySummary& s) {
  return {{"layout", s.layout},
          {"format", s.format},
          {"simulation", s.simulation},
          {"snapshot", s.snapshot},
          {"subhalo_id", s.subhalo_id},
          {"redshift", s.redshift},
          {"scale_factor", s.scale_factor},
          {"hubble_param", s.hubble_param},
          {"n_stars", s.n_stars},
          {"n_wind_dropped", s.n_wind_dropped},
          {"n_gas", s.n_gas},
          {"n_nonfinite_dropped", s.n_nonfinite_dropped},
          {"stellar_mass_msun", s.stellar_mass_msun},
          {"stellar_initial_mass_msun", s.stellar_initial_mass_msun},
          {"gas_mass_msun", s.gas_mass_msun},
          {"center_kpc", s.center_kpc},
          {"center_method", s.center_method},
          {"stellar_half_mass_radius_kpc", s.stellar_half_mass_radius_kpc},
          {"mass_weighted_age_gyr", s.mass_weighted_age_gyr},
          {"median_age_gyr", s.median_age_gyr},
          {"mass_weighted_metallicity", s.mass_weighted_metallicity}};
}

std::string to_table(const GalaxySummary& s) {
  std::ostringstream out;
  char buf[256];
  auto row = [&](const char* name, const std::string& value) {
    std::snprintf(buf, sizeof buf, "  %-32s %s\n", name, value.c_str());
    out << buf;
  };
  auto num = [&](double v, const char* fmt = "%.6g") {
    std::snprintf(buf, sizeof buf, fmt, v);
    return std::string(buf);
  };
  row("layout", s.layout);
  row("format", s.format);
  row("simulation", s.simulation.empty() ? "(not named)" : s.simulation);
  row("snapshot", std::to_string(s.snapshot));
  row("subhalo id", std::to_string(s.subhalo_id));
  row("redshift", num(s.redshift));
  row("scale factor", num(s.scale_factor));
  row("hubble param h", num(s.hubble_param));
  row("stars", std::to_string(s.n_stars));
  row("wind cells dropped", std::to_string(s.n_wind_dropped));
  row("gas cells", std::to_string(s.n_gas));
  row("non-finite particles dropped", std::to_string(s.n_nonfinite_dropped));
  row("stellar mass [Msun]", num(s.stellar_mass_msun, "%.6e"));
  row("stellar initial mass [Msun]", num(s.stellar_initial_mass_msun, "%.6e"));
  row("gas mass [Msun]", num(s.gas_mass_msun, "%.6e"));
  row("centre [kpc, physical]", num(s.center_kpc[0], "%.4f") + " " + num(s.center_kpc[1], "%.4f") +
                                    " " + num(s.center_kpc[2], "%.4f") + " (" + s.center_method +
                                    ")");
  row("stellar half-mass radius [kpc]", num(s.stellar_half_mass_radius_kpc));
  row("mass-weighted age [Gyr]", num(s.mass_weighted_age_gyr));
  row("median age [Gyr]", num(s.median_age_gyr));
  row("mass-weighted metallicity", num(s.mass_weighted_metallicity));
  return out.str();
}

}  // namespace ifusim
