#pragma once
// The wavelength sampling of a cube: linear (centres start + k step, as MUSE delivers) or
// logarithmic (centres start 10^(k dlog10), as MaNGA's LOGCUBE: Law et al. 2016, AJ 152, 83,
// sec. 9.1, dlog10(lambda) = 1e-4). A bin's edges are the midpoints of its neighbours' centres
// in the sampling's own variable: arithmetic midpoints for a linear grid, geometric midpoints
// (midpoints in log lambda) for a logarithmic one, so the bins tile the band without gaps or
// overlap and a bin's energy / its width is a flux density that integrates back to the energy.
// Host and device functions: the spectral kernels evaluate the same formulas as the writers.
#include <cmath>

#include "data/hd.h"

namespace ifusim {

// Centre of pixel k (k may be negative or beyond the band: the run's margin) of a logarithmic
// grid with first centre start_angstrom and log10_step decades a pixel.
IFUSIM_HD inline double log_grid_centre(double start_angstrom, double log10_step, double k) {
  return start_angstrom * pow(10.0, k * log10_step);
}

// Lower edge of pixel k of a logarithmic grid: the geometric midpoint of centres k - 1 and k.
IFUSIM_HD inline double log_grid_edge(double start_angstrom, double log10_step, double k) {
  return start_angstrom * pow(10.0, (k - 0.5) * log10_step);
}

// A wavelength grid as kernels see it (trivially copyable): centres, edges and widths of
// linear (log10_step = 0) or logarithmic bins. The linear formulas are the ones the stages
// used before logarithmic grids existed, operation for operation, so linear cubes are
// unchanged to the last bit.
struct WaveGrid {
  double start_angstrom = 0.0;  // centre of bin 0
  double step_angstrom = 0.0;   // linear bins
  double log10_step = 0.0;      // > 0: logarithmic bins
  IFUSIM_HD bool is_log() const { return log10_step > 0.0; }
  IFUSIM_HD double first_edge() const { return start_angstrom - 0.5 * step_angstrom; }
  IFUSIM_HD double centre(double k) const {
    return is_log() ? log_grid_centre(start_angstrom, log10_step, k)
                    : start_angstrom + k * step_angstrom;
  }
  // Lower edge of bin k.
  IFUSIM_HD double edge(double k) const {
    return is_log() ? log_grid_edge(start_angstrom, log10_step, k)
                    : first_edge() + k * step_angstrom;
  }
  IFUSIM_HD double width(double k) const {
    return is_log() ? edge(k + 1) - edge(k) : step_angstrom;
  }
  // Where lambda lies in units of bins from the first edge: floor() of it is its bin.
  IFUSIM_HD double edge_position(double lambda) const {
    return is_log() ? log10(lambda / start_angstrom) / log10_step + 0.5
                    : (lambda - first_edge()) / step_angstrom;
  }
};

// Pixels of a grid from start_angstrom up to (not including) end_angstrom, as numpy.arange
// would count them: linear when log10_step is 0.
inline int wavelength_grid_size(double start_angstrom, double end_angstrom, double step_angstrom,
                                double log10_step) {
  const double n = log10_step > 0.0 ? std::log10(end_angstrom / start_angstrom) / log10_step
                                    : (end_angstrom - start_angstrom) / step_angstrom;
  return static_cast<int>(std::ceil(n - 1e-9));
}

}  // namespace ifusim
