#pragma once
// A simple-stellar-population template library in memory: one spectrum per (age, metallicity)
// node on a common rest-frame wavelength grid. Every reader (io/ssp/) produces this.
#include <cstddef>
#include <string>
#include <vector>

#include "data/resolution_curve.h"

namespace ifusim {

struct SspGrid {
  std::string name;                         // e.g. "MILES_BASTI_CH_baseFe"
  std::string source;                       // the file or directory it was read from
  std::vector<double> age_gyr;              // ascending, n_age > 0
  std::vector<double> metallicity;          // mass fraction Z, ascending, n_z > 0
  std::vector<double> wavelength_angstrom;  // rest frame, ascending, n_wave > 1
  // flux[(i_age * n_z + i_z) * n_wave + k] in L_sun / Angstrom per M_sun of initial mass.
  std::vector<float> flux;
  // The library's own spectral resolution (FWHM, Angstrom) over its rest wavelengths: constant
  // for MILES, varying for MaStar.
  ResolutionCurve resolution_fwhm_angstrom;
  double z_solar = 0.0;                   // solar metallicity used to turn [M/H] into Z
  std::string wavelength_medium = "air";  // "air" or "vacuum"

  std::size_t n_age() const { return age_gyr.size(); }
  std::size_t n_metallicity() const { return metallicity.size(); }
  std::size_t n_wave() const { return wavelength_angstrom.size(); }
  const float* spectrum(std::size_t i_age, std::size_t i_z) const {
    return flux.data() + (i_age * n_metallicity() + i_z) * n_wave();
  }
};

}  // namespace ifusim
