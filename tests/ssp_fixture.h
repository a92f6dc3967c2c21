#pragma once
// A small synthetic SSP grid for tests: smooth continua with absorption lines whose depth and
// slope vary with age and metallicity, so that interpolation errors would show.
#include <cmath>

#include "data/ssp_grid.h"

namespace ifusim::test {

inline SspGrid synthetic_ssp_grid(double wave_start = 3000.0, double wave_step = 2.0,
                                  int n_wave = 2500) {
  SspGrid g;
  g.name = "synthetic";
  g.age_gyr = {0.05, 0.3, 1.0, 4.0, 13.0};
  g.metallicity = {0.0004, 0.004, 0.02, 0.04};
  for (int k = 0; k < n_wave; ++k) g.wavelength_angstrom.push_back(wave_start + k * wave_step);
  g.resolution_fwhm_angstrom = 2.5;
  g.z_solar = 0.02;
  for (std::size_t ia = 0; ia < g.age_gyr.size(); ++ia)
    for (std::size_t iz = 0; iz < g.metallicity.size(); ++iz)
      for (int k = 0; k < n_wave; ++k) {
        const double lam = g.wavelength_angstrom[k];
        const double slope = std::pow(lam / 5000.0, -1.5 + 0.4 * std::log10(g.age_gyr[ia]));
        double f = 1e-5 * slope / std::sqrt(g.age_gyr[ia]);
        for (double line : {3934.0, 4101.7, 4861.3, 5175.0, 5895.0, 6562.8}) {
          const double depth = 0.3 + 0.1 * iz + 0.05 * ia;
          f *= 1.0 - depth * std::exp(-0.5 * std::pow((lam - line) / 3.0, 2));
        }
        g.flux.push_back(static_cast<float>(f));
      }
  return g;
}

}  // namespace ifusim::test
