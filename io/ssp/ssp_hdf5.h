#pragma once
// The project's own SSP grid file (layout in docs/ssp_format.md): /age_gyr, /metallicity,
// /wavelength_angstrom (float64), /flux (n_age, n_z, n_wave) float32 in L_sun / A per M_sun of
// initial mass, root attributes name, source, z_solar, wavelength_medium, flux_unit,
// metallicity_definition, format_version, and the resolution: a root attribute
// resolution_fwhm_angstrom when constant, else the group /resolution with wavelength_angstrom and
// fwhm_angstrom (float64, rest frame).
#include <string>

#include "data/ssp_grid.h"

namespace ifusim {

inline constexpr const char* kSspFluxUnit = "L_sun / Angstrom / M_sun";
inline constexpr const char* kSspMetallicityDefinition = "mass fraction Z";
inline constexpr int kSspFormatVersion = 1;

SspGrid read_ssp_hdf5(const std::string& path);
// Writes to `path` + ".tmp" and renames at the end, so a failure leaves no partial file.
void write_ssp_hdf5(const SspGrid& grid, const std::string& path);

// Checks the invariants every reader guarantees (non-empty strictly ascending axes, flux size,
// finite flux, positive resolution and z_solar, medium "air" or "vacuum"); InputError names
// `where` and the failed check.
void validate_ssp_grid(const SspGrid& grid, const std::string& where);

}  // namespace ifusim
