#pragma once
// The binned method's dust without an A_V grid. A star's light is dimmed by
// T(A_V, lambda) = 10^(-0.4 A_V k(lambda)), k = A_lambda / A_V at the rest wavelength. Over the
// run's A_V range [0, A_max] and the range [k_ref, k_max] of k the basis reaches, the
// attenuation beyond the least one, T(A_V, k) / T(A_V, k_ref) = 10^(-0.4 A_V (k - k_ref)), is an
// exponential kernel in (A_V, k), whose singular values fall off geometrically (exponential
// sums: Beylkin & Monzon 2005, ACHA 19, 17), so a few separable terms hold it to any accuracy:
//
//   T(A_V, k) ~ T(A_V, k_ref) sum_r phi_r(A_V) psi_r(k),   r < rank,
//
// Factoring out T(A_V, k_ref) (folded into phi's table) makes the error relative to each star's
// own least attenuated light, not to its unattenuated light: a spaxel behind 40 mag of dust
// keeps its (faint) spectrum and light-weighted velocity to the same relative accuracy.
// with a rank that grows only with log(A_max): to 2e-6, 4 terms for
// A_max = 0.5 mag, 7-8 for 5 mag and 12-13 for 40 mag (CCM89 or Calzetti 2000, 3000-11000 A).
// A star deposits its mass times phi_r(A_V) (signed) in `rank` histogram columns, and basis row
// r is the unattenuated row times psi_r(k(lambda_rest)), so the product's cost is set by the
// rank, not by A_max as with A_V nodes (the previous method: nodes every 0.05 mag, 800 at 40 mag).
//
// phi and psi come from the SVD of T sampled on a grid of (A_V, k); psi_r is tabulated over k
// and phi_r over a fine A_V table (linear interpolation in both, each below 2e-6).
// The rank is the smallest whose truncation error is below kDustExpansionTolerance.
#include <vector>

#include "data/hd.h"
#include "stages/common/dust_curves.h"

namespace ifusim {

// Largest |T - expansion| allowed (T's peak is 1): the binned method's accuracy targets are
// 1e-3 of a voxel and 2e-3 of the peak voxel.
inline constexpr double kDustExpansionTolerance = 2e-6;
inline constexpr int kMaxDustRank = 24;

// What a kernel sees: rank 1 and no table without dust (a star's weight is its mass).
struct DustExpansionView {
  int rank = 1;
  int n_av = 0;                 // rows of the table: A_V = a * av_step_mag, a < n_av
  double av_step_mag = 1.0;     //
  const double* phi = nullptr;  // (n_av, rank), row-major; nullptr without dust

  // The table row below a_v and the weight of the row above (A_V beyond the table's range is
  // held at its ends; the dust stage's bound keeps every star inside).
  IFUSIM_HD void locate(double a_v, int& row, double& upper) const {
    const double x = (a_v > 0.0 ? a_v : 0.0) / av_step_mag;
    int j = static_cast<int>(floor(x));
    j = j > n_av - 2 ? n_av - 2 : j;
    const double t = x - j;
    row = j;
    upper = t > 1.0 ? 1.0 : t;
  }
  IFUSIM_HD double weight(int row, double upper, int r) const {
    return (1.0 - upper) * phi[row * rank + r] + upper * phi[(row + 1) * rank + r];
  }
  // d weight / d A_V at a_v (reverse mode): the table's slope over locate's row, from the right
  // at a row; 0 where A_V is held at the table's ends.
  IFUSIM_HD double weight_slope(double a_v, int row, int r) const {
    const double x = a_v / av_step_mag;
    if (!(x >= 0.0) || x >= n_av - 1) return 0.0;
    return (phi[(row + 1) * rank + r] - phi[row * rank + r]) / av_step_mag;
  }
};

struct DustExpansion {
  DustCurve curve;
  double av_max_mag = 0.0;  // the range covered: the bound asked for, or where 10^-20 is reached
  int rank = 1;
  int n_av = 0;
  double av_step_mag = 1.0;
  std::vector<double> phi;  // (n_av, rank)
  int n_k = 0;
  double k_min = 0.0, k_step = 1.0;
  double k_ref = 0.0;        // the least k over the rest wavelengths
  std::vector<double> psi;   // (n_k, rank): psi_r at k = k_min + i k_step
  double max_abs_phi = 0.0;  // bounds a star's deposit per unit mass
  double max_error = 0.0;    // |T - expansion| / T(A_V, k_ref) at most, on a check grid

  // psi_r at k.
  double psi_at(double k, int r) const;
  // T as the expansion gives it (for tests and the error check).
  double attenuation(double a_v, double rest_angstrom) const;
  DustExpansionView view(const double* phi_on_device) const {
    return {rank, n_av, av_step_mag, phi_on_device};
  }
};

// The expansion of `curve` for A_V in [0, av_max_mag] and rest wavelengths (vacuum Angstrom)
// in [rest_lo, rest_hi].
DustExpansion make_dust_expansion(const DustCurve& curve, double av_max_mag,
                                  double rest_lo_angstrom, double rest_hi_angstrom);

// The expansion's terms over a narrow range of k: fewer. The binned product makes B and sums
// H x B in segments of kDustSegmentBins observed bins, and over one segment's rest wavelengths k
// spans a few percent of the whole range, where T(A_V, k) needs 3-5 terms, not the 7 (A_V <= 5
// mag) to 13 (40 mag) of the whole range. So a star's `rank` coefficients h_r (the histogram's
// dust columns, deposited once) are mixed, for each segment, into `terms` coefficients
//   c_q = sum_r reduce[q, r] h_r,   q < terms,
// and the segment's basis rows take the factors chi_q(k) = sum_r mix[q, r] psi_r(k) in place of
// psi_r: the product's work over the segment falls by rank / terms. The pair is the truncated
// SVD of the expansion itself over the segment: F(A_V, k) = sum_r phi_r(A_V) psi_r(k) / T(A_V,
// k_ref) sampled on A_V and k, its right singular vectors (functions of k) are chi's samples,
// and c projects a star's factor onto them. terms is the fewest whose truncation stays below
// kDustSegmentTolerance of the star's least attenuated light on the samples. Equivalently, term r
// of the segment's rows of B has the factor psi~_r(k) = sum_q reduce[q, r] chi_q(k) (project =
// reduce^T mix, rank x rank): what the transpose and basis_row make, so that they are the exact
// transpose and rows of the reduced product.
inline constexpr int kDustSegmentBins = 64;
inline constexpr double kDustSegmentTolerance = 5e-7;
struct DustSegment {
  int terms = 0;                // <= rank (rank where no fewer hold the tolerance)
  std::vector<double> reduce;   // (terms, rank), row-major
  std::vector<double> mix;      // (terms, rank)
  std::vector<double> project;  // (rank, rank)
  double max_error = 0.0;       // of the truncation, relative to T(A_V, k_ref), on the samples
};
// The segment for rest-frame attenuation ratios k in [k_lo, k_hi].
DustSegment make_dust_segment(const DustExpansion& e, double k_lo, double k_hi);
// The segments of an observed axis (segment s: bins [s * kDustSegmentBins, ...)): `k_range`
// gives each segment's range of k over the rest wavelengths its basis rows reach.
struct DustSegments {
  std::vector<DustSegment> segment;
  int max_terms = 0;
  double max_error = 0.0;
  const DustSegment& of_bin(int bin) const {
    return segment[static_cast<std::size_t>(bin / kDustSegmentBins)];
  }
};

}  // namespace ifusim
