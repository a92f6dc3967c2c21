#include "io/galaxy_field_ranges.h"

#include <limits>

namespace ifusim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

const GalaxyFieldRange kRanges[] = {
    {"stars", "position_kpc", true, -kInf, false, kInf, "positions in kpc"},
    {"stars", "velocity_kms", true, -kInf, false, kInf, "velocities in km/s"},
    {"stars", "initial_mass_msun", true, 0, false, kInf, "masses in Msun > 0"},
    {"stars", "mass_msun", false, 0, false, kInf, "masses in Msun > 0"},
    {"stars", "age_gyr", true, 0, true, kInf, "ages in Gyr >= 0"},
    {"stars", "metallicity", true, 0, true, 1, "metal mass fractions in [0, 1)"},
    {"stars", "smoothing_length_kpc", false, 0, false, kInf, "lengths in kpc > 0"},
    {"gas", "position_kpc", true, -kInf, false, kInf, "positions in kpc"},
    {"gas", "velocity_kms", true, -kInf, false, kInf, "velocities in km/s"},
    {"gas", "mass_msun", true, 0, false, kInf, "masses in Msun > 0"},
    {"gas", "density_msun_per_kpc3", true, 0, false, kInf, "densities in Msun/kpc^3 > 0"},
    {"gas", "metallicity", true, 0, true, 1, "metal mass fractions in [0, 1)"},
    {"gas", "sfr_msun_per_yr", true, 0, true, kInf, "star formation rates in Msun/yr >= 0"},
    {"gas", "internal_energy_km2_s2", false, 0, true, kInf, "specific energies in (km/s)^2 >= 0"},
    {"gas", "electron_abundance", false, 0, true, kInf, "n_e / n_H >= 0"},
    {"gas", "metals", false, 0, true, 1.0000001, "element mass fractions in [0, 1]"},
};

}  // namespace

std::span<const GalaxyFieldRange> galaxy_field_ranges() {
  return kRanges;
}

const GalaxyFieldRange* galaxy_field_range(std::string_view set, std::string_view name) {
  for (const auto& r : kRanges)
    if (set == r.set && name == r.name) return &r;
  return nullptr;
}

}  // namespace ifusim
