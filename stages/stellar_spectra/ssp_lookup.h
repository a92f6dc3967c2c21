#pragma once
// The template grid as kernels see it, and the lookups both spectral methods share: bilinear
// node weights in (log age, log Z) and the cumulative energy of a template up to a wavelength.
// Host and device functions (IFUSIM_HD): the exact kernel, the binned deposit and the host-side
// basis of the binned method all evaluate the templates through these.
//
// Resampling: each template's spectrum is piecewise constant over its rest-frame pixels; its
// cumulative energy C(lambda) (L_sun per M_sun from the first pixel edge) is tabulated once per
// template on its vacuum rest-frame edges. An observed bin [l0, l1] (its edges in vacuum, see
// WaveBins) receives C(l1 / D) - C(l0 / D) with D = (1 + z)(1 + v_los / c), so the energy a star
// emits is conserved exactly over the bins that cover its shifted spectrum, and the cube holds
// luminosity per observed Angstrom.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "core/constants.h"  // kSpeedOfLightKms
#include "data/hd.h"
#include "data/wavelength_axis.h"
#include "stages/common/interpolation.h"

namespace ifusim {

enum class OutsideGrid : int { clamp, zero };

// Templates on the device, ready for the kernel (replicated on every device).
struct SspView {
  int n_age = 0, n_z = 0, n_wave = 0;
  const double* log_age = nullptr;     // log10(age / Gyr), n_age
  const double* log_z = nullptr;       // log10(Z), n_z
  const double* edges = nullptr;       // vacuum rest-frame pixel edges, n_wave + 1 (A)
  const double* cumulative = nullptr;  // per node (i_age * n_z + i_z): n_wave + 1 values
  bool uniform = false;                // edges equally spaced: pixel lookup without search
  double edge0 = 0.0, step = 1.0;
  OutsideGrid outside = OutsideGrid::clamp;
};

// The observed wavelength bins: centres start + k * step (linear) or start 10^(k log10_step)
// (logarithmic, log10_step > 0; edges at the centres' geometric midpoints,
// data/wavelength_axis.h), k < n, in the telescope's medium.
//
// Templates are held in vacuum (make_ssp_tables), and a telescope that measures in air has its
// bin edges converted to vacuum once (vacuum_edges, n + 1 values): a photon emitted at vacuum
// wavelength lambda_rest reaches the instrument at lambda_rest (1 + z)(1 + v/c) in vacuum, and
// the air wavelength it is recorded at is that one converted at the observed wavelength
// (Morton 2000, ApJS 130, 403). Comparing vacuum with vacuum (vacuum_edge(k) / D against the
// templates' vacuum rest edges) does the conversion at the observed wavelength for every star
// and velocity at the cost of one table, where converting the templates at rest (as earlier
// versions did) put a line at z = 1 near 10000 A 0.05 A too red. Energy stays per air Angstrom:
// a bin's energy is divided by its width in the telescope's medium (width(k)).
struct WaveBins {
  double start_angstrom = 0.0;
  double step_angstrom = 1.0;  // linear bins
  int n = 0;
  const double* vacuum_edges = nullptr;  // nullptr: the bins are in vacuum already
  double log10_step = 0.0;               // > 0: logarithmic bins (step_angstrom unused)
  // edge(k) for k = 0 .. n as a table, the same values (a logarithmic grid's edge is a pow, and
  // the kernels take several a star); nullptr: made from the formula.
  const double* edges = nullptr;
  IFUSIM_HD bool is_log() const { return log10_step > 0.0; }
  IFUSIM_HD double first_edge() const { return edge(0); }
  IFUSIM_HD double edge(int k) const {
    if (edges) return edges[k];
    return is_log() ? log_grid_edge(start_angstrom, log10_step, k)
                    : start_angstrom - 0.5 * step_angstrom + k * step_angstrom;
  }
  // Width of bin k in the telescope's medium: the step of linear bins.
  IFUSIM_HD double width(int k) const { return is_log() ? edge(k + 1) - edge(k) : step_angstrom; }
  // Centre of bin k in the telescope's medium.
  IFUSIM_HD double centre(int k) const {
    return is_log() ? log_grid_centre(start_angstrom, log10_step, k)
                    : start_angstrom + k * step_angstrom;
  }
  // Edge k and the centre of bin k in vacuum, the templates' medium.
  IFUSIM_HD double vacuum_edge(int k) const { return vacuum_edges ? vacuum_edges[k] : edge(k); }
  IFUSIM_HD double vacuum_centre(int k) const {
    return vacuum_edges ? 0.5 * (vacuum_edges[k] + vacuum_edges[k + 1]) : centre(k);
  }
  // The bin whose edges (in the telescope's medium) hold lambda, clamped to [0, n].
  int bin_of(double lambda) const {
    const double x = is_log() ? std::log10(lambda / start_angstrom) / log10_step + 0.5
                              : (lambda - first_edge()) / step_angstrom;
    return static_cast<int>(std::clamp(std::floor(x), 0.0, static_cast<double>(n)));
  }
  // The bin k in [first, end) with vacuum_edge(k) <= x < vacuum_edge(k + 1), clamped to that
  // range (a binary search: in air the edges are a table).
  IFUSIM_HD int vacuum_bin(double x, int first, int end) const {
    int lo = first, hi = end;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (vacuum_edge(mid) <= x)
        lo = mid;
      else
        hi = mid;
    }
    return lo;
  }
};

