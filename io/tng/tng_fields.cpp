#include "io/tng/tng_fields.h"

#include <stdexcept>
#include <string>

namespace ifusim::tng {

const std::vector<FieldRule>& field_table() {
  using S = Species;
  using C = Conversion;
  using B = Bounds;
  constexpr double kMsunPerKpc3 = kMsunG / (kKpcCm * kKpcCm * kKpcCm);
  constexpr double kKm2S2 = kKmCm * kKmCm;
  constexpr double kMsunPerYr = kMsunG / kJulianYearS;
  // The data specification's units: ckpc/h, km sqrt(a)/s, 1e10 Msun/h,
  // (1e10 Msun/h)/(ckpc/h)^3, (km/s)^2 and Msun/yr; 1.989e43 g is TNG's UnitMass_in_g, written
  // as the files have it.
  constexpr double kUnitMassG = 1.989e43;
  constexpr UnitAttributes kLength{1.0, -1.0, kKpcCm};
  constexpr UnitAttributes kVelocity{0.5, 0.0, kKmCm};
  constexpr UnitAttributes kMass{0.0, -1.0, kUnitMassG};
  constexpr UnitAttributes kDensity{-3.0, 2.0, kUnitMassG / (kKpcCm * kKpcCm * kKpcCm)};
  constexpr UnitAttributes kEnergy{0.0, 0.0, kKm2S2};
  constexpr UnitAttributes kSfr{0.0, 0.0, kMsunPerYr};
  constexpr UnitAttributes kNone{0.0, 0.0, 0.0};
  static const std::vector<FieldRule> table = {
      {S::stars, "Coordinates", 3, true, B::any, C::position, kKpcCm, "position_kpc", kLength},
      {S::stars, "Velocities", 3, true, B::any, C::velocity, kKmCm, "velocity_kms", kVelocity},
      {S::stars, "GFM_InitialMass", 1, true, B::positive, C::scale, kMsunG, "initial_mass_msun",
       kMass},
      {S::stars, "Masses", 1, true, B::positive, C::scale, kMsunG, "mass_msun", kMass},
      {S::stars, "GFM_Metallicity", 1, true, B::mass_fraction, C::scale, 0.0, "metallicity", kNone},
      {S::stars, "GFM_StellarFormationTime", 1, true, B::formed_by_snapshot,
       C::formation_time_to_age, 0.0, "age_gyr", kNone},
      // Optional: the comoving radius (ckpc/h, scaled as Coordinates) of the sphere that holds
      // the star's 32 (+-1) nearest stars, as the TNG data specification defines StellarHsml.
      {S::stars, "StellarHsml", 1, false, B::any, C::scale, kKpcCm, "smoothing_length_kpc",
       kLength},
      {S::gas, "Coordinates", 3, true, B::any, C::position, kKpcCm, "position_kpc", kLength},
      {S::gas, "Velocities", 3, true, B::any, C::velocity, kKmCm, "velocity_kms", kVelocity},
      {S::gas, "Masses", 1, true, B::positive, C::scale, kMsunG, "mass_msun", kMass},
      {S::gas, "Density", 1, false, B::any, C::scale, kMsunPerKpc3, "density_msun_per_kpc3",
       kDensity},
      {S::gas, "InternalEnergy", 1, false, B::any, C::scale, kKm2S2, "internal_energy_km2_s2",
       kEnergy},
      {S::gas, "ElectronAbundance", 1, false, B::any, C::scale, 0.0, "electron_abundance", kNone},
      {S::gas, "GFM_Metallicity", 1, false, B::mass_fraction, C::scale, 0.0, "metallicity", kNone},
      {S::gas, "GFM_Metals", 10, false, B::any, C::scale, 0.0, "metals", kNone},
      {S::gas, "StarFormationRate", 1, false, B::any, C::scale, kMsunPerYr, "sfr_msun_per_yr",
       kSfr},
  };
  return table;
}

const FieldRule& field_rule(Species species, std::string_view dataset) {
  for (const auto& r : field_table())
    if (r.species == species && dataset == r.dataset) return r;
  throw std::logic_error("tng field table: no " + std::string(part_type_group(species)) + "/" +
                         std::string(dataset));
}

const char* part_type_group(Species species) {
  return species == Species::stars ? "PartType4" : "PartType0";
}

}  // namespace ifusim::tng
