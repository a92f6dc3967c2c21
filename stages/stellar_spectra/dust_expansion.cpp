// Eigen single-threaded: the SVD's GEMMs must not block by the thread count, so that every
// process and device count gets the same tables, hence the same bits (the loops below are
// parallel over independent entries).
#define EIGEN_DONT_PARALLELIZE
#include "stages/stellar_spectra/dust_expansion.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace ifusim {
namespace {

// Samples of k and A_V in the SVD, and the spacings of the tables of psi (over k) and phi (over
// A_V). Linear interpolation errs by h^2 / 8 |d2T/dx2| at most, relative to T(A_V, k_ref), and
// each table's spacing holds that to kTableError: in A_V, (0.921 k_max h)^2 / 8 (h = 0.0021 mag
// for k_max = 1.8, CCM89 at 3000 A; wider in the infrared); in k, h^2 / 8 (0.921 A_max)^2
// (16500 samples for A_max = 40 mag over a k range of 1.5, at least kMinKSamples).
constexpr int kSvdKSamples = 768;
constexpr int kSvdAvSamples = 384;
constexpr double kTableError = 1.5e-6;
constexpr int kMinKSamples = 256;
// A star dimmed by more than 10^-20 even at k_ref (its least attenuated light) is held there: its
// light is far below any fixed-point quantum, and the tables stay bounded for screens of
// hundreds of magnitudes (dense gas seen edge-on).
constexpr double kMaxDimmingDex = 20.0;

double transmission(double a_v, double k) {
  return std::pow(10.0, -0.4 * a_v * k);
}

}  // namespace

double DustExpansion::psi_at(double k, int r) const {
  const double x = (k - k_min) / k_step;
  int j = static_cast<int>(std::floor(x));
  j = std::clamp(j, 0, n_k - 2);
  const double t = std::clamp(x - j, 0.0, 1.0);
  return (1.0 - t) * psi[static_cast<std::size_t>(j) * rank + r] +
         t * psi[static_cast<std::size_t>(j + 1) * rank + r];
}

double DustExpansion::attenuation(double a_v, double rest_angstrom) const {
  const DustExpansionView v = view(phi.data());
  int row = 0;
  double upper = 0.0;
  v.locate(a_v, row, upper);
  const double k = attenuation_ratio(curve, rest_angstrom);
  double t = 0.0;
  for (int r = 0; r < rank; ++r) t += v.weight(row, upper, r) * psi_at(k, r);
  return t;
}

