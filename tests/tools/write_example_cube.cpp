// Writes tests/example_cube.h's cube as DIR/cube.fits and DIR/cube.h5, and DIR/expected.json with
// what an independent reader should find (tests/test_fits_astropy.py).
#include <array>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "../example_cube.h"
#include "io/cube/cube_io.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: write_example_cube DIR\n";
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
