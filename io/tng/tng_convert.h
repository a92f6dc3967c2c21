#pragma once
// How stored IllustrisTNG values become GalaxyData values: the unit factor of a dataset, the
// per-value conversions of the field table (tng_fields.h) and the gas temperature. One code path
// for the file reader (tng_reader.cpp) and the in-memory synthetic source (synthetic_source.h),
// so that a galaxy generated in memory is converted exactly as the same galaxy read from a file.
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "core/constants.h"
#include "data/cosmology.h"
#include "data/galaxy_data.h"
#include "io/tng/tng_fields.h"

namespace ifusim::tng {

// Gas temperature constants (TNG FAQ, "How do I compute gas temperature?"): the proton mass and
// the Boltzmann constant (kProtonMassG, kBoltzmannErgPerK: core/constants.h), TNG's primordial
// hydrogen mass fraction and a monatomic ideal gas.
inline constexpr double kHydrogenMassFraction = 0.76;
inline constexpr double kAdiabaticIndex = 5.0 / 3.0;

// Mean molecular weight mu = 4 / (1 + 3 X_H + 4 X_H x_e), x_e = n_e / n_H (TNG FAQ).
inline double mean_molecular_weight(double electron_abundance) {
  return 4.0 /
         (1.0 + 3.0 * kHydrogenMassFraction + 4.0 * kHydrogenMassFraction * electron_abundance);
}

// T = (gamma - 1) u / k_B * mu m_p, u the specific internal energy in (km/s)^2 (TNG FAQ).
inline double gas_temperature_k(double internal_energy_km2_s2, double electron_abundance) {
  const double u_cgs = internal_energy_km2_s2 * kKmCm * kKmCm;
  return (kAdiabaticIndex - 1.0) * u_cgs / kBoltzmannErgPerK *
         mean_molecular_weight(electron_abundance) * kProtonMassG;
}

// The temperature of every gas cell from its internal energy and electron abundance, sharded
// as they are.
ShardedArray<float> gas_temperature(const Mesh& mesh, const Gas& gas);

// physical cgs = value * a^a_scaling * h^h_scaling * to_cgs at the snapshot's a and h.
struct CgsFactor {
  double factor = 1;
  bool dimensionless = true;
};
CgsFactor cgs_factor(const UnitAttributes& units, double scale_factor, double hubble_param);

// Factor from the stored value to the target unit (target_unit_cgs = 0: dimensionless). Throws
// InputError naming `where` when the field's units do not fit the target.
double target_factor(const CgsFactor& f, double target_unit_cgs, const std::string& where);

// What the per-value conversions need besides the field's factor.
struct ConversionFrame {
  std::array<double, 3> center_code{0, 0, 0};        // the galaxy's centre, comoving code units
  double box_size = 0;                               // periodic box, comoving code units
  std::array<double, 3> bulk_velocity_kms{0, 0, 0};  // the galaxy's peculiar velocity
  double time_snapshot_gyr = 0;                      // cosmic time at the snapshot
  double snapshot_scale_factor = 1;                  // bounds a formation time (Bounds)
  Cosmology cosmology;
};

// Whether a stored, finite value is within its field's bounds (FieldRule::bounds).
inline bool within_bounds(Bounds bounds, double v, double snapshot_scale_factor) {
  switch (bounds) {
    case Bounds::any:
      return true;
    case Bounds::positive:
      return v > 0;
    case Bounds::mass_fraction:
      return v >= 0 && v < 1;
    case Bounds::formed_by_snapshot:
      // Formation times are float32 and the snapshot's scale factor double: a star formed in the
      // snapshot's last step may be stored half a float32 ulp above it, which is no error.
      return v > 0 && v <= snapshot_scale_factor * (1.0 + 0x1p-23);
  }
  return true;
}

// What within_bounds asks of a value, for the message ("expected > 0").
std::string bounds_text(Bounds bounds, double snapshot_scale_factor);

// Periodic separation d wrapped into [-L/2, L/2).
inline double periodic_offset(double d, double box) {
  return d - box * std::floor(d / box + 0.5);
}

// One stored value (component c of its row) -> its GalaxyData value.
inline double convert_value(Conversion conversion, double factor, double v, int c,
                            const ConversionFrame& frame) {
  const auto k = static_cast<std::size_t>(c);
  switch (conversion) {
    case Conversion::scale:
      return v * factor;
    case Conversion::position:
      return periodic_offset(v - frame.center_code[k], frame.box_size) * factor;
    case Conversion::velocity:
      return v * factor - frame.bulk_velocity_kms[k];
    case Conversion::formation_time_to_age:
      return frame.time_snapshot_gyr - frame.cosmology.cosmic_time_gyr(v);
    case Conversion::star_formation_rate:
      return v > 0 ? v * factor : 0.0;
  }
  return v;
}

// Moves an array into the Stars / Gas field the rule names (the GalaxyData table's name).
template <class Set>
void assign_field(Set& set, const FieldRule& rule, ShardedArray<float>&& array) {
  bool done = false;
  Set::for_each_field(set, [&](const FieldSpec& spec, auto& field) {
    if constexpr (std::is_same_v<std::decay_t<decltype(field)>, ShardedArray<float>>) {
      if (!done && std::string(spec.name) == rule.target) {
        if (spec.components != rule.components)
          throw std::logic_error(std::string("tng field table: ") + rule.dataset + " -> " +
                                 rule.target + " has the wrong component count");
        field = std::move(array);
        done = true;
      }
    }
  });
  if (!done)
    throw std::logic_error(std::string("tng field table: no GalaxyData field ") + rule.target);
}

}  // namespace ifusim::tng
