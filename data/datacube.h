#pragma once
// Datacubes. Voxels are stored spaxel-major: element (spaxel, k) at spaxel * n_wave + k, with
// spaxel = iy * nx + ix, so that one star's spectrum lands in contiguous memory.
#include <cstdint>
#include <string>
#include <vector>

#include "data/fixed_point.h"
#include "data/sharded_array.h"

namespace ifusim {

struct CubeShape {
  int nx = 0;
  int ny = 0;
  int n_wave = 0;
  std::size_t n_spaxels() const { return static_cast<std::size_t>(nx) * ny; }
  std::size_t n_voxels() const { return n_spaxels() * static_cast<std::size_t>(n_wave); }
  bool operator==(const CubeShape&) const = default;
};

// Per-device partial sums in 64-bit fixed point (see fixed_point.h), Partial(particles) until
// psum reduces them and leaves every device the same, replicated total.
struct PartialCube {
  CubeShape shape;
  FixedPointScale scale;
  ShardedArray<std::int64_t> sums;  // rows = n_voxels, one component
};

// The reduced cube on the host, in double precision.
struct Cube {
  CubeShape shape;
  std::vector<double> data;      // n_voxels, spaxel-major
  std::vector<double> variance;  // empty until a noise stage fills it
  std::string unit;              // BUNIT-style, e.g. "Msun" or "erg/s/cm2/Angstrom"
  double at(int ix, int iy, int k) const {
    return data[(static_cast<std::size_t>(iy) * shape.nx + ix) * shape.n_wave + k];
  }
};

}  // namespace ifusim
