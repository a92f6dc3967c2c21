#pragma once
// The one table of IllustrisTNG particle fields ifusim ingests: which dataset fills which
// GalaxyData field, in which unit, and how. Units come from each dataset's own attributes
// (physical cgs = value * a^a_scaling * h^h_scaling * to_cgs, to_cgs = 0 meaning dimensionless;
// TNG data specification, Nelson et al. 2019, ComAC 6, 2), never from a per-field constant.
// The table also records the specification's attributes of each dataset: what the synthetic
// generator writes (make-galaxy) and what its in-memory source (synthetic_source.h) converts from.
#include <string_view>
#include <vector>

#include "core/constants.h"  // kJulianYearS

namespace ifusim::tng {

// IllustrisTNG's own unit definitions: values of its file format (the snapshots' Header), not
// the physical constants of core/constants.h. kKpcCm is TNG's UnitLength_in_cm (1 ckpc/h) =
// 3.085678e21, not the IAU parsec's kCmPerKpc; kMsunG is its UnitMass_in_g / 1e10 (1e10 Msun/h)
// = 1.989e33, not the nominal kSolarMassG. With them 1 ckpc/h and 1e10 Msun/h convert without
// rounding noise. Star formation rates are stored in these Msun per Julian year.
inline constexpr double kKpcCm = 3.085678e21;
inline constexpr double kMsunG = 1.989e33;
inline constexpr double kKmCm = 1.0e5;
inline constexpr double kJulianYearS = ifusim::kJulianYearS;

enum class Species { stars, gas };  // PartType4, PartType0

// A dataset's unit attributes: physical cgs = value * a^a_scaling * h^h_scaling * to_cgs;
// to_cgs = 0 marks a dimensionless field.
struct UnitAttributes {
  double a_scaling = 0, h_scaling = 0, to_cgs = 0;
};

// How a value becomes its GalaxyData value.
enum class Conversion {
  scale,                  // physical cgs / target unit
  position,               // comoving box position: wrapped around the centre, then scaled
  velocity,               // Velocities * sqrt(a) (a_scaling 0.5) is peculiar; minus the galaxy's
  formation_time_to_age,  // scale factor of formation -> age at the snapshot's epoch
  // physical cgs / target unit, negative values 0: SWIFT's EAGLE-like and COLIBRE star
  // formation store minus the scale factor at which gas last formed stars in a cell that does
  // not now (SWIFT documentation, "EAGLE star formation" / "Snapshots").
  star_formation_rate,
};

// What every stored value of a dataset must be. The reader (tng_reader.cpp) checks each row it
// reads, and a value outside is an InputError naming the file, the dataset, the count and the
// first row: a negative or zero mass, a metallicity below 0, a star formed after its snapshot
// would otherwise give a cube that is silently wrong (negative light, clamped templates). The
// same limits as a galaxy handed over in memory (io/host_galaxy.cpp).
enum class Bounds {
  any,
  positive,       // > 0: masses
  mass_fraction,  // in [0, 1): metallicities
  // A star's formation time (scale factor) in (0, the snapshot's]; TNG's wind cells (<= 0) are
  // dropped before any check.
  formed_by_snapshot,
};

// Exponents of the header's unit system (UnitLength_in_cm, UnitMass_in_g,
// UnitVelocity_in_cm_per_s) in a dataset's unit, for formats whose datasets carry no unit
// attributes (Gadget-4, AREPO, GIZMO: SnapshotFormat::unit_source header_unit_system).
struct UnitDimensions {
  int length = 0, mass = 0, velocity = 0;
};

struct FieldRule {
  Species species;
  const char* dataset;  // in the format's star / gas group
  int components;
  bool required;
  Bounds bounds;
  Conversion conversion;
  double target_unit_cgs;    // cgs value of one target unit; 0 = dimensionless (to_cgs must be 0)
  const char* target;        // FieldSpec name in Stars / Gas (data/galaxy_data.h)
  UnitAttributes tng_units;  // the data specification's attributes of the dataset
  // Header-unit formats: the unit's exponents of the header's unit system (tng_units then holds
  // its a and h exponents, and its to_cgs in the format's default units).
  UnitDimensions dimensions{};
  // The dataset has `components` or more columns and the field is its first (GIZMO's Metallicity:
  // column 0 the total metal mass fraction, then the species; Hopkins, GIZMO users guide).
  bool first_columns = false;