// The four grid nodes of one star and their bilinear weights (in log age, log Z).
struct NodeWeights {
  int node[4];
  double weight[4];
  bool skip;  // outside the grid under the "zero" policy
};

IFUSIM_HD inline NodeWeights node_weights(const SspView& ssp, double age_gyr, double metallicity) {
  // Ages and metallicities <= 0 are below any grid: log10 of a tiny value clamps them.
  const double log_age = log10(age_gyr > 1e-12 ? age_gyr : 1e-12);
  const double log_z = log10(metallicity > 1e-12 ? metallicity : 1e-12);
  int ia = 0, iz = 0;
  double wa = 0.0, wz = 0.0;
  bool outside = false;
  bracket(ssp.log_age, ssp.n_age, log_age, ia, wa, outside);
  bracket(ssp.log_z, ssp.n_z, log_z, iz, wz, outside);
  const int ia1 = ssp.n_age > 1 ? ia + 1 : ia, iz1 = ssp.n_z > 1 ? iz + 1 : iz;
  NodeWeights w;
  w.node[0] = ia * ssp.n_z + iz;
  w.node[1] = ia * ssp.n_z + iz1;
  w.node[2] = ia1 * ssp.n_z + iz;
  w.node[3] = ia1 * ssp.n_z + iz1;
  w.weight[0] = (1 - wa) * (1 - wz);
  w.weight[1] = (1 - wa) * wz;
  w.weight[2] = wa * (1 - wz);
  w.weight[3] = wa * wz;
  w.skip = outside && ssp.outside == OutsideGrid::zero;
  return w;
}

// d weight[n] / d age_gyr and d weight[n] / d metallicity of node_weights' four weights, for
// reverse mode (docs/gradients.md). The weights are bilinear in (log10 age, log10 Z), so
// d w_a / d age = (d w_a / d log10 age) / (age ln 10); at a node the derivative is the one from
// the right (bracket_slope), and a clamped value (beyond the grid, or <= 1e-12) has none.
struct NodeWeightSlopes {
  double per_age_gyr[4];
  double per_metallicity[4];
};

IFUSIM_HD inline NodeWeightSlopes node_weight_slopes(const SspView& ssp, double age_gyr,
                                                     double metallicity) {
  const double log_age = log10(age_gyr > 1e-12 ? age_gyr : 1e-12);
  const double log_z = log10(metallicity > 1e-12 ? metallicity : 1e-12);
  int ia = 0, iz = 0;
  double wa = 0.0, wz = 0.0;
  bool outside = false;
  bracket(ssp.log_age, ssp.n_age, log_age, ia, wa, outside);
  bracket(ssp.log_z, ssp.n_z, log_z, iz, wz, outside);
  constexpr double kLn10 = 2.302585092994046;
  const double da =
      age_gyr > 1e-12 ? bracket_slope(ssp.log_age, ssp.n_age, log_age) / (age_gyr * kLn10) : 0.0;
  const double dz =
      metallicity > 1e-12 ? bracket_slope(ssp.log_z, ssp.n_z, log_z) / (metallicity * kLn10) : 0.0;
  NodeWeightSlopes s;
  s.per_age_gyr[0] = -(1 - wz) * da;
  s.per_age_gyr[1] = -wz * da;
  s.per_age_gyr[2] = (1 - wz) * da;
  s.per_age_gyr[3] = wz * da;
  s.per_metallicity[0] = -(1 - wa) * dz;
  s.per_metallicity[1] = (1 - wa) * dz;
  s.per_metallicity[2] = -wa * dz;
  s.per_metallicity[3] = wa * dz;
  return s;
}

// Pixel j with edges[j] <= lambda < edges[j + 1] and the fraction of it below lambda; lambda
// outside the table gives j = -1 (below) or n_wave (above).
IFUSIM_HD inline void locate(const SspView& ssp, double lambda, int& j, double& fraction) {
  const int n = ssp.n_wave;
  if (!(lambda > ssp.edges[0])) {
    j = -1;
    fraction = 0.0;
    return;
  }
  if (lambda >= ssp.edges[n]) {
    j = n;
    fraction = 0.0;
    return;
  }
  if (ssp.uniform) {
    j = static_cast<int>((lambda - ssp.edge0) / ssp.step);
    j = j < 0 ? 0 : (j >= n ? n - 1 : j);
  } else {
    int lo = 0, hi = n;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (ssp.edges[mid] <= lambda)
        lo = mid;
      else
        hi = mid;
    }
    j = lo;
  }
  fraction = (lambda - ssp.edges[j]) / (ssp.edges[j + 1] - ssp.edges[j]);
}

