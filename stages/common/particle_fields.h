#pragma once
// The particle fields one stage derives and others read: typed keys into a block's
// Stars/Gas::derived (data/derived_fields.h). A field only its own stage uses keeps its key in
// that stage's folder; these are shared.
#include <cstdint>

#include "data/derived_fields.h"

namespace ifusim::fields {

// The spaxel holding each star or gas cell on the run's grid (margin included), -1 outside:
// the spaxel stage (stages/spaxel_grid).
inline constexpr FieldKey<std::int32_t> stars_spaxel_index{"stars", "spaxel_index", ""};
inline constexpr FieldKey<std::int32_t> gas_spaxel_index{"gas", "spaxel_index", ""};
// With smoothing "kernel", the radius of the sphere of a gas cell's volume,
// (3 m / (4 pi rho))^(1/3): the spaxel stage (stages/spaxel_grid/smoothing.h).
inline constexpr FieldKey<float> gas_smoothing_length_kpc{"gas", "smoothing_length_kpc", "kpc"};
// A_V of the gas in front of each star or gas cell: the dust stage (stages/dust).
inline constexpr FieldKey<float> stars_dust_av{"stars", "dust_av", "mag"};
inline constexpr FieldKey<float> gas_dust_av{"gas", "dust_av", "mag"};

}  // namespace ifusim::fields
