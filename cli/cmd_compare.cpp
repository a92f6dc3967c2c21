// `ifusim compare A B`: are two cubes (FITS or HDF5, any mix) the same within a tolerance?
#include <exception>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "io/cube/cube_compare.h"
#include "io/cube/cube_io.h"

namespace ifusim::cli {
namespace {

struct Options {
  std::string a, b;
  double rtol = 1e-5;
  double atol = 0.0;
};

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
  const CubeComparison result = compare_cubes(a, b, o.rtol, o.atol);
  if (result.status == 2) std::cerr << "ifusim compare: error: " << result.error << "\n";
  std::cout << result.report;
  return result.status;
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
      ->check(non_negative());
  cmd->add_option("--atol", options->atol, "Absolute tolerance, in the cube's unit (default 0)")
      ->check(non_negative());
  cmd->footer(
      "Values pass where |A - B| <= atol + rtol * |B| (numpy.allclose, B the reference); data "
      "and,\n"
      "when both cubes have one, variance are compared. A NaN in either cube is a failure.\n"
      "Exit status: 0 within tolerance, 1 beyond it or NaN, 2 shapes or wavelength axes differ\n"
      "or a file cannot be read.");
  cmd->callback([options, &exit_code] { exit_code = run_compare(*options); });
}

}  // namespace ifusim::cli
