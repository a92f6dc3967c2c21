#pragma once
// How far a binned-method cube is from the exact one, in the terms of the binned method's
// accuracy targets (docs/benchmarks.md): total light, the worst voxel against the peak, the
// median and 99th percentile relative difference over voxels >= 1% of the peak, and the
// light-weighted velocity per spaxel. Shared by the tests and bench_binned.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace ifusim {

struct CubeAgreement {
  bool finite = true;          // no NaN or Inf in either cube
  bool same_spaxels = true;    // the velocity maps are defined on the same spaxels
  double total_relative = 0;   // |total binned - total exact| / |total exact|
  double max_over_peak = 0;    // max |binned - exact| / max |exact|
  double median_relative = 0;  // over voxels with |exact| >= 1% of the peak
  double p99_relative = 0;
  double max_velocity_kms = 0;  // max |v_binned - v_exact| over spaxels with light
  double peak = 0;
  std::size_t worst_voxel = 0;  // where max_over_peak is reached

  // The targets: 1e-6, 2e-3, 1e-3, 1e-2, 2 km/s.
  bool meets_cube_targets() const {
    return finite && same_spaxels && peak > 0 && total_relative <= 1e-6 && max_over_peak <= 2e-3 &&
           median_relative <= 1e-3 && p99_relative <= 1e-2;
  }
  bool meets_targets() const { return meets_cube_targets() && max_velocity_kms <= 2.0; }
};

// T: float for cubes (data/datacube.h), double for a reference computed here.
template <class T>
CubeAgreement cube_agreement(const std::vector<T>& binned, const std::vector<T>& exact,
                             const std::vector<double>& velocity_binned_kms,
                             const std::vector<double>& velocity_exact_kms) {
  CubeAgreement a;
  double total_b = 0, total_e = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    a.finite = a.finite && std::isfinite(binned[i]) && std::isfinite(exact[i]);
    a.peak = std::max<double>(a.peak, std::abs(exact[i]));
    total_b += binned[i];
    total_e += exact[i];
  }
  std::vector<double> relative;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const double diff = std::abs(static_cast<double>(binned[i]) - static_cast<double>(exact[i]));
    if (diff / a.peak > a.max_over_peak) {
      a.max_over_peak = diff / a.peak;
      a.worst_voxel = i;
    }
    if (std::abs(exact[i]) >= 0.01 * a.peak) relative.push_back(diff / std::abs(exact[i]));
  }
  if (!relative.empty()) {
    std::sort(relative.begin(), relative.end());
    a.median_relative = relative[relative.size() / 2];
    a.p99_relative =
        relative[static_cast<std::size_t>(0.99 * static_cast<double>(relative.size() - 1))];
  }
  a.total_relative = std::abs(total_b - total_e) / std::abs(total_e);
  for (std::size_t s = 0; s < velocity_exact_kms.size(); ++s) {
    const bool defined_b = !std::isnan(velocity_binned_kms[s]);
    const bool defined_e = !std::isnan(velocity_exact_kms[s]);
    a.same_spaxels = a.same_spaxels && defined_b == defined_e;
    if (defined_b && defined_e)
      a.max_velocity_kms =
          std::max(a.max_velocity_kms, std::abs(velocity_binned_kms[s] - velocity_exact_kms[s]));
  }
  return a;
}

}  // namespace ifusim
