#pragma once
// A small cube with known, non-zero values for the output tests: an elliptical Gaussian blob
// (off-centre, so that transposed or flipped axes show) times a continuum with one emission line,
// on a 13 x 9 x 40 grid (distinct sizes, so that swapped axes show too).
#include <cmath>
#include <string>

#include "data/datacube.h"

namespace ifusim::test {

inline double example_blob(int ix, int iy) {
  const double dx = (ix - 4.3) / 2.0, dy = (iy - 5.6) / 1.5;
  return std::exp(-0.5 * (dx * dx + dy * dy));
}

inline double example_spectrum(double wavelength_angstrom) {
  const double line = (wavelength_angstrom - 4786.0) / 2.5;
  return 1.0 + 0.002 * (wavelength_angstrom - 4750.0) + 6.0 * std::exp(-0.5 * line * line);
}

inline Cube example_cube() {
  Cube c;
  c.shape = CubeShape{13, 9, 40};
  c.axes.spaxel_arcsec = 0.2;
  c.axes.wave_start_angstrom = 4750.0;
  c.axes.wave_step_angstrom = 1.25;
  c.axes.wavelength_medium = "air";
  c.axes.ra_deg = 150.1163;
  c.axes.dec_deg = 2.2058;
  c.unit = "10**(-20)*erg/(s*cm**2*Angstrom)";
  std::string config = "{\"galaxy\": {\"snapshot\": 99, \"subhalo\": 11}, \"stages\": [";
  for (int i = 0; i < 30; ++i)
    config += std::string(i ? ", " : "") + "{\"stage\": \"s" + std::to_string(i) + "\"}";
  config += "],\n \"note\": \"it's a test\"}";  // long (CONTINUE cards), a newline, a quote
  c.provenance = {{"version", IFUSIM_VERSION},
                  {"config", config},
                  {"snapshot", "99"},
                  {"subhalo_id", "11"},
                  {"path\\with backslash", "caf\xC3\xA9"}};
  c.data.resize(c.shape.n_voxels());
  c.variance.resize(c.shape.n_voxels());
  for (int iy = 0; iy < c.shape.ny; ++iy)
    for (int ix = 0; ix < c.shape.nx; ++ix)
      for (int k = 0; k < c.shape.n_wave; ++k) {
        const std::size_t i = (static_cast<std::size_t>(iy) * c.shape.nx + ix) * c.shape.n_wave + k;
        c.data[i] = 100.0 * example_blob(ix, iy) * example_spectrum(c.axes.wavelength_angstrom(k));
        c.variance[i] = 0.1 * c.data[i] + 0.5;
      }
  // A velocity-like map (a gradient in x, undefined in one corner) and a blob.
  SkyMap& velocity = c.maps["velocity_light_kms"];
  velocity = {"km/s", "light-weighted mean line-of-sight velocity of the stars", {}};
  SkyMap& blob = c.maps["white_light"];
  blob = {c.unit, "mean flux density over the band", {}};
  for (int iy = 0; iy < c.shape.ny; ++iy)
    for (int ix = 0; ix < c.shape.nx; ++ix) {
      velocity.values.push_back(ix + iy < 3 ? std::nan("") : 25.0 * (ix - 6) + 3.1 * iy);
      blob.values.push_back(100.0 * example_blob(ix, iy));
    }
  return c;
}

}  // namespace ifusim::test
