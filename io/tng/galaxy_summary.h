#pragma once
// What a run would ingest, in numbers (`ifusim inspect`): counts, masses, centre, ages.
#include <array>
#include <nlohmann/json.hpp>
#include <string>

#include "data/galaxy_data.h"
#include "io/tng/tng_reader.h"

namespace ifusim {

struct GalaxySummary {
  std::string layout;  // "cutout", "snapshot", "file" (a SWIFT, EAGLE or Gadget file), "rubix"
  std::string format;  // "tng", "swift", "eagle", "gadget", "rubix"
  std::string simulation;
  int snapshot = -1;
  long long subhalo_id = -1;
  double redshift = 0, scale_factor = 1, hubble_param = 0;
  std::size_t n_stars = 0, n_wind_dropped = 0, n_gas = 0, n_nonfinite_dropped = 0;
  double stellar_mass_msun = 0;  // current
  double stellar_initial_mass_msun = 0;
  double gas_mass_msun = 0;
  std::array<double, 3> center_kpc{0, 0, 0};  // physical, box frame
  std::string center_method;
  double stellar_half_mass_radius_kpc = 0;
  double mass_weighted_age_gyr = 0;      // weighted by current mass
  double median_age_gyr = 0;             // mean of the two middle ages for an even count
  double mass_weighted_metallicity = 0;  // weighted by current mass
};

// Sums in double over the whole (sharded) arrays.
GalaxySummary summarize(const GalaxyData& data, const TngIngestReport& report);
nlohmann::json to_json(const GalaxySummary& summary);
std::string to_table(const GalaxySummary& summary);

}  // namespace ifusim
