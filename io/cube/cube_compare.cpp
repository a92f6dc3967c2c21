#include "io/cube/cube_compare.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <sstream>

namespace ifusim {
namespace {

// printf into a string.
std::string format(const char* fmt, ...) {
  va_list args, copy;
  va_start(args, fmt);
  va_copy(copy, args);
  std::string out(static_cast<std::size_t>(std::vsnprintf(nullptr, 0, fmt, copy)), '\0');
  va_end(copy);
  std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  va_end(args);
  return out;
}

struct Where {
  std::size_t index = 0;
  double value = -1;  // the largest difference so far (-1: none yet)
};

std::string describe(const Cube& c) {
  return to_string(c.shape) + " (nx x ny x n_wave)";
}

std::string location(const Cube& c, std::size_t index) {
  const std::size_t n_wave = static_cast<std::size_t>(c.shape.n_wave);
  const std::size_t spaxel = index / n_wave;
  const int k = static_cast<int>(index % n_wave);
  return format("(ix %zu, iy %zu, wavelength %.6g Angstrom = pixel %d)",
                spaxel % static_cast<std::size_t>(c.shape.nx),
                spaxel / static_cast<std::size_t>(c.shape.nx), c.axes.wavelength_angstrom(k), k);
}

// Compares one array (data or variance); writes its report and returns whether it passes.
bool compare_values(const char* name, const Cube& a, const std::vector<float>& va,
                    const std::vector<float>& vb, double rtol, double atol, std::ostream& out) {
  Where abs_max, rel_max;
  // A NaN matches a NaN in the same voxel (numpy's allclose with equal_nan): spaxels outside an
  // aperture are NaN in both cubes of one instrument. A NaN against a number fails.
  std::size_t nan_a = 0, nan_b = 0, nan_one = 0, first_nan_one = 0, failing = 0, first_failing = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    const double x = va[i], y = vb[i];
    const bool xn = std::isnan(x), yn = std::isnan(y);
    nan_a += xn;
    nan_b += yn;
    if (xn != yn && nan_one++ == 0) first_nan_one = i;
    if (xn || yn) continue;
    const double d = std::abs(x - y);
    // numpy.allclose: |a - b| <= atol + rtol * |b|; an infinity must match exactly.
    const bool ok = (x == y) || d <= atol + rtol * std::abs(y);
    if (!ok && failing++ == 0) first_failing = i;
    if (x == y) continue;
    if (d > abs_max.value) abs_max = {i, d};
    const double r = y != 0 ? d / std::abs(y) : HUGE_VAL;
    if (r > rel_max.value) rel_max = {i, r};
  }
  out << name << ":\n";
  if (abs_max.value < 0 && nan_one == 0) {
    out << "  identical (" << va.size() << " values"
        << (nan_a > 0 ? ", NaN in the same places" : "") << ")\n";
  } else if (abs_max.value < 0) {
    out << "  the numbers both hold are identical\n";
  } else {
    out << format("  max |A - B|       = %.6g at %s: A = %.9g, B = %.9g\n", abs_max.value,
                  location(a, abs_max.index).c_str(), va[abs_max.index], vb[abs_max.index]);
    out << format("  max |A - B| / |B| = %.6g at %s: A = %.9g, B = %.9g\n", rel_max.value,
                  location(a, rel_max.index).c_str(), va[rel_max.index], vb[rel_max.index]);
  }
  out << format("  NaN: %zu in A, %zu in B\n", nan_a, nan_b);
  if (nan_one > 0)
    out << format("  %zu values NaN in one cube only, the first at %s\n", nan_one,
                  location(a, first_nan_one).c_str());
  if (failing > 0)
    out << format("  %zu of %zu values beyond |A - B| <= %g + %g * |B|, the first at %s\n", failing,
                  va.size(), atol, rtol, location(a, first_failing).c_str());
  return failing == 0 && nan_one == 0;
}

}  // namespace

CubeComparison compare_cubes(const Cube& a, const Cube& b, double rtol, double atol) {
  CubeComparison result;
  if (!(a.shape == b.shape)) {
    result.error = "shapes differ: A is " + describe(a) + ", B is " + describe(b);
    return result;
  }
  // Wavelength grids: same medium, start within 1e-6 pixel and step within 1e-9 relative (the
  // files store them in decimal text or double, either way far below these).
  const auto &wa = a.axes, &wb = b.axes;
  // A logarithmic grid: the same sampling, its step within 1e-9 relative too.
  const double step = wb.width_angstrom(0);
  if (wa.wavelength_medium != wb.wavelength_medium || wa.is_log() != wb.is_log() ||
      std::abs(wa.wave_start_angstrom - wb.wave_start_angstrom) > 1e-6 * step ||
      std::abs(wa.wave_step_angstrom - wb.wave_step_angstrom) > 1e-9 * step ||
      std::abs(wa.wave_log10_step - wb.wave_log10_step) > 1e-9 * wb.wave_log10_step) {
    result.error = format(
        "wavelength axes differ: A starts at %.10g Angstrom with step %.10g (log10 step %.10g, "
        "%s), B at %.10g with step %.10g (log10 step %.10g, %s)",
        wa.wave_start_angstrom, wa.wave_step_angstrom, wa.wave_log10_step,
        wa.wavelength_medium.c_str(), wb.wave_start_angstrom, wb.wave_step_angstrom,
        wb.wave_log10_step, wb.wavelength_medium.c_str());
    return result;
  }
  std::ostringstream out;
  if (wa.is_log())
    out << "shape " << describe(a) << ", wavelength " << wa.wave_start_angstrom << " x 10^(k * "
        << wa.wave_log10_step << ") Angstrom (" << wa.wavelength_medium << ")\n";
  else
    out << "shape " << describe(a) << ", wavelength " << wa.wave_start_angstrom << " + k * "
        << wa.wave_step_angstrom << " Angstrom (" << wa.wavelength_medium << ")\n";
  if (std::abs(wa.spaxel_arcsec - wb.spaxel_arcsec) > 1e-9 * wb.spaxel_arcsec ||
      std::abs(wa.ra_deg - wb.ra_deg) > 1e-9 || std::abs(wa.dec_deg - wb.dec_deg) > 1e-9)
    out << "note: the sky grids differ (spaxel " << wa.spaxel_arcsec << " vs " << wb.spaxel_arcsec
        << " arcsec, centre " << wa.ra_deg << ", " << wa.dec_deg << " vs " << wb.ra_deg << ", "
        << wb.dec_deg << " deg); values compared anyway\n";
  if (a.unit != b.unit) out << "note: units differ ('" << a.unit << "' vs '" << b.unit << "')\n";

  bool ok = compare_values("data", a, a.data, b.data, rtol, atol, out);
  if (!a.variance.empty() && !b.variance.empty())
    ok = compare_values("variance", a, a.variance, b.variance, rtol, atol, out) && ok;
  else if (a.variance.empty() != b.variance.empty())
    out << "note: only " << (a.variance.empty() ? "B" : "A") << " has a variance; not compared\n";
  out << (ok ? "PASS" : "FAIL") << ": within rtol = " << rtol << ", atol = " << atol
      << (ok ? "" : " (or NaN where the other cube has a number)") << "\n";
  result.status = ok ? 0 : 1;
  result.report = out.str();
  return result;
}

}  // namespace ifusim
