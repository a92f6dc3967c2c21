#pragma once
// The night sky and the atmosphere, as read from their files by io/ (io/sky/sky_tables.h) for the
// noise stage's exposure model (stages/noise/exposure.h).
#include <string>
#include <vector>

#include "data/resolution_curve.h"  // interpolate_clamped

namespace ifusim {

// A night-sky emission spectrum: continuum plus airglow lines, at a relative level (the noise
// stage scales it to a sky surface brightness). Wavelengths in vacuum, increasing.
struct SkySpectrum {
  std::string file;
  std::vector<double> wavelength_vacuum_angstrom;
  std::vector<double> flux;  // relative f_lambda
};

// Atmospheric extinction per unit airmass against wavelength (Angstrom, increasing; the files give
// no medium: the difference, < 3 A, is far below the curve's sampling), linear between points.
struct ExtinctionCurve {
  std::string file;
  std::vector<double> wavelength_angstrom;
  std::vector<double> mag_per_airmass;
  bool covers(double lo, double hi) const {
    return !wavelength_angstrom.empty() && wavelength_angstrom.front() <= lo &&
           wavelength_angstrom.back() >= hi;
  }
  double at(double lambda_angstrom) const {
    return interpolate_clamped(wavelength_angstrom, mag_per_airmass, lambda_angstrom);
  }
};

}  // namespace ifusim