// locate for a lambda no smaller than the one that gave j (a row's bin edges, in order): the same
// pixel and fraction, found by stepping on from j rather than by a new search (on MILES' vacuum
// grid, not uniform, the searches were most of a binned product's time). j on entry: the last
// call's, or -1.
IFUSIM_HD inline void locate_after(const SspView& ssp, double lambda, int& j, double& fraction) {
  const int n = ssp.n_wave;
  if (ssp.uniform || j < 0 || j >= n || !(lambda > ssp.edges[0]) || lambda >= ssp.edges[n] ||
      ssp.edges[j] > lambda) {
    locate(ssp, lambda, j, fraction);
    return;
  }
  // edges[j] <= lambda < edges[n]: the largest such j, as locate's search finds it.
  while (ssp.edges[j + 1] <= lambda) ++j;
  fraction = (lambda - ssp.edges[j]) / (ssp.edges[j + 1] - ssp.edges[j]);
}

// Cumulative energy of one template up to lambda, from its located pixel.
IFUSIM_HD inline double cumulative_at(const SspView& ssp, int node, int j, double fraction) {
  const double* c = ssp.cumulative + static_cast<std::size_t>(node) * (ssp.n_wave + 1);
  if (j < 0) return 0.0;
  if (j >= ssp.n_wave) return c[ssp.n_wave];
  return c[j] + fraction * (c[j + 1] - c[j]);
}

// Flux density (energy per vacuum Angstrom, per M_sun) of a template's first pixel (red =
// false) or last pixel (red = true).
IFUSIM_HD inline double end_flux_density(const SspView& ssp, int node, bool red) {
  const double* c = ssp.cumulative + static_cast<std::size_t>(node) * (ssp.n_wave + 1);
  const int j = red ? ssp.n_wave - 1 : 0;
  return (c[j + 1] - c[j]) / (ssp.edges[j + 1] - ssp.edges[j]);
}

// The cumulative energy of a template continued beyond its ends at its end pixels' flux
// densities (negative below the first edge). Unlike cumulative_at it has no kink of the size of
// the whole flux at the ends: the binned method's basis rows use it near the ends (EdgeWindow).
IFUSIM_HD inline double continued_cumulative(const SspView& ssp, int node, double lambda) {
  if (lambda < ssp.edges[0]) return end_flux_density(ssp, node, false) * (lambda - ssp.edges[0]);
  if (lambda > ssp.edges[ssp.n_wave])
    return ssp.cumulative[static_cast<std::size_t>(node) * (ssp.n_wave + 1) + ssp.n_wave] +
           end_flux_density(ssp, node, true) * (lambda - ssp.edges[ssp.n_wave]);
  int j = 0;
  double fraction = 0.0;
  locate(ssp, lambda, j, fraction);
  return cumulative_at(ssp, node, j, fraction);
}

// The binned method's velocity axis: nodes uniform in u = ln(1 + v/c), u_j = u_min + j du,
// j < n. A star at u deposits linear (cloud-in-cell) weights on the two nearest nodes.
struct VelocityBins {
  double u_min = 0.0;
  double du = 1.0;
  int n = 2;
  IFUSIM_HD double velocity_kms(int j) const { return kSpeedOfLightKms * expm1(u_min + j * du); }
  // Lower node and the upper node's weight for a line-of-sight velocity.
  IFUSIM_HD void locate(double v_kms, int& lower, double& upper_weight) const {
    const double x = (log1p(v_kms / kSpeedOfLightKms) - u_min) / du;
    int j = static_cast<int>(floor(x));
    j = j < 0 ? 0 : (j > n - 2 ? n - 2 : j);
    double t = x - j;
    lower = j;
    upper_weight = t < 0.0 ? 0.0 : (t > 1.0 ? 1.0 : t);
  }
  // d(upper_weight)/d v_kms of locate (reverse mode): du/dv = 1 / (c + v). From the right at a
  // node (locate's cell), 0 where the weight is clamped (below the first node, at or beyond the
  // last).
  IFUSIM_HD double upper_weight_slope(double v_kms) const {
    const double x = (log1p(v_kms / kSpeedOfLightKms) - u_min) / du;
    return x >= 0.0 && x < n - 1 ? 1.0 / (du * (kSpeedOfLightKms + v_kms)) : 0.0;
  }
};

}  // namespace ifusim
