#pragma once
// Quick-look images of a cube: maps (white-light image, velocity and dispersion moments) and
// the integrated spectrum, as PNG with a built-in 5x7 font for titles, labels and ticks.
#include <string>
#include <vector>

#include "data/datacube.h"

namespace ifusim {

enum class Colormap {
  viridis,    // sequential (matplotlib's viridis): images, dispersions
  diverging,  // ColorBrewer RdBu reversed, blue low, white mid, red high: velocities
};

struct MapStyle {
  std::string title;
  Colormap colormap = Colormap::viridis;
  bool symmetric = false;  // range [-max|v|, +max|v|], so that zero is the middle colour
  bool log_scale = false;  // colours by log10(value); values <= 0 take the lowest colour
  std::string unit;        // printed under the map
};

// `values` holds nx * ny numbers, row-major with y outer (values[iy * nx + ix]), y = Dec drawn
// upwards and x to the right (east left, as in the FITS cube). NaN marks an empty spaxel: drawn
// grey and excluded from the colour range. The range spans the values' 2nd to 98th percentile
// (colours saturate beyond; the footer says so when it clips). A colour bar at the right carries
// the range's min, middle and max. Throws std::invalid_argument for a size mismatch, InputError
// when the file cannot be written.
void write_map_png(const std::string& path, const std::vector<double>& values, int nx, int ny,
                   const MapStyle& style);

// A line plot of flux against wavelength with axes, ticks at 1/2/5 x 10^k steps, tick labels,
// axis labels and a title. Non-finite points break the line and are left out of the range.
void write_spectrum_png(const std::string& path, const std::vector<double>& wavelength,
                        const std::vector<double>& flux, const std::string& x_label,
                        const std::string& y_label, const std::string& title);

// Sum over the spaxels inside the aperture (the others are NaN), per wavelength pixel: n_wave
// values.
std::vector<double> integrated_spectrum(const Cube& cube);
// The centres of the cube's wavelength pixels in Angstrom.
std::vector<double> wavelength_angstrom(const Cube& cube);

}  // namespace ifusim