  constexpr FieldRule(Species species_, const char* dataset_, int components_, bool required_,
                      Bounds bounds_, Conversion conversion_, double target_unit_cgs_,
                      const char* target_, UnitAttributes units_, UnitDimensions dimensions_ = {},
                      bool first_columns_ = false)
      : species(species_),
        dataset(dataset_),
        components(components_),
        required(required_),
        bounds(bounds_),
        conversion(conversion_),
        target_unit_cgs(target_unit_cgs_),
        target(target_),
        tng_units(units_),
        dimensions(dimensions_),
        first_columns(first_columns_) {}
};

const std::vector<FieldRule>& field_table();  // IllustrisTNG's (tng_format().fields)

// Where a format keeps its units.
enum class UnitSource {
  dataset_attributes,  // every dataset carries its conversion factor and a, h exponents
  header_unit_system,  // the header's UnitLength_in_cm etc., with a, h exponents by convention
};

// An attribute of the file: the group that holds it ("Header", "Cosmology") and its name.
struct AttributePath {
  const char* group;
  const char* name;
};

// Everything the one table-driven reader (tng_reader.cpp) needs to know of a snapshot format:
// its groups, its field table, where its units are and what its header calls things. Each entry
// lists the alternatives the reader tries in order.
struct SnapshotFormat {
  const char* name;   // the input.format value: "tng", "swift", "eagle", "gadget"
  const char* title;  // for messages: "IllustrisTNG", "SWIFT", ...
  const char* star_group = "PartType4";
  const char* gas_group = "PartType0";
  std::vector<FieldRule> fields;
  UnitSource unit_source = UnitSource::dataset_attributes;
  // dataset_attributes: the names of a dataset's attributes (physical cgs = value * a^a * h^h
  // * to_cgs).
  const char* to_cgs_attribute = "";
  const char* a_exponent_attribute = "";
  const char* h_exponent_attribute = "";
  // A dimensionless dataset says to_cgs = 1 (SWIFT, EAGLE), besides TNG's 0.
  bool unit_one_dimensionless = false;
  // A star whose formation time is <= 0 is a wind cell, dropped (TNG); elsewhere an error.
  bool wind_cells = false;
  // The header: scale factor, h (absent: 1, SWIFT has no h in its units), Omega_m,
  // Omega_Lambda, the box side (comoving, Coordinates' units), the redshift (absent: 1/a - 1).
  std::vector<AttributePath> scale_factor{}, hubble{}, omega_matter{}, omega_lambda{}, box_size{},
      redshift{};
  // header_unit_system: the header's unit system, alternatives in order; absent: the default.
  std::vector<AttributePath> unit_length_cm{}, unit_mass_g{}, unit_velocity_cm_s{};
  double default_unit_length_cm = 0, default_unit_mass_g = 0, default_unit_velocity_cm_s = 0;

  // The table's rule for a dataset's target field of a species, or nullptr.
  const FieldRule* rule_for(Species species, std::string_view target) const;
  const char* group(Species species) const {
    return species == Species::stars ? star_group : gas_group;
  }
};

const SnapshotFormat& tng_format();
const SnapshotFormat& swift_format();
const SnapshotFormat& eagle_format();
const SnapshotFormat& gadget_format();
// Every format, in the order detection tries them.
std::vector<const SnapshotFormat*> snapshot_formats();
// The format of an input.format name; nullptr for none.
const SnapshotFormat* format_named(std::string_view name);

// The table's rule for a dataset of a species; throws std::logic_error when there is none.
const FieldRule& field_rule(Species species, std::string_view dataset);

const char* part_type_group(Species species);  // "PartType4" / "PartType0"

}  // namespace ifusim::tng
