#pragma once
// Readers of the sky files the noise stage's exposure model uses (../shared/data/sky, see its
// README): a night-sky spectrum in FITS (PypeIt's paranal_sky.fits layout: HDU 0 the flux, the
// HDU named WAVELENGTH the vacuum wavelengths in A, both 1-D images of the same length) and an
// extinction table in text (two columns: wavelength in A, mag per airmass; '#' starts a comment).
// Errors name the file and what was expected (InputError).
#include <string>

#include "data/sky.h"

namespace ifusim {

SkySpectrum read_sky_spectrum(const std::string& file);
ExtinctionCurve read_extinction_curve(const std::string& file);

}  // namespace ifusim
