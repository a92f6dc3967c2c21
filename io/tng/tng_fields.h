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
  // A star's formation time (scale factor) at most the snapshot's; wind cells (<= 0) are dropped
  // before any check.
  formed_by_snapshot,
};

struct FieldRule {
  Species species;
  const char* dataset;  // in PartType0 / PartType4
  int components;
  bool required;
  Bounds bounds;
  Conversion conversion;
  double target_unit_cgs;    // cgs value of one target unit; 0 = dimensionless (to_cgs must be 0)
  const char* target;        // FieldSpec name in Stars / Gas (data/galaxy_data.h)
  UnitAttributes tng_units;  // the data specification's attributes of the dataset
};

const std::vector<FieldRule>& field_table();

// The table's rule for a dataset of a species; throws std::logic_error when there is none.
const FieldRule& field_rule(Species species, std::string_view dataset);

const char* part_type_group(Species species);  // "PartType4" / "PartType0"

}  // namespace ifusim::tng
