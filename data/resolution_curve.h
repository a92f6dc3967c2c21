#pragma once
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace ifusim {

// A resolution (a FWHM: in Angstrom for a line-spread function or a template library, in arcsec
// for a point-spread function; or a Moffat beta) as a function of wavelength (observed for an
// instrument, rest for a template library): linear between tabulated points, constant
// beyond the first and the last. A single point is a constant (and a plain number converts to
// one).
struct ResolutionCurve {
  std::vector<double> wavelength_angstrom = {0.0};  // strictly increasing
  std::vector<double> fwhm = {0.0};
  ResolutionCurve() = default;
  ResolutionCurve(double constant_fwhm) : fwhm{constant_fwhm} {}
  ResolutionCurve(std::vector<double> wavelength, std::vector<double> values)
      : wavelength_angstrom(std::move(wavelength)), fwhm(std::move(values)) {}
  bool constant() const { return fwhm.size() == 1; }
  double min() const { return *std::min_element(fwhm.begin(), fwhm.end()); }
  double max() const { return *std::max_element(fwhm.begin(), fwhm.end()); }
  double at(double lambda_angstrom) const {
    const auto& w = wavelength_angstrom;
    if (constant() || lambda_angstrom <= w.front()) return fwhm.front();
    if (lambda_angstrom >= w.back()) return fwhm.back();
    const std::size_t i =
        static_cast<std::size_t>(std::upper_bound(w.begin(), w.end(), lambda_angstrom) - w.begin());
    const double t = (lambda_angstrom - w[i - 1]) / (w[i] - w[i - 1]);
    return fwhm[i - 1] + t * (fwhm[i] - fwhm[i - 1]);
  }
};

}  // namespace ifusim
