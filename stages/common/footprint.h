#pragma once
// Where a particle's light goes on the sky: the spaxels it covers and the fraction of its light
// each receives. Every depositing kernel (spectra, kinematics, images) walks a particle's
// footprint through for_each, so that spatial smoothing is one piece of code shared by all of
// them. Without smoothing the footprint is the particle's own spaxel with weight 1 (none when
// it falls outside the field or the aperture).
//
// With smoothing (SpaxelGrid::smoothing == Smoothing::kernel, docs/smoothing.md) a particle is
// spread over the spaxels by a projected kernel integrated exactly over each spaxel:
// - The kernel is a Gaussian whose per-axis width sigma equals that of the SPH cubic spline
//   (Monaghan & Lattanzio 1985, A&A 149, 135) with support radius H, as Gadget and AREPO define
//   the smoothing length (Springel 2005, MNRAS 364, 1105): sigma^2 = (1/3) int r^2 W d^3r =
//   (3/40) H^2, so H / sigma = sqrt(40/3) = 3.6515 (Dehnen & Aly 2012, MNRAS 425, 1068, Table 1:
//   H / h = 1.825742 with h = 2 sigma). Projection along the line of sight keeps the per-axis
//   variance, so the projected kernel's sigma is the same.
// - It is truncated to the square |dx|, |dy| <= H around the particle (the bounding box of the
//   spline's support) and renormalised over that whole square. A Gaussian separates in x and
//   y, so its integral over a spaxel is a product of two differences of erf: exact and cheap,
//   also for particles much smaller than a spaxel (no sub-sampling, cf. Borrow & Kelly 2021,
//   arXiv:2106.05281). A particle fully inside the field gets weights summing to 1 (within
//   rounding); one whose square crosses the field edge loses exactly the kernel's integral
//   beyond the edge.
// - Light is deposited over the whole square grid whatever the aperture: the aperture_mask stage
//   blanks the spaxels outside a circular or hexagonal aperture after the PSF.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "data/galaxy_data.h"
#include "data/hd.h"
#include "stages/common/particle_fields.h"
#include "stages/common/spaxel_grid.h"

