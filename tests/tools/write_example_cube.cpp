// Writes tests/example_cube.h's cube as DIR/cube.fits and DIR/cube.h5, and DIR/expected.json with
// what an independent reader should find (tests/test_fits_astropy.py). With --check, reads
// DIR/astropy_cube.fits (written by that script with astropy: reference pixel at the corner, CD
// matrix, wavelengths in metres) and checks that ifusim's reader finds the example cube in it.
#include <array>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "../example_cube.h"
#include "io/cube/cube_io.h"

namespace {

int check_astropy_cube(const std::string& dir) {
  const ifusim::Cube want = ifusim::test::example_cube();
  const ifusim::Cube got = ifusim::read_cube(dir + "/astropy_cube.fits");
  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    std::cout << (ok ? "ok   " : "FAIL ") << what << "\n";
    failures += !ok;
  };
  check(got.shape == want.shape, "shape");
  // The centre comes from the inverse TAN projection of a corner reference pixel. The corner's
  // tangent plane is turned against the centre's by the convergence of the meridians
  // (~dRA sin Dec), so the two grids' pixel 6, 4 differ by ~7e-11 deg here (wcslib agrees): 1e-9.
  char buf[200];
  std::snprintf(buf, sizeof buf, "centre RA %.12f == %.12f, Dec %.12f == %.12f (1e-9 deg)",
                got.axes.ra_deg, want.axes.ra_deg, got.axes.dec_deg, want.axes.dec_deg);
  check(std::abs(got.axes.ra_deg - want.axes.ra_deg) < 1e-9 &&
            std::abs(got.axes.dec_deg - want.axes.dec_deg) < 1e-9,
        buf);
  std::snprintf(buf, sizeof buf, "wavelengths %.12g + k * %.12g Angstrom (1e-9 relative)",
                got.axes.wave_start_angstrom, got.axes.wave_step_angstrom);
  check(std::abs(got.axes.wave_start_angstrom / want.axes.wave_start_angstrom - 1) < 1e-9 &&
            std::abs(got.axes.wave_step_angstrom / want.axes.wave_step_angstrom - 1) < 1e-9 &&
            got.axes.wavelength_medium == "air",
        buf);
  check(std::abs(got.axes.spaxel_arcsec / want.axes.spaxel_arcsec - 1) < 1e-12, "spaxel size");
  check(got.unit == want.unit, "unit");
  check(got.variance.empty(), "no variance");
  std::size_t mismatches = got.data.size() == want.data.size() ? 0 : 1;
  for (std::size_t i = 0; mismatches == 0 && i < got.data.size(); ++i)
    mismatches += got.data[i] != static_cast<double>(static_cast<float>(want.data[i]));
  check(mismatches == 0, "data bitwise equal to the float32 example");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--check") {
    try {
      return check_astropy_cube(argv[2]);
    } catch (const std::exception& ex) {
      std::cerr << "write_example_cube --check: " << ex.what() << "\n";
      return 1;
    }
  }
  if (argc != 2) {
    std::cerr << "usage: write_example_cube DIR | write_example_cube --check DIR\n";
    return 2;
  }
  try {
    const std::string dir = argv[1];
    const ifusim::Cube cube = ifusim::test::example_cube();
    ifusim::write_cube_fits(cube, dir + "/cube.fits");
    ifusim::write_cube_hdf5(cube, dir + "/cube.h5");
    nlohmann::json e;
    e["nx"] = cube.shape.nx;
    e["ny"] = cube.shape.ny;
    e["n_wave"] = cube.shape.n_wave;
    e["ra_deg"] = cube.axes.ra_deg;
    e["dec_deg"] = cube.axes.dec_deg;
    e["spaxel_arcsec"] = cube.axes.spaxel_arcsec;
    e["wave_start_angstrom"] = cube.axes.wave_start_angstrom;
    e["wave_step_angstrom"] = cube.axes.wave_step_angstrom;
    e["ctype3"] = "AWAV";
    e["unit"] = cube.unit;
    e["config"] = cube.provenance[1].second;
    // A few voxels (ix, iy, k) and their float32 values, data and variance.
    for (auto [ix, iy, k] : {std::array<int, 3>{0, 0, 0}, {4, 6, 29}, {12, 8, 39}, {7, 2, 15}}) {
      const std::size_t i =
          (static_cast<std::size_t>(iy) * cube.shape.nx + ix) * cube.shape.n_wave + k;
      e["voxels"].push_back(
          {{"ix", ix},
           {"iy", iy},
           {"k", k},
           {"data", static_cast<double>(static_cast<float>(cube.data[i]))},
           {"variance", static_cast<double>(static_cast<float>(cube.variance[i]))}});
    }
    std::ofstream(dir + "/expected.json") << e.dump(1) << "\n";
    return 0;
  } catch (const std::exception& ex) {
    std::cerr << "write_example_cube: " << ex.what() << "\n";
    return 1;
  }
}
