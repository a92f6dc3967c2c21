#pragma once
// The night sky and the atmosphere, as read from their files by io/ (io/sky/sky_tables.h) for the
// noise stage's exposure model (stages/noise/exposure.h).
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

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
    const auto& w = wavelength_angstrom;
    if (lambda_angstrom <= w.front()) return mag_per_airmass.front();
    if (lambda_angstrom >= w.back()) return mag_per_airmass.back();
    const std::size_t i =
        static_cast<std::size_t>(std::upper_bound(w.begin(), w.end(), lambda_angstrom) - w.begin());
    const double t = (lambda_angstrom - w[i - 1]) / (w[i] - w[i - 1]);
    return mag_per_airmass[i - 1] + t * (mag_per_airmass[i] - mag_per_airmass[i - 1]);
  }
};

}  // namespace ifusim