DustExpansion make_dust_expansion(const DustCurve& curve, double av_max_mag,
                                  double rest_lo_angstrom, double rest_hi_angstrom) {
  if (!(av_max_mag >= 0.0) || !std::isfinite(av_max_mag) || !(rest_lo_angstrom > 0.0) ||
      !(rest_hi_angstrom >= rest_lo_angstrom))
    throw std::logic_error("make_dust_expansion: bad A_V or wavelength range");
  DustExpansion e;
  e.curve = curve;

  // 1. The range of k over the rest wavelengths (the curves are not monotonic everywhere: the
  // 2175 A bump), sampled finely in log wavelength.
  double k_lo = INFINITY, k_hi = -INFINITY;
  constexpr int kWaveSamples = 8192;
  for (int i = 0; i <= kWaveSamples; ++i) {
    const double lambda =
        rest_lo_angstrom * std::pow(rest_hi_angstrom / rest_lo_angstrom, double(i) / kWaveSamples);
    const double k = attenuation_ratio(curve, lambda);
    k_lo = std::min(k_lo, k);
    k_hi = std::max(k_hi, k);
  }
  const double pad = 1e-3 * std::max(1.0, k_hi - k_lo);
  e.k_ref = k_lo;
  e.k_min = k_lo - pad;
  const double k_max = k_hi + pad;
  e.av_max_mag = std::min(av_max_mag, kMaxDimmingDex / (0.4 * std::max(k_lo, 1e-3)));

  // 2. The SVD of T / T(A_V, k_ref) on (A_V, k) samples; the rank whose truncation meets the
  // tolerance.
  const int n_svd = e.av_max_mag > 0.0 ? kSvdAvSamples : 1;
  auto svd_av = [&](int i) { return n_svd > 1 ? e.av_max_mag * i / (n_svd - 1) : 0.0; };
  auto svd_k = [&](int j) { return e.k_min + (k_max - e.k_min) * j / (kSvdKSamples - 1); };
  Eigen::MatrixXd t(n_svd, kSvdKSamples);
  for (int i = 0; i < n_svd; ++i)
    for (int j = 0; j < kSvdKSamples; ++j) t(i, j) = transmission(svd_av(i), svd_k(j) - e.k_ref);
  const Eigen::BDCSVD<Eigen::MatrixXd> svd(t, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const auto& sigma = svd.singularValues();
  const int max_rank = std::min<int>(kMaxDustRank, static_cast<int>(sigma.size()));
  Eigen::MatrixXd residual = t;
  e.rank = 0;
  while (e.rank < max_rank && sigma(e.rank) > 0.0) {
    const int r = e.rank++;
    residual -= sigma(r) * svd.matrixU().col(r) * svd.matrixV().col(r).transpose();
    if (residual.cwiseAbs().maxCoeff() <= kDustExpansionTolerance) break;
  }

  // 3. psi_r on a fine k table: the projection of T(., k) / T(., k_ref) on U's column r over
  // sigma_r (V's column r at the SVD's samples, and as smooth between them), scaled to a peak of
  // 1 there (so that phi_r is O(1), for the fixed point).
  std::vector<double> scale(static_cast<std::size_t>(e.rank));
  for (int r = 0; r < e.rank; ++r) scale[r] = svd.matrixV().col(r).cwiseAbs().maxCoeff();
  const double k_step_max =
      std::sqrt(8.0 * kTableError) / (0.4 * std::log(10.0) * std::max(e.av_max_mag, 1e-3));
  e.n_k = std::max(kMinKSamples, static_cast<int>(std::ceil((k_max - e.k_min) / k_step_max)) + 1);
  e.k_step = (k_max - e.k_min) / (e.n_k - 1);
  e.psi.assign(static_cast<std::size_t>(e.n_k) * e.rank, 0.0);
#pragma omp parallel for schedule(static)
  for (int j = 0; j < e.n_k; ++j) {
    const double k = e.k_min + j * e.k_step;
    for (int i = 0; i < n_svd; ++i) {
      const double ti = transmission(svd_av(i), k - e.k_ref);
      for (int r = 0; r < e.rank; ++r)
        e.psi[static_cast<std::size_t>(j) * e.rank + r] +=
            ti * svd.matrixU()(i, r) / (sigma(r) * scale[r]);
    }
  }

  // 4. phi_r on the fine A_V table: the projection of T(A_V, .) / T(A_V, k_ref) on V's column r
  // (exact for any A_V, not only the SVD's samples), times its scale and T(A_V, k_ref).
  e.av_step_mag = std::sqrt(8.0 * kTableError) / (0.4 * std::log(10.0) * std::max(k_max, 0.1));
  e.n_av = std::max(2, static_cast<int>(std::ceil(e.av_max_mag / e.av_step_mag)) + 2);
  e.phi.assign(static_cast<std::size_t>(e.n_av) * e.rank, 0.0);
#pragma omp parallel for schedule(static)
  for (int a = 0; a < e.n_av; ++a) {
    const double a_v = a * e.av_step_mag;
    const double least = transmission(a_v, e.k_ref);
    for (int j = 0; j < kSvdKSamples; ++j) {
      const double tj = transmission(a_v, svd_k(j) - e.k_ref);
      for (int r = 0; r < e.rank; ++r)
        e.phi[static_cast<std::size_t>(a) * e.rank + r] +=
            least * tj * svd.matrixV()(j, r) * scale[r];
    }
  }
  for (double p : e.phi) e.max_abs_phi = std::max(e.max_abs_phi, std::abs(p));

  // 5. The error of the whole (truncation and both interpolations), between the tables' nodes,
  // relative to T(A_V, k_ref).
  for (int a = 0; a + 1 < e.n_av; a += 3) {
    const double a_v = std::min(e.av_max_mag, (a + 0.5) * e.av_step_mag);
    for (int i = 0; i < 256; ++i) {
      const double lambda =
          rest_lo_angstrom * std::pow(rest_hi_angstrom / rest_lo_angstrom, (i + 0.5) / 256);
      const double exact = transmission(a_v, attenuation_ratio(curve, lambda));
      e.max_error = std::max(
          e.max_error, std::abs(e.attenuation(a_v, lambda) - exact) / transmission(a_v, e.k_ref));
    }
  }
  return e;
}

DustSegment make_dust_segment(const DustExpansion& e, double k_lo, double k_hi) {
  const int rank = e.rank;
  // Samples: A_V over the table's range, k over the segment's (both ends included). The
  // truncation is judged relative to each star's least attenuated light, as the expansion's own
  // error is: phi's rows divided by T(A_V, k_ref).
  constexpr int kAvSamples = 256, kKSamples = 64;
  const int n_a = e.av_max_mag > 0.0 ? kAvSamples : 1;
  const DustExpansionView view = e.view(e.phi.data());
  Eigen::MatrixXd phi(n_a, rank);
  for (int i = 0; i < n_a; ++i) {
    const double a_v = n_a > 1 ? e.av_max_mag * i / (n_a - 1) : 0.0;
    int row = 0;
    double upper = 0.0;
    view.locate(a_v, row, upper);
    for (int r = 0; r < rank; ++r)
      phi(i, r) = view.weight(row, upper, r) / transmission(a_v, e.k_ref);
  }
  Eigen::MatrixXd psi(kKSamples, rank);
  for (int j = 0; j < kKSamples; ++j)
    for (int r = 0; r < rank; ++r)
      psi(j, r) = e.psi_at(k_lo + (k_hi - k_lo) * j / (kKSamples - 1), r);
  // F = phi psi^T = Q (R_phi psi^T) = Q G: the SVD of the small G gives F's singular values and
  // right vectors (Z = G^T W / sigma = psi R_phi^T W / sigma, so chi_q = sum_r (R_phi^T W_q /
  // sigma_q)_r psi_r between the samples too).
  const Eigen::HouseholderQR<Eigen::MatrixXd> qr(phi);
  const Eigen::MatrixXd q = qr.householderQ() * Eigen::MatrixXd::Identity(n_a, std::min(n_a, rank));
  const Eigen::MatrixXd r_phi =
      qr.matrixQR().topRows(std::min(n_a, rank)).triangularView<Eigen::Upper>();
  const Eigen::MatrixXd g = r_phi * psi.transpose();
  const Eigen::JacobiSVD<Eigen::MatrixXd> svd(g, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const auto& sigma = svd.singularValues();
  DustSegment s;
  Eigen::MatrixXd residual = g;
  const int max_terms = static_cast<int>(sigma.size());
  while (s.terms < max_terms && sigma(s.terms) > 0.0) {
    const int t = s.terms++;
    residual -= sigma(t) * svd.matrixU().col(t) * svd.matrixV().col(t).transpose();
    s.max_error = (q * residual).cwiseAbs().maxCoeff();
    if (s.max_error <= kDustSegmentTolerance) break;
  }
  s.terms = std::max(s.terms, 1);
  // reduce = Z^T psi and mix = (R_phi^T W / sigma)^T, each term scaled so that chi_q's samples
  // peak at 1 (c_q of the order of h_r, for the float product).
  s.reduce.assign(static_cast<std::size_t>(s.terms) * rank, 0.0);
  s.mix.assign(s.reduce.size(), 0.0);
  for (int t = 0; t < s.terms && t < max_terms; ++t) {
    if (!(sigma(t) > 0.0)) continue;  // F is 0 over the segment: its factor stays 0
    const double peak = std::max(svd.matrixV().col(t).cwiseAbs().maxCoeff(), 1e-300);
    const Eigen::VectorXd reduce = psi.transpose() * svd.matrixV().col(t) * peak;
    const Eigen::VectorXd mix = r_phi.transpose() * svd.matrixU().col(t) / (sigma(t) * peak);
    for (int r = 0; r < rank; ++r) {
      s.reduce[static_cast<std::size_t>(t) * rank + r] = reduce(r);
      s.mix[static_cast<std::size_t>(t) * rank + r] = mix(r);
    }
  }
  s.project.assign(static_cast<std::size_t>(rank) * rank, 0.0);
  for (int a = 0; a < rank; ++a)
    for (int b = 0; b < rank; ++b)
      for (int t = 0; t < s.terms; ++t)
        s.project[static_cast<std::size_t>(a) * rank + b] +=
            s.reduce[static_cast<std::size_t>(t) * rank + a] *
            s.mix[static_cast<std::size_t>(t) * rank + b];
  return s;
}

}  // namespace ifusim