namespace ifusim {

// Support radius over sigma of the cubic spline: sqrt(40 / 3).
inline constexpr double kSplineSupportPerSigma = 3.6514837167011076;
// Stars: the smoothing length (StellarHsml, or the k-th neighbour distance) is the support H.
inline constexpr double kStarSigmaPerSmoothingLength = 1.0 / kSplineSupportPerSigma;
// Gas: the smoothing length is the radius of the sphere of the cell's volume,
// r = (3 m / (4 pi rho))^(1/3); sigma is that of a uniform sphere of radius r, r / sqrt(5), so
// the kernel spreads the cell's mass with the cell's own second moment.
inline constexpr double kGasSigmaPerCellRadius = 0.44721359549995793;
// The kernel is cut at +-(this) sigma in x and in y: H for the stars.
inline constexpr double kKernelTruncationSigmas = kSplineSupportPerSigma;

namespace footprint_detail {

// The spaxels [ix0, ix1] x [iy0, iy1] of `grid` that the truncation square of a kernel of width
// sigma_kpc > 0 centred on (x_kpc, y_kpc) overlaps, clamped to the grid; false where the square
// misses the grid (also for a non-finite position or width).
IFUSIM_HD inline bool kernel_square_cells(const SpaxelGrid& grid, double x_kpc, double y_kpc,
                                          double sigma_kpc, int& ix0, int& ix1, int& iy0,
                                          int& iy1) {
  const double half = grid.half_extent_kpc(), d = grid.spaxel_size_kpc;
  const int n = grid.n_side;
  const double reach = kKernelTruncationSigmas * sigma_kpc;
  const double x_lo = x_kpc - reach, x_hi = x_kpc + reach;
  const double y_lo = y_kpc - reach, y_hi = y_kpc + reach;
  if (!(x_hi > -half && x_lo < half && y_hi > -half && y_lo < half)) return false;
  // Clamped to the grid in double before the cast.
  auto cell = [&](double u) {
    const double c = floor((u + half) / d);
    return c < 0.0 ? 0 : (c > n - 1 ? n - 1 : static_cast<int>(c));
  };
  ix0 = cell(x_lo), ix1 = cell(x_hi), iy0 = cell(y_lo), iy1 = cell(y_hi);
  return true;
}

// The spaxel of `grid` that holds a point, or -1 outside the grid.
IFUSIM_HD inline std::int32_t point_spaxel(const SpaxelGrid& grid, double x_kpc, double y_kpc) {
  const double half = grid.half_extent_kpc(), d = grid.spaxel_size_kpc;
  const int n = grid.n_side;
  const double fx = (x_kpc + half) / d, fy = (y_kpc + half) / d;
  if (!(fx >= 0.0 && fy >= 0.0 && fx < n && fy < n)) return -1;
  return static_cast<std::int32_t>(static_cast<int>(fy) * n + static_cast<int>(fx));
}

// The walk of for_each_kernel_spaxel and for_each_kernel_spaxel_slopes: one loop, so that the
// slopes' walk visits exactly the spaxels the deposit does, with bitwise the same weights.
// kSlopes: f(spaxel, weight, d weight / d x_kpc, d weight / d y_kpc); else f(spaxel, weight).
template <bool kSlopes, class F>
IFUSIM_HD void walk_kernel_spaxels(const SpaxelGrid& grid, double x_kpc, double y_kpc,
                                   double sigma_kpc, F&& f) {
  const double half = grid.half_extent_kpc(), d = grid.spaxel_size_kpc;
  const int n = grid.n_side;
  if (!(sigma_kpc > 0.0)) {
    const std::int32_t s = point_spaxel(grid, x_kpc, y_kpc);
    if (s < 0) return;
    // A point: its spaxel is piecewise constant in the position (zero slope).
    if constexpr (kSlopes)
      f(s, 1.0, 0.0, 0.0);
    else
      f(s, 1.0);
    return;
  }
  // The spaxels the square overlaps (nothing of it in the grid: none).
  int ix0 = 0, ix1 = 0, iy0 = 0, iy1 = 0;
  if (!kernel_square_cells(grid, x_kpc, y_kpc, sigma_kpc, ix0, ix1, iy0, iy1)) return;
  const double reach = kKernelTruncationSigmas * sigma_kpc;
  const double x_lo = x_kpc - reach, x_hi = x_kpc + reach;
  const double y_lo = y_kpc - reach, y_hi = y_kpc + reach;
  // erf's argument per kpc, and one axis' integral over the whole truncated square.
  const double per_kpc = 0.70710678118654752 / sigma_kpc;
  const double inv_norm = 0.5 / erf(kKernelTruncationSigmas * 0.70710678118654752);
  // The slopes (docs/gradients.md, "Stars (binned engine)"): one axis' weight is
  // (erf((hi - c) k) - erf((lo - c) k)) inv_norm, k = per_kpc, for the kernel's centre c and
  // lo = max(c - reach, spaxel's low edge), hi = min(c + reach, spaxel's high edge). An end that
  // is the truncation square's moves with the centre (its erf's argument, +-reach k, is fixed:
  // no slope); an end that is a spaxel's (or the field's) edge e is fixed, and
  // d erf((e - c) k) / dc = -k (2 / sqrt(pi)) exp(-((e - c) k)^2). So
  // d weight / dc = inv_norm k (2 / sqrt(pi)) ([lo is an edge] exp(-((lo - c) k)^2)
  //                                          - [hi is an edge] exp(-((hi - c) k)^2)).
  // Where an end of the square lies exactly on a spaxel's edge (where the set of covered
  // spaxels changes: the weights are continuous there, their slopes jump by
  // exp(-reach^2 k^2) = exp(-20/3) ~ 1.3e-3 of the peak's), the end counts as the square's, and
  // the spaxel it enters or leaves, of weight 0, is not visited (as the deposit does not): the
  // one-sided slope of the side where that spaxel is not covered, i.e. from the left (below) at
  // the square's high end, from the right (above) at its low end.
  [[maybe_unused]] const double slope_scale = inv_norm * per_kpc * 1.1283791670955126;
  [[maybe_unused]] auto edge_term = [&](double end, double centre) {
    const double u = (end - centre) * per_kpc;
    return exp(-u * u);
  };
  // One row's x weights (and slopes), g(ix, wx, dwx) for ix0..ix1 in order. Each spaxel's right
  // edge is the next one's left edge: one erf per spaxel, and the row's weights telescope to
  // exactly its clipped extent.
  auto x_weights = [&](auto&& g) {
    const double first = ix0 * d - half;
    const double left = x_lo > first ? x_lo : first;
    double e_left = erf((left - x_kpc) * per_kpc);
    [[maybe_unused]] double g_left = 0.0;  // the left end's edge term, 0 where it is the square's
    if constexpr (kSlopes) g_left = first > x_lo ? edge_term(left, x_kpc) : 0.0;
    for (int ix = ix0; ix <= ix1; ++ix) {
      const double right = (ix + 1) * d - half;
      const double end = x_hi < right ? x_hi : right;
      const double e_right = erf((end - x_kpc) * per_kpc);
      const double wx = (e_right - e_left) * inv_norm;
      e_left = e_right;
      double dwx = 0.0;
      if constexpr (kSlopes) {
        const double g_right = right < x_hi ? edge_term(end, x_kpc) : 0.0;
        dwx = (g_left - g_right) * slope_scale;
        g_left = g_right;
      }
      g(ix, wx, dwx);
    }
  };
  // The x weights are the same in every row: made once where the square spans at most
  // kCachedColumns columns (nearly every star's), else again for each row (the same values).
  constexpr int kCachedColumns = 32;
  double cached_wx[kCachedColumns], cached_dwx[kCachedColumns];
  const bool cached = ix1 - ix0 < kCachedColumns;
  if (cached)
    x_weights([&](int ix, double wx, double dwx) {
      cached_wx[ix - ix0] = wx;
      cached_dwx[ix - ix0] = dwx;  // 0 without slopes
    });
  for (int iy = iy0; iy <= iy1; ++iy) {
    const double edge_lo = iy * d - half, edge_hi = (iy + 1) * d - half;
    const double lo = y_lo > edge_lo ? y_lo : edge_lo, hi = y_hi < edge_hi ? y_hi : edge_hi;
    const double wy = (erf((hi - y_kpc) * per_kpc) - erf((lo - y_kpc) * per_kpc)) * inv_norm;
    if (!(wy > 0.0)) continue;
    [[maybe_unused]] double dwy = 0.0;
    if constexpr (kSlopes)
      dwy = ((edge_lo > y_lo ? edge_term(lo, y_kpc) : 0.0) -
             (edge_hi < y_hi ? edge_term(hi, y_kpc) : 0.0)) *
            slope_scale;
    auto visit = [&](int ix, double wx, [[maybe_unused]] double dwx) {
      if (!(wx > 0.0)) return;
      if constexpr (kSlopes)
        f(static_cast<std::int32_t>(iy * n + ix), wx * wy, dwx * wy, wx * dwy);
      else
        f(static_cast<std::int32_t>(iy * n + ix), wx * wy);
    };
    if (cached)
      for (int ix = ix0; ix <= ix1; ++ix) visit(ix, cached_wx[ix - ix0], cached_dwx[ix - ix0]);
    else
      x_weights(visit);
  }
}

}  // namespace footprint_detail

// f(spaxel, weight) for every spaxel of `grid` that a Gaussian of width sigma_kpc centred on
// (x_kpc, y_kpc), truncated to |dx|, |dy| <= kKernelTruncationSigmas sigma and renormalised
// there, reaches inside the grid. sigma_kpc <= 0 is a point: weight 1 in the spaxel that holds it.
template <class F>
IFUSIM_HD void for_each_kernel_spaxel(const SpaxelGrid& grid, double x_kpc, double y_kpc,
                                      double sigma_kpc, F&& f) {
  footprint_detail::walk_kernel_spaxels<false>(grid, x_kpc, y_kpc, sigma_kpc, f);
}

// Reverse mode: the same spaxels and weights as for_each_kernel_spaxel, in the same order, with
// each weight's derivative along the kernel's centre: f(spaxel, weight, d weight / d x_kpc,
// d weight / d y_kpc), sigma held fixed. Exact for the truncated, renormalised Gaussian
// integrated over the spaxel (the derivation and the one-sided convention where the covered
// spaxels change: walk_kernel_spaxels); 0 for a point (sigma_kpc <= 0).
template <class F>
IFUSIM_HD void for_each_kernel_spaxel_slopes(const SpaxelGrid& grid, double x_kpc, double y_kpc,
                                             double sigma_kpc, F&& f) {
  footprint_detail::walk_kernel_spaxels<true>(grid, x_kpc, y_kpc, sigma_kpc, f);
}

// Per-device views of one particle set's footprint fields (trivially copyable: kernels receive
// it by value).
struct FootprintView {
  const std::int32_t* spaxel_index = nullptr;  // -1 outside the field
  SpaxelGrid grid;
  // With smoothing: sky positions and smoothing lengths (kpc); nullptr smoothing_length_kpc means
  // no smoothing (the particle's own spaxel_index).
  const float* x_kpc = nullptr;
  const float* y_kpc = nullptr;
  const float* smoothing_length_kpc = nullptr;
  double sigma_per_length = kStarSigmaPerSmoothingLength;  // kernel sigma / smoothing length

