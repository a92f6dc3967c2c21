#include "io/tng/tng_fields.h"

namespace ifusim::tng {

const std::vector<FieldRule>& field_table() {
  using S = Species;
  using C = Conversion;
  constexpr double kMsunPerKpc3 = kMsunG / (kKpcCm * kKpcCm * kKpcCm);
  constexpr double kKm2S2 = kKmCm * kKmCm;
  constexpr double kMsunPerYr = kMsunG / kJulianYearS;
  static const std::vector<FieldRule> table = {
      {S::stars, "Coordinates", 3, true, C::position, kKpcCm, "position_kpc"},
      {S::stars, "Velocities", 3, true, C::velocity, kKmCm, "velocity_kms"},
      {S::stars, "GFM_InitialMass", 1, true, C::scale, kMsunG, "initial_mass_msun"},
      {S::stars, "Masses", 1, true, C::scale, kMsunG, "mass_msun"},
      {S::stars, "GFM_Metallicity", 1, true, C::scale, 0.0, "metallicity"},
      {S::stars, "GFM_StellarFormationTime", 1, true, C::formation_time_to_age, 0.0, "age_gyr"},
      // Optional: the comoving radius (ckpc/h, scaled as Coordinates) of the sphere that holds
      // the star's 32 (+-1) nearest stars, as the TNG data specification defines StellarHsml.
      {S::stars, "StellarHsml", 1, false, C::scale, kKpcCm, "smoothing_length_kpc"},
      {S::gas, "Coordinates", 3, true, C::position, kKpcCm, "position_kpc"},
      {S::gas, "Velocities", 3, true, C::velocity, kKmCm, "velocity_kms"},
      {S::gas, "Masses", 1, true, C::scale, kMsunG, "mass_msun"},
      {S::gas, "Density", 1, false, C::scale, kMsunPerKpc3, "density_msun_per_kpc3"},
      {S::gas, "InternalEnergy", 1, false, C::scale, kKm2S2, "internal_energy_km2_s2"},
      {S::gas, "ElectronAbundance", 1, false, C::scale, 0.0, "electron_abundance"},
      {S::gas, "GFM_Metallicity", 1, false, C::scale, 0.0, "metallicity"},
      {S::gas, "GFM_Metals", 10, false, C::scale, 0.0, "metals"},
      {S::gas, "StarFormationRate", 1, false, C::scale, kMsunPerYr, "sfr_msun_per_yr"},
  };
  return table;
}

const char* part_type_group(Species species) {
  return species == Species::stars ? "PartType4" : "PartType0";
}

}  // namespace ifusim::tng
