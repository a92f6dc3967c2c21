#pragma once
// Reader for pyPipe3D SSP template files (Lacerda et al. 2022; Sanchez et al. 2016): one FITS
// image of N spectra x n_pix pixels. Row i's age and metallicity come from header keyword
// NAMEi = "spec_ssp_<age>_z<Z digits>.spec", NOT from the row order, and row i was divided by
// NORMi (the SSP's luminosity per unit initial stellar mass at WAVENORM, L_sun / A / M_sun), so
// the reader multiplies it back.
#include <string>

#include "data/ssp_grid.h"

namespace ifusim {

// MaStar stellar library resolving power R ~ 1800 (Yan et al. 2019, ApJ 883, 175), evaluated at
// the pyPipe3D normalisation wavelength 5000 A: FWHM = 5000 / 1800 = 2.78 A. Used when the file
// has no FWHM keyword. MaStar's resolution varies with wavelength; this is a single
// representative value for the whole grid.
inline constexpr double kMastarResolvingPower = 1800.0;
// Charlot & Bruzual (2019) models: solar metallicity Z = 0.017 (the middle node z017 of the
// MaStar_CB19 grid).
inline constexpr double kCb19SolarMetallicity = 0.017;

struct PyPipe3DName {
  double age_gyr = 0.0;
  double metallicity = 0.0;  // mass fraction
};
// "spec_ssp_12.25_z017.spec" -> 12.25 Gyr, Z = 0.017. The age may carry a "Gyr" or "Myr"
// suffix (bare numbers are Gyr). The metallicity digits are the decimals of Z after "0.":
// z0005 -> 0.0005, z017 -> 0.017, z040 -> 0.040 (the convention of the MaStar_CB19 file's
// keywords; RUBIX parses them the same way). Throws InputError naming `where` otherwise.
PyPipe3DName parse_pypipe3d_name(const std::string& name, const std::string& where);

// Reads a pyPipe3D template FITS (.fits or .fits.gz). Wavelengths from CRVAL1, CDELT1, CRPIX1
// (default 1); resolution from a FWHM keyword if present, else kMastarResolvingPower at 5000 A.
SspGrid read_pypipe3d_fits(const std::string& path);

}  // namespace ifusim
