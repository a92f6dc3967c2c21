#pragma once
// The spaxel grid on its own (no stage machinery): the spaxel stages publish the grid the stars
// were assigned with as the run's product "spaxels", and later stages (dust, emission lines:
// the gas) use exactly the same one.
#include <cstdint>

#include "data/hd.h"

namespace ifusim {

// How a particle's light is spread over the spaxels (stages/common/footprint.h): none puts it
// all in the spaxel that holds the particle; kernel spreads it with the particle's smoothing
// kernel integrated over each spaxel.
enum class Smoothing { none = 0, kernel = 1 };

// A square grid of n x n spaxels of side spaxel_size_kpc, centred on (0, 0), seen through an
// aperture (square: the whole grid; circular: a disc of diameter aperture_kpc; hexagonal: a
// regular hexagon, corner-to-corner width aperture_kpc, corners on the x axis, as an IFU fibre
// bundle). Particles are deposited on the whole square grid, so that light from just outside the
// aperture is blurred into it by the PSF as on the sky; the aperture_mask stage then blanks the
// spaxels outside it (NaN), as a real cube does. Trivially copyable: kernels receive it by value.
struct SpaxelGrid {
  int n_side = 1;
  double spaxel_size_kpc = 1.0;
  int aperture = 0;  // ApertureShape as int (square 0, circular 1, hexagonal 2)
  double aperture_kpc = 0.0;
  int smoothing = 0;  // Smoothing as int, chosen by the spaxel stage; read by the footprints

  // Rounded as on the host on every backend (mul_rn, add_rn: data/hd.h), so that a particle on a
  // spaxel's edge falls in the same spaxel on the CPU and the GPU.
  IFUSIM_HD double half_extent_kpc() const { return mul_rn(0.5 * n_side, spaxel_size_kpc); }
  IFUSIM_HD bool inside_aperture(double x, double y) const {
    const double r = 0.5 * aperture_kpc;
    if (aperture == 1) return x * x + y * y <= r * r;
    if (aperture == 2) {
      // |y| <= r sqrt(3)/2 (flat top and bottom) and the slanted sides: sqrt(3)|x| + |y| <= sqrt(3)
      // r.
      const double s3 = 1.7320508075688772, ax = x < 0 ? -x : x, ay = y < 0 ? -y : y;
      return ay <= 0.5 * s3 * r && s3 * ax + ay <= s3 * r;
    }
    return true;
  }
  // Whether spaxel (ix, iy) belongs to the aperture: its centre is inside.
  IFUSIM_HD bool spaxel_in_aperture(int ix, int iy) const {
    const double x = add_rn(mul_rn(ix + 0.5, spaxel_size_kpc), -half_extent_kpc());
    const double y = add_rn(mul_rn(iy + 0.5, spaxel_size_kpc), -half_extent_kpc());
    return inside_aperture(x, y);
  }
  // iy * n_side + ix, or -1 outside the grid.
  IFUSIM_HD std::int32_t index_of(double x_kpc, double y_kpc) const {
    const double fx = add_rn(x_kpc, half_extent_kpc()) / spaxel_size_kpc;
    const double fy = add_rn(y_kpc, half_extent_kpc()) / spaxel_size_kpc;
    if (!(fx >= 0.0 && fy >= 0.0 && fx < n_side && fy < n_side)) return -1;
    return static_cast<std::int32_t>(fy) * n_side + static_cast<std::int32_t>(fx);
  }
};

}  // namespace ifusim
