#pragma once
// Reader for pyPipe3D SSP template files (Lacerda et al. 2022; Sanchez et al. 2016): one FITS
// image of N spectra x n_pix pixels. Row i's age and metallicity come from header keyword
// NAMEi = "spec_ssp_<age>_z<Z digits>.spec", NOT from the row order, and row i was divided by
// NORMi (the SSP's luminosity per unit initial stellar mass at WAVENORM, L_sun / A / M_sun), so
// the reader multiplies it back.
#include <string>

#include "data/ssp_grid.h"

namespace ifusim {

// The MaStar library's resolution (FWHM, Angstrom, vacuum rest wavelength), used when the file has
// no FWHM keyword. MaStar was observed with the BOSS spectrographs (Yan et al. 2019, AJ 158, 2;
// R ~ 1800 on average, Yan et al. 2019, ApJ 883, 175), whose resolving power R = lambda / FWHM
// Smee et al. (2013, AJ 146, 32) give as 1560 at 3700 A to 2270 at 6000 A in the blue channel
// and 1850 at 6000 A to 2650 at 9000 A in the red one: FWHM = lambda / R at those four points,
// the step at the 6000 A dichroic kept (a 0.001 A ramp), linear between them, constant beyond.
// These are the instrument's nominal values; MaStar's per-spectrum LSF scatters around them.
ResolutionCurve mastar_resolution_fwhm_angstrom();
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
// (default 1); resolution from a FWHM keyword if present (constant), else MaStar's curve.
SspGrid read_pypipe3d_fits(const std::string& path);

}  // namespace ifusim