  // f(spaxel, weight) for every spaxel particle i covers; the weights of a particle inside the
  // field sum to 1, minus what falls outside the field or the aperture.
  template <class F>
  IFUSIM_HD void for_each(std::size_t i, F&& f) const {
    if (smoothing_length_kpc == nullptr) {
      const std::int32_t s = spaxel_index[i];
      if (s >= 0) f(s, 1.0);
      return;
    }
    for_each_kernel_spaxel(grid, x_kpc[i], y_kpc[i],
                           static_cast<double>(smoothing_length_kpc[i]) * sigma_per_length, f);
  }

  // The spaxels for_each(i, ...) may visit lie in [first, last] (row-major indices; none where
  // first > last): the rows and columns the particle's kernel square overlaps.
  IFUSIM_HD void spaxel_span(std::size_t i, std::int32_t& first, std::int32_t& last) const {
    first = 1, last = 0;
    std::int32_t s = -1;
    if (smoothing_length_kpc == nullptr) {
      s = spaxel_index[i];
    } else {
      const double sigma = static_cast<double>(smoothing_length_kpc[i]) * sigma_per_length;
      if (!(sigma > 0.0)) {
        s = footprint_detail::point_spaxel(grid, x_kpc[i], y_kpc[i]);
      } else {
        int ix0 = 0, ix1 = 0, iy0 = 0, iy1 = 0;
        if (footprint_detail::kernel_square_cells(grid, x_kpc[i], y_kpc[i], sigma, ix0, ix1, iy0,
                                                  iy1)) {
          first = iy0 * grid.n_side + ix0;
          last = iy1 * grid.n_side + ix1;
        }
        return;
      }
    }
    if (s >= 0) first = last = s;
  }

