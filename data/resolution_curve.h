#pragma once
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace ifusim {

// values(lambda), tabulated at increasing wavelengths w (at least one point): linear between
// points, constant beyond the first and the last.
inline double interpolate_clamped(const std::vector<double>& w, const std::vector<double>& values,
                                  double lambda_angstrom) {
  if (values.size() == 1 || lambda_angstrom <= w.front()) return values.front();
  if (lambda_angstrom >= w.back()) return values.back();
  const std::size_t i =
      static_cast<std::size_t>(std::upper_bound(w.begin(), w.end(), lambda_angstrom) - w.begin());
  const double t = (lambda_angstrom - w[i - 1]) / (w[i] - w[i - 1]);
  return values[i - 1] + t * (values[i] - values[i - 1]);
}

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
    return interpolate_clamped(wavelength_angstrom, fwhm, lambda_angstrom);
  }
};

}  // namespace ifusim
