#pragma once
// Air and vacuum wavelengths (Angstrom). The IAU standard conversion as given by Morton 2000
// (ApJS 130, 403, eq. 8) with the refractive index of Edlen 1966 / Birch & Downs 1994 as used by
// SDSS and VALD: lambda_air = lambda_vac / n(s), s = 1e4 / lambda_vac,
// n = 1 + 8.34254e-5 + 2.406147e-2 / (130 - s^2) + 1.5998e-4 / (38.9 - s^2).
// Below 2000 A (the UV, where "air" wavelengths are not used) wavelengths are left unchanged.
#include <string>

#include "data/hd.h"

namespace ifusim {

IFUSIM_HD inline double refractive_index_of_air(double vacuum_angstrom) {
  const double s2 = (1e4 / vacuum_angstrom) * (1e4 / vacuum_angstrom);
  return 1.0 + 8.34254e-5 + 2.406147e-2 / (130.0 - s2) + 1.5998e-4 / (38.9 - s2);
}

IFUSIM_HD inline double air_from_vacuum(double vacuum_angstrom) {
  return vacuum_angstrom < 2000.0 ? vacuum_angstrom
                                  : vacuum_angstrom / refractive_index_of_air(vacuum_angstrom);
}

// d(air) / d(vacuum), the derivative of air_from_vacuum (for the emission lines' gradients,
// docs/gradients.md): 1 / n - lambda n'(lambda) / n^2, with n'(lambda) = dn/ds x (-s / lambda).
IFUSIM_HD inline double air_from_vacuum_slope(double vacuum_angstrom) {
  if (vacuum_angstrom < 2000.0) return 1.0;
  const double s = 1e4 / vacuum_angstrom, s2 = s * s;
  const double a = 130.0 - s2, b = 38.9 - s2;
  const double dn_ds = 2.406147e-2 * 2.0 * s / (a * a) + 1.5998e-4 * 2.0 * s / (b * b);
  const double n = refractive_index_of_air(vacuum_angstrom);
  return 1.0 / n + s * dn_ds / (n * n);  // -lambda x dn/ds x (-s / lambda) = s dn/ds
}

// Inverse by fixed-point iteration (n varies slowly: three steps reach 1e-12 relative).
inline double vacuum_from_air(double air_angstrom) {
  if (air_angstrom < 2000.0) return air_angstrom;
  double vacuum = air_angstrom;
  for (int i = 0; i < 4; ++i) vacuum = air_angstrom * refractive_index_of_air(vacuum);
  return vacuum;
}

// A wavelength in `from` medium ("air" or "vacuum") expressed in `to` medium.
inline double convert_wavelength(double angstrom, const std::string& from, const std::string& to) {
  if (from == to || from.empty() || to.empty()) return angstrom;
  return to == "air" ? air_from_vacuum(angstrom) : vacuum_from_air(angstrom);
}

}  // namespace ifusim