  // Reverse mode: for_each's spaxels and weights, in its order, with the weights' derivatives
  // along the particle's sky position: f(spaxel, weight, d weight / d x_kpc, d weight / d y_kpc).
  // The smoothing length is held fixed (a kNN length depends on the positions too: not
  // differentiated). Without smoothing the slopes are 0 (the spaxel is piecewise constant).
  template <class F>
  IFUSIM_HD void for_each_slopes(std::size_t i, F&& f) const {
    if (smoothing_length_kpc == nullptr) {
      const std::int32_t s = spaxel_index[i];
      if (s >= 0) f(s, 1.0, 0.0, 0.0);
      return;
    }
    for_each_kernel_spaxel_slopes(grid, x_kpc[i], y_kpc[i],
                                  static_cast<double>(smoothing_length_kpc[i]) * sigma_per_length,
                                  f);
  }
};

// The footprint of the stars held by `device` (views into the stars' fields on that device), for
// the grid the stars were assigned with (RunState::spaxel_grid). With smoothing the stars need
// smoothing_length_kpc, which the spaxel stage that chose the smoothing provides.
inline FootprintView star_footprint(const Stars& stars, const SpaxelGrid& grid,
                                    const Device& device) {
  FootprintView view;
  view.grid = grid;
  if (static_cast<Smoothing>(grid.smoothing) == Smoothing::none) {
    view.spaxel_index = stars.derived.at(fields::stars_spaxel_index).local(device).data;
    return view;
  }
  if (stars.count() == 0) return view;  // nothing will be asked of it
  if (stars.smoothing_length_kpc.rows() != stars.count() ||
      stars.position_kpc.rows() != stars.count())
    throw std::logic_error(
        "star_footprint: smoothing \"kernel\" needs stars.position_kpc and "
        "stars.smoothing_length_kpc (set by the spaxel stage)");
  view.x_kpc = stars.position_kpc.local(device, 0).data;
  view.y_kpc = stars.position_kpc.local(device, 1).data;
  view.smoothing_length_kpc = stars.smoothing_length_kpc.local(device).data;
  view.sigma_per_length = kStarSigmaPerSmoothingLength;
  return view;
}

// The same for the gas cells, once the spaxel stage has placed them on the grid (place_gas,
// stages/spaxel_grid/smoothing.h): their spaxel_index, or with smoothing their cell radii.
inline FootprintView gas_footprint(const Gas& gas, const SpaxelGrid& grid, const Device& device) {
  FootprintView view;
  view.grid = grid;
  if (gas.count() == 0) return view;
  if (static_cast<Smoothing>(grid.smoothing) == Smoothing::none) {
    view.spaxel_index = gas.derived.at(fields::gas_spaxel_index).local(device).data;
    return view;
  }
  view.x_kpc = gas.position_kpc.local(device, 0).data;
  view.y_kpc = gas.position_kpc.local(device, 1).data;
  view.smoothing_length_kpc = gas.derived.at(fields::gas_smoothing_length_kpc).local(device).data;
  view.sigma_per_length = kGasSigmaPerCellRadius;
  return view;
}

}  // namespace ifusim
