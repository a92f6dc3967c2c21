#include "io/tng/tng_fields.h"

#include <stdexcept>
#include <string>

namespace ifusim::tng {

namespace {

std::vector<FieldRule> tng_fields() {
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

// A rule whose units the reader takes from the file alone (the table records none).
constexpr UnitAttributes kFromFile{0.0, 0.0, 0.0};

// SWIFT snapshots (COLIBRE, FLAMINGO, EAGLE-XL): SWIFT documentation, "Snapshots" page
// (swift.strw.leidenuniv.nl/docs/Snapshots): every dataset carries "Conversion factor to CGS (not
// including cosmological corrections)", "a-scale exponent" and "h-scale exponent" (always 0:
// SWIFT's units have no h). Velocities are peculiar velocities (a-scale exponent 0, no sqrt(a)).
// Names of the COLIBRE / EAGLE-XL output lists (SWIFT's src/stars/*/stars_io.h, hydro_io.h).
std::vector<FieldRule> swift_fields() {
  using S = Species;
  using C = Conversion;
  using B = Bounds;
  constexpr double kKpc = kCmPerKpc, kMsun = kSolarMassG, kKms = 1.0e5;
  constexpr double kMsunPerYr = kSolarMassG / kJulianYearS;
  return {
      {S::stars, "Coordinates", 3, true, B::any, C::position, kKpc, "position_kpc", kFromFile},
      {S::stars, "Velocities", 3, true, B::any, C::velocity, kKms, "velocity_kms", kFromFile},
      {S::stars, "InitialMasses", 1, true, B::positive, C::scale, kMsun, "initial_mass_msun",
       kFromFile},
      {S::stars, "Masses", 1, true, B::positive, C::scale, kMsun, "mass_msun", kFromFile},
      {S::stars, "MetalMassFractions", 1, true, B::mass_fraction, C::scale, 0.0, "metallicity",
       kFromFile},
      {S::stars, "BirthScaleFactors", 1, true, B::formed_by_snapshot, C::formation_time_to_age, 0.0,
       "age_gyr", kFromFile},
      // SWIFT's stellar SmoothingLengths are the SPH kernel's h over the star's neighbours, not
      // TNG's 32-nearest-stars radius; both are taken as the star's smoothing length.
      {S::stars, "SmoothingLengths", 1, false, B::positive, C::scale, kKpc, "smoothing_length_kpc",
       kFromFile},
      {S::gas, "Coordinates", 3, true, B::any, C::position, kKpc, "position_kpc", kFromFile},
      {S::gas, "Velocities", 3, true, B::any, C::velocity, kKms, "velocity_kms", kFromFile},
      {S::gas, "Masses", 1, true, B::positive, C::scale, kMsun, "mass_msun", kFromFile},
      {S::gas, "Densities", 1, false, B::any, C::scale, kMsun / (kKpc * kKpc * kKpc),
       "density_msun_per_kpc3", kFromFile},
      {S::gas, "InternalEnergies", 1, false, B::any, C::scale, kKms * kKms,
       "internal_energy_km2_s2", kFromFile},
      {S::gas, "MetalMassFractions", 1, false, B::mass_fraction, C::scale, 0.0, "metallicity",
       kFromFile},
      {S::gas, "StarFormationRates", 1, false, B::any, C::star_formation_rate, kMsunPerYr,
       "sfr_msun_per_yr", kFromFile},
  };
}

// EAGLE public particle data (McAlpine et al. 2016, A&C 15, 72; The EAGLE team 2017,
// arXiv:1706.09899, sect. 2 and table 3): datasets carry "CGSConversionFactor",
// "aexp-scale-exponent" and "h-scale-exponent"; velocities are stored as Gadget's, peculiar
// times a^-1/2 (aexp-scale-exponent 0.5).
std::vector<FieldRule> eagle_fields() {
  using S = Species;
  using C = Conversion;
  using B = Bounds;
  constexpr double kKpc = kCmPerKpc, kMsun = kSolarMassG, kKms = 1.0e5;
  constexpr double kMsunPerYr = kSolarMassG / kJulianYearS;
  return {
      {S::stars, "Coordinates", 3, true, B::any, C::position, kKpc, "position_kpc", kFromFile},
      {S::stars, "Velocity", 3, true, B::any, C::velocity, kKms, "velocity_kms", kFromFile},
      {S::stars, "InitialMass", 1, true, B::positive, C::scale, kMsun, "initial_mass_msun",
       kFromFile},
      {S::stars, "Mass", 1, true, B::positive, C::scale, kMsun, "mass_msun", kFromFile},
      {S::stars, "SmoothedMetallicity", 1, true, B::mass_fraction, C::scale, 0.0, "metallicity",
       kFromFile},
      {S::stars, "StellarFormationTime", 1, true, B::formed_by_snapshot, C::formation_time_to_age,
       0.0, "age_gyr", kFromFile},
      {S::gas, "Coordinates", 3, true, B::any, C::position, kKpc, "position_kpc", kFromFile},
      {S::gas, "Velocity", 3, true, B::any, C::velocity, kKms, "velocity_kms", kFromFile},
      {S::gas, "Mass", 1, true, B::positive, C::scale, kMsun, "mass_msun", kFromFile},
      {S::gas, "Density", 1, false, B::any, C::scale, kMsun / (kKpc * kKpc * kKpc),
       "density_msun_per_kpc3", kFromFile},
      {S::gas, "InternalEnergy", 1, false, B::any, C::scale, kKms * kKms, "internal_energy_km2_s2",
       kFromFile},
      {S::gas, "SmoothedMetallicity", 1, false, B::mass_fraction, C::scale, 0.0, "metallicity",
       kFromFile},
      {S::gas, "StarFormationRate", 1, false, B::any, C::scale, kMsunPerYr, "sfr_msun_per_yr",
       kFromFile},
  };
}

// Gadget-4 / AREPO / GIZMO HDF5 (Springel et al. 2021, MNRAS 506, 2871, and the Gadget-4 manual,
// "Snapshot file format"; GIZMO users guide, "Snapshot & initial condition files"): no unit
// attributes, the header's unit system (default 1 ckpc/h, 1e10 Msun/h, 1 km/s), comoving
// coordinates a^1 h^-1, velocities sqrt(a) * peculiar (stored u: v = u sqrt(a)), masses h^-1.
// GIZMO's StellarFormationTime is the scale factor of formation in a cosmological run;
// Metallicity's column 0 is the total metal mass fraction. Neither code stores a star's initial
// mass: its current mass stands for it (mass lost by stellar evolution is not given back).
// StarFormationRate is in Msun/yr whatever the unit system (GIZMO users guide).
std::vector<FieldRule> gadget_fields() {
  using S = Species;
  using C = Conversion;
  using B = Bounds;
  using D = UnitDimensions;
  constexpr double kKpc = kCmPerKpc, kMsun = kSolarMassG, kKms = 1.0e5;
  constexpr double kMsunPerYr = kSolarMassG / kJulianYearS;
  constexpr UnitAttributes kLength{1.0, -1.0, 0.0}, kVelocity{0.5, 0.0, 0.0}, kMass{0.0, -1.0, 0.0},
      kDensity{-3.0, 2.0, 0.0}, kEnergy{0.0, 0.0, 0.0}, kSfr{0.0, 0.0, kMsunPerYr},
      kNone{0.0, 0.0, 0.0};
  constexpr D kL{1, 0, 0}, kV{0, 0, 1}, kM{0, 1, 0}, kRho{-3, 1, 0}, kU{0, 0, 2};
  return {
      {S::stars, "Coordinates", 3, true, B::any, C::position, kKpc, "position_kpc", kLength, kL},
      {S::stars, "Velocities", 3, true, B::any, C::velocity, kKms, "velocity_kms", kVelocity, kV},
      {S::stars, "Masses", 1, true, B::positive, C::scale, kMsun, "initial_mass_msun", kMass, kM},
      {S::stars, "Masses", 1, true, B::positive, C::scale, kMsun, "mass_msun", kMass, kM},
      {S::stars,
       "Metallicity",
       1,
       true,
       B::mass_fraction,
       C::scale,
       0.0,
       "metallicity",
       kNone,
       {},
       true},
      {S::stars, "StellarFormationTime", 1, true, B::formed_by_snapshot, C::formation_time_to_age,
       0.0, "age_gyr", kNone},
      {S::gas, "Coordinates", 3, true, B::any, C::position, kKpc, "position_kpc", kLength, kL},
      {S::gas, "Velocities", 3, true, B::any, C::velocity, kKms, "velocity_kms", kVelocity, kV},
      {S::gas, "Masses", 1, true, B::positive, C::scale, kMsun, "mass_msun", kMass, kM},
      {S::gas, "Density", 1, false, B::any, C::scale, kMsun / (kKpc * kKpc * kKpc),
       "density_msun_per_kpc3", kDensity, kRho},
      {S::gas, "InternalEnergy", 1, false, B::any, C::scale, kKms * kKms, "internal_energy_km2_s2",
       kEnergy, kU},
      {S::gas, "ElectronAbundance", 1, false, B::any, C::scale, 0.0, "electron_abundance", kNone},
      {S::gas,
       "Metallicity",
       1,
       false,
       B::mass_fraction,
       C::scale,
       0.0,
       "metallicity",
       kNone,
       {},
       true},
      {S::gas, "StarFormationRate", 1, false, B::any, C::scale, kMsunPerYr, "sfr_msun_per_yr",
       kSfr},
  };
}

}  // namespace

const SnapshotFormat& tng_format() {
  static const SnapshotFormat f{.name = "tng",
                                .title = "IllustrisTNG",
                                .fields = tng_fields(),
                                .to_cgs_attribute = "to_cgs",
                                .a_exponent_attribute = "a_scaling",
                                .h_exponent_attribute = "h_scaling",
                                .wind_cells = true,
                                .scale_factor = {{"Header", "Time"}},
                                .hubble = {{"Header", "HubbleParam"}},
                                .omega_matter = {{"Header", "Omega0"}},
                                .omega_lambda = {{"Header", "OmegaLambda"}},
                                .box_size = {{"Header", "BoxSize"}},
                                .redshift = {{"Header", "Redshift"}}};
  return f;
}

const SnapshotFormat& swift_format() {
  static const SnapshotFormat f{
      .name = "swift",
      .title = "SWIFT",
      .fields = swift_fields(),
      .to_cgs_attribute = "Conversion factor to CGS (not including cosmological corrections)",
      .a_exponent_attribute = "a-scale exponent",
      .h_exponent_attribute = "h-scale exponent",
      .unit_one_dimensionless = true,
      .scale_factor = {{"Header", "Scale-factor"}, {"Cosmology", "Scale-factor"}},
      .hubble = {{"Cosmology", "h"}},
      .omega_matter = {{"Cosmology", "Omega_m"}},
      .omega_lambda = {{"Cosmology", "Omega_lambda"}},
      .box_size = {{"Header", "BoxSize"}},
      .redshift = {{"Header", "Redshift"}, {"Cosmology", "Redshift"}}};
  return f;
}

const SnapshotFormat& eagle_format() {
  static const SnapshotFormat f{.name = "eagle",
                                .title = "EAGLE",
                                .fields = eagle_fields(),
                                .to_cgs_attribute = "CGSConversionFactor",
                                .a_exponent_attribute = "aexp-scale-exponent",
                                .h_exponent_attribute = "h-scale-exponent",
                                .unit_one_dimensionless = true,
                                .scale_factor = {{"Header", "ExpansionFactor"}, {"Header", "Time"}},
                                .hubble = {{"Header", "HubbleParam"}},
                                .omega_matter = {{"Header", "Omega0"}},
                                .omega_lambda = {{"Header", "OmegaLambda"}},
                                .box_size = {{"Header", "BoxSize"}},
                                .redshift = {{"Header", "Redshift"}}};
  return f;
}

const SnapshotFormat& gadget_format() {
  // Gadget-4 writes its unit system and cosmology in the "Parameters" group, GIZMO and AREPO in
  // the Header (GIZMO: "UnitLength_In_CGS", FIRE's public snapshots: "Omega_Matter"). Without
  // one, Gadget's defaults: 1 ckpc/h, 1e10 Msun/h, 1 km/s.
  static const SnapshotFormat f{
      .name = "gadget",
      .title = "Gadget-4/AREPO/GIZMO",
      .fields = gadget_fields(),
      .unit_source = UnitSource::header_unit_system,
      .scale_factor = {{"Header", "Time"}},
      .hubble = {{"Header", "HubbleParam"}, {"Parameters", "HubbleParam"}},
      .omega_matter = {{"Header", "Omega0"}, {"Header", "Omega_Matter"}, {"Parameters", "Omega0"}},
      .omega_lambda = {{"Header", "OmegaLambda"},
                       {"Header", "Omega_Lambda"},
                       {"Parameters", "OmegaLambda"}},
      .box_size = {{"Header", "BoxSize"}},
      .redshift = {{"Header", "Redshift"}},
      .unit_length_cm = {{"Header", "UnitLength_in_cm"},
                         {"Parameters", "UnitLength_in_cm"},
                         {"Header", "UnitLength_In_CGS"}},
      .unit_mass_g = {{"Header", "UnitMass_in_g"},
                      {"Parameters", "UnitMass_in_g"},
                      {"Header", "UnitMass_In_CGS"}},
      .unit_velocity_cm_s = {{"Header", "UnitVelocity_in_cm_per_s"},
                             {"Parameters", "UnitVelocity_in_cm_per_s"},
                             {"Header", "UnitVelocity_In_CGS"}},
      .default_unit_length_cm = kKpcCm,
      .default_unit_mass_g = 1.989e43,
      .default_unit_velocity_cm_s = kKmCm};
  return f;
}

std::vector<const SnapshotFormat*> snapshot_formats() {
  return {&tng_format(), &swift_format(), &eagle_format(), &gadget_format()};
}

const SnapshotFormat* format_named(std::string_view name) {
  for (const SnapshotFormat* f : snapshot_formats())
    if (name == f->name) return f;
  return nullptr;
}

const FieldRule* SnapshotFormat::rule_for(Species species, std::string_view target) const {
  for (const auto& r : fields)
    if (r.species == species && target == r.target) return &r;
  return nullptr;
}

const std::vector<FieldRule>& field_table() {
  return tng_format().fields;
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
