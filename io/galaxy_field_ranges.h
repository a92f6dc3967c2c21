#pragma once
// What each input field of a galaxy may hold, in ifusim's units (data/galaxy_data.h), whichever
// way the galaxy arrives: handed over in memory (io/host_galaxy.h) or read from a RUBIX file
// (io/rubix). A negative or zero mass, a metallicity outside [0, 1) or a negative age would
// otherwise give a cube that is silently wrong (negative light, clamped templates). The TNG
// reader checks the stored values before conversion, with the same limits (io/tng/tng_fields.h).
#include <cmath>
#include <span>
#include <string_view>

namespace ifusim {

struct GalaxyFieldRange {
  const char* set;  // "stars" or "gas"
  const char* name;
  bool required;  // whether a run needs it
  double low;     // values must be > low (or >= low when low_inclusive) and < high
  bool low_inclusive;
  double high;
  const char* meaning;  // for the message: "masses in Msun > 0"

  bool holds(double v) const {
    return std::isfinite(v) && (low_inclusive ? v >= low : v > low) && v < high;
  }
};

std::span<const GalaxyFieldRange> galaxy_field_ranges();

// The range of field `name` of `set`, or nullptr when the table has none (a field any finite
// value suits, such as a temperature a reader derives).
const GalaxyFieldRange* galaxy_field_range(std::string_view set, std::string_view name);

}  // namespace ifusim
