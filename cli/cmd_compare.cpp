// `ifusim compare A B`: are two cubes (FITS or HDF5, any mix) the same within a tolerance?
#include <cmath>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "io/cube/cube_io.h"

namespace ifusim::cli {
namespace {

struct Options {
  std::string a, b;
  double rtol = 1e-5;
  double atol = 0.0;
};

struct Where {
  std::size_t index = 0;
  double value = -1;  // the largest difference so far (-1: none yet)
};

std::string describe(const Cube& c) {
  return std::to_string(c.shape.nx) + " x " + std::to_string(c.shape.ny) + " x " +
         std::to_string(c.shape.n_wave) + " (nx x ny x n_wave)";
}

std::string location(const Cube& c, std::size_t index) {
  const std::size_t n_wave = static_cast<std::size_t>(c.shape.n_wave);
  const std::size_t spaxel = index / n_wave;
  const int k = static_cast<int>(index % n_wave);
  char buf[160];
  std::snprintf(buf, sizeof buf, "(ix %zu, iy %zu, wavelength %.6g Angstrom = pixel %d)",
                spaxel % static_cast<std::size_t>(c.shape.nx),
                spaxel / static_cast<std::size_t>(c.shape.nx), c.axes.wavelength_angstrom(k), k);
  return buf;
}

// Compares one array (data or variance); prints its report and returns whether it passes.
bool compare_values(const char* name, const Cube& a, const std::vector<double>& va,
                    const std::vector<double>& vb, const Options& o) {
  Where abs_max, rel_max;
  std::size_t nan_a = 0, nan_b = 0, failing = 0, first_failing = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    const double x = va[i], y = vb[i];
    const bool xn = std::isnan(x), yn = std::isnan(y);
    nan_a += xn;
    nan_b += yn;
    if (xn || yn) continue;
    const double d = std::abs(x - y);
    // numpy.allclose: |a - b| <= atol + rtol * |b|; an infinity must match exactly.
    const bool ok = (x == y) || d <= o.atol + o.rtol * std::abs(y);
    if (!ok && failing++ == 0) first_failing = i;
    if (x == y) continue;
    if (d > abs_max.value) abs_max = {i, d};
    const double r = y != 0 ? d / std::abs(y) : HUGE_VAL;
    if (r > rel_max.value) rel_max = {i, r};
  }
  std::cout << name << ":\n";
  if (abs_max.value < 0) {
    std::cout << "  identical (" << va.size() << " values)\n";
  } else {
    std::printf("  max |A - B|       = %.6g at %s: A = %.9g, B = %.9g\n", abs_max.value,
                location(a, abs_max.index).c_str(), va[abs_max.index], vb[abs_max.index]);
    std::printf("  max |A - B| / |B| = %.6g at %s: A = %.9g, B = %.9g\n", rel_max.value,
                location(a, rel_max.index).c_str(), va[rel_max.index], vb[rel_max.index]);
  }
  std::printf("  NaN: %zu in A, %zu in B\n", nan_a, nan_b);
  if (failing > 0)
    std::printf("  %zu of %zu values beyond |A - B| <= %g + %g * |B|, the first at %s\n", failing,
                va.size(), o.atol, o.rtol, location(a, first_failing).c_str());
  return failing == 0 && nan_a == 0 && nan_b == 0;
}

// 0: equal within tolerance; 1: beyond it (or NaN); 2: not comparable or unreadable.
int run_compare(const Options& o) {
  Cube a, b;
  try {
    a = read_cube(o.a);
    b = read_cube(o.b);
  } catch (const std::exception& e) {
    std::cerr << "ifusim compare: error: " << e.what() << "\n";
    return 2;
  }
  std::cout << "A: " << o.a << "\nB: " << o.b << "\n";
  if (!(a.shape == b.shape)) {
    std::cerr << "ifusim compare: error: shapes differ: A is " << describe(a) << ", B is "
              << describe(b) << "\n";
    return 2;
  }
  // Wavelength grids: same medium, start within 1e-6 pixel and step within 1e-9 relative (the
  // files store them in decimal text or double, either way far below these).
  const auto &wa = a.axes, &wb = b.axes;
  const double step = wb.wave_step_angstrom;
  if (wa.wavelength_medium != wb.wavelength_medium ||
      std::abs(wa.wave_start_angstrom - wb.wave_start_angstrom) > 1e-6 * step ||
      std::abs(wa.wave_step_angstrom - wb.wave_step_angstrom) > 1e-9 * step) {
    std::fprintf(stderr,
                 "ifusim compare: error: wavelength axes differ: A starts at %.10g Angstrom with "
                 "step %.10g (%s), B at %.10g with step %.10g (%s)\n",
                 wa.wave_start_angstrom, wa.wave_step_angstrom, wa.wavelength_medium.c_str(),
                 wb.wave_start_angstrom, wb.wave_step_angstrom, wb.wavelength_medium.c_str());
    return 2;
  }
  std::cout << "shape " << describe(a) << ", wavelength " << wa.wave_start_angstrom << " + k * "
            << wa.wave_step_angstrom << " Angstrom (" << wa.wavelength_medium << ")\n";
  if (std::abs(wa.spaxel_arcsec - wb.spaxel_arcsec) > 1e-9 * wb.spaxel_arcsec ||
      std::abs(wa.ra_deg - wb.ra_deg) > 1e-9 || std::abs(wa.dec_deg - wb.dec_deg) > 1e-9)
    std::cout << "note: the sky grids differ (spaxel " << wa.spaxel_arcsec << " vs "
              << wb.spaxel_arcsec << " arcsec, centre " << wa.ra_deg << ", " << wa.dec_deg << " vs "
              << wb.ra_deg << ", " << wb.dec_deg << " deg); values compared anyway\n";
  if (a.unit != b.unit)
    std::cout << "note: units differ ('" << a.unit << "' vs '" << b.unit << "')\n";

  bool ok = compare_values("data", a, a.data, b.data, o);
  if (!a.variance.empty() && !b.variance.empty())
    ok = compare_values("variance", a, a.variance, b.variance, o) && ok;
  else if (a.variance.empty() != b.variance.empty())
    std::cout << "note: only " << (a.variance.empty() ? "B" : "A")
              << " has a variance; not compared\n";
  std::cout << (ok ? "PASS" : "FAIL") << ": within rtol = " << o.rtol << ", atol = " << o.atol
            << (ok ? "" : " (or NaN present)") << "\n";
  return ok ? 0 : 1;
}

}  // namespace

void add_compare_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "compare",
      "Compare two cubes (FITS or HDF5, any mix): shapes and wavelength axes must match; prints "
      "the largest absolute and relative differences and where they are, and counts NaNs");
  cmd->add_option("A", options->a, "First cube (.fits or .h5)")->required();
  cmd->add_option("B", options->b, "Second cube, the reference (.fits or .h5)")->required();
  cmd->add_option("--rtol", options->rtol, "Relative tolerance (default 1e-5)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--atol", options->atol, "Absolute tolerance, in the cube's unit (default 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->footer(
      "Values pass where |A - B| <= atol + rtol * |B| (numpy.allclose, B the reference); data "
      "and,\n"
      "when both cubes have one, variance are compared. A NaN in either cube is a failure.\n"
      "Exit status: 0 within tolerance, 1 beyond it or NaN, 2 shapes or wavelength axes differ\n"
      "or a file cannot be read.");
  cmd->callback([options, &exit_code] { exit_code = run_compare(*options); });
}

}  // namespace ifusim::cli
