#include "io/tng/tng_convert.h"

#include <cmath>
#include <sstream>
#include <vector>

#include "core/config_error.h"

namespace ifusim::tng {

CgsFactor cgs_factor(const UnitAttributes& units, double scale_factor, double hubble_param) {
  if (units.to_cgs == 0) return {1.0, true};
  return {std::pow(scale_factor, units.a_scaling) * std::pow(hubble_param, units.h_scaling) *
              units.to_cgs,
          false};
}

double target_factor(const CgsFactor& f, double target_unit_cgs, const std::string& where) {
  if (target_unit_cgs == 0) {
    if (!f.dimensionless)
      throw InputError(where + ": expected a dimensionless field (attribute to_cgs = 0)");
    return 1.0;
  }
  if (f.dimensionless)
    throw InputError(where + ": attribute to_cgs = 0 (dimensionless), expected a physical unit");
  return f.factor / target_unit_cgs;
}

std::string bounds_text(Bounds bounds, double snapshot_scale_factor) {
  switch (bounds) {
    case Bounds::any:
      return "any finite value";
    case Bounds::positive:
      return "> 0";
    case Bounds::mass_fraction:
      return "a mass fraction in [0, 1)";
    case Bounds::formed_by_snapshot: {
      std::ostringstream text;
      text << "a scale factor of formation at most the snapshot's (" << snapshot_scale_factor
           << ") and above 0: a star formed after its snapshot, or never";
      return text.str();
    }
  }
  return "";
}

ShardedArray<float> gas_temperature(const Mesh& mesh, const Gas& gas) {
  ShardedArray<float> temperature(mesh, gas.count(), 1, Sharding::sharded());
  shard_map(mesh, [&](const Device& device) {
    if (temperature.shard(device).range.empty()) return;
    const auto u = gas.internal_energy_km2_s2.download_shard(device);
    const auto xe = gas.electron_abundance.download_shard(device);
    std::vector<float> t(u.size());
    for (std::size_t i = 0; i < u.size(); ++i)
      t[i] = static_cast<float>(
          gas_temperature_k(static_cast<double>(u[i]), static_cast<double>(xe[i])));
    temperature.upload_shard(device, t.data());
  });
  return temperature;
}

}  // namespace ifusim::tng
