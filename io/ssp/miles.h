#pragma once
// Reader for a MILES SSP library stored as a directory of one-spectrum FITS files, as the MILES
// website delivers them (Vazdekis et al. 2010, 2015), e.g.
// Mch1.30Zm0.25T00.0300_iTp0.00_baseFe.fits: IMF "ch" slope 1.30, [M/H] = -0.25 ("Zm" minus,
// "Zp" plus), age 0.03 Gyr ("T"), BaSTI isochrones ("iT"), base [alpha/Fe].
#include <string>

#include "data/ssp_grid.h"

namespace ifusim {

// MILES SSPs have a constant spectral resolution of 2.51 A FWHM (Falcon-Barroso et al. 2011;
// Vazdekis et al. 2015) and air wavelengths.
inline constexpr double kMilesResolutionFwhmAngstrom = 2.51;

// BaSTI (Pietrinferni et al. 2004) chemistry used to turn the MILES [M/H] labels into the metal
// mass fraction Z. BaSTI defines [M/H] = log10(Z/X) - log10(Z/X)_sun with the Grevesse & Noels
// (1993) solar ratio (Z/X)_sun = 0.0245 and helium Y = Y_p + (dY/dZ) Z, Y_p = 0.245,
// dY/dZ = 1.4, X = 1 - Y - Z. Solving for Z gives
//   Z = (1 - Y_p) r / (1 + (1 + dY/dZ) r),  r = (Z/X)_sun * 10^[M/H].
// This reproduces the Z values the MILES website lists for its BaSTI models ([M/H] = -2.27 ...
// +0.40 <-> Z = 0.0001 ... 0.04, e.g. [M/H] = +0.06 <-> Z = 0.0198) to within the 0.01 dex
// rounding of the labels. The simpler Z = Z_sun * 10^[M/H] with Z_sun = 0.0198 would be 15 %
// high at [M/H] = +0.06 and 24 % at +0.40, because BaSTI's solar model (initial Z = 0.0198) sits
// at [M/H] = +0.06 on its own scale.
inline constexpr double kBastiSolarZOverX = 0.0245;
inline constexpr double kBastiPrimordialHelium = 0.245;
inline constexpr double kBastiHeliumEnrichment = 1.4;     // dY/dZ
inline constexpr double kBastiSolarMetallicity = 0.0198;  // initial Z of the BaSTI solar model
double basti_metallicity_from_mh(double mh);

// Reads every *.fits file of `directory` whose name carries Z<m|p><[M/H]>T<age Gyr>. The grid
// must be complete (every age x [M/H]) and every file must share one wavelength grid
// (NAXIS1, CRVAL1, CDELT1, CRPIX1); otherwise InputError names the directory and the missing or
// offending file. Flux is in L_sun / A per M_sun of initial mass, as MILES stores it.
SspGrid read_miles_directory(const std::string& directory);

}  // namespace ifusim
