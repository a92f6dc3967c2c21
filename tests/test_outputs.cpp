#include <omp.h>
#include <png.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/config_error.h"
#include "example_cube.h"
#include "io/cube/cube_io.h"
#include "io/cube/plane_blocks.h"
#include "io/cube/quicklook.h"
#include "io/hdf5.h"
#include "temp_dir.h"
#include "tests/cube_tolerance.h"

using namespace ifusim;
namespace fs = std::filesystem;

namespace {

using test::TempDir;

// Float32 storage: what a written value reads back as, exactly.
double as_float(double v) {
  return static_cast<double>(static_cast<float>(v));
}

void check_round_trip(const Cube& original, const Cube& back) {
  REQUIRE(back.shape == original.shape);
  REQUIRE(back.data.size() == original.data.size());
  REQUIRE(back.variance.size() == original.variance.size());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < original.data.size(); ++i) {
    mismatches += back.data[i] != as_float(original.data[i]);
    mismatches += back.variance[i] != as_float(original.variance[i]);
  }
  CHECK(mismatches == 0);  // bitwise, element by element, in spaxel-major order
  CHECK(back.at(4, 6, 29) == as_float(original.at(4, 6, 29)));
  CHECK(back.at(4, 6, 29) > 600.0);  // the blob's peak at the line: a real value, not zero
  // Axes: FITS stores the spaxel in degrees (x / 3600 * 3600), so 1e-12 relative there.
  CHECK(back.axes.spaxel_arcsec == Approx(original.axes.spaxel_arcsec).epsilon(1e-12));
  CHECK(back.axes.wave_start_angstrom == original.axes.wave_start_angstrom);
  CHECK(back.axes.wave_step_angstrom == original.axes.wave_step_angstrom);
  CHECK(back.axes.wavelength_medium == original.axes.wavelength_medium);
  CHECK(back.axes.ra_deg == original.axes.ra_deg);
  CHECK(back.axes.dec_deg == original.axes.dec_deg);
  CHECK(back.unit == original.unit);
  CHECK(back.provenance == original.provenance);  // incl. newline, quote, backslash, UTF-8
  // The maps: names, units, descriptions, values (NaN where undefined) in float32.
  REQUIRE(back.maps.size() == original.maps.size());
  for (const auto& [name, map] : original.maps) {
    INFO("map " << name);
    REQUIRE(back.maps.count(name) == 1);
    const SkyMap& got = back.maps.at(name);
    CHECK(got.unit == map.unit);
    CHECK(got.description == map.description);
    REQUIRE(got.values.size() == map.values.size());
    std::size_t map_mismatches = 0;
    for (std::size_t i = 0; i < map.values.size(); ++i)
      map_mismatches += std::isnan(map.values[i]) ? !std::isnan(got.values[i])
                                                  : got.values[i] != as_float(map.values[i]);
    CHECK(map_mismatches == 0);
  }
}

struct Png {
  png_uint_32 width = 0, height = 0;
  std::vector<std::array<std::uint8_t, 3>> pixels;
  std::size_t n_colours() const {
    return std::set<std::array<std::uint8_t, 3>>(pixels.begin(), pixels.end()).size();
  }
  bool has(std::array<std::uint8_t, 3> c) const {
    return std::find(pixels.begin(), pixels.end(), c) != pixels.end();
  }
};

// Reads a PNG back with libpng's simplified API, as 8-bit RGB.
Png read_png(const std::string& path) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  REQUIRE(png_image_begin_read_from_file(&image, path.c_str()) != 0);
  image.format = PNG_FORMAT_RGB;
  std::vector<std::uint8_t> buffer(PNG_IMAGE_SIZE(image));
  REQUIRE(png_image_finish_read(&image, nullptr, buffer.data(), 0, nullptr) != 0);
  Png out;
  out.width = image.width;
  out.height = image.height;
  for (std::size_t i = 0; i + 2 < buffer.size(); i += 3)
    out.pixels.push_back({buffer[i], buffer[i + 1], buffer[i + 2]});
  return out;
}

// Runs the ifusim binary; returns its exit status and fills `output` with stdout + stderr.
int run_ifusim(const std::string& args, std::string& output, const TempDir& dir) {
  const std::string log = dir / "log.txt";
  const int status =
      std::system((std::string(IFUSIM_BINARY) + " " + args + " > " + log + " 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  output = ss.str();
  fs::remove(log);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("outputs: the writers' plane blocks are the exact transposition, in order, any threads",
          "[outputs]") {
  // 7 x 5 spaxels x 83 planes: blocks of 32 planes (the least a block holds), of 64 and of all
  // 83; the calling thread writes while the others make the next block, on 1 to 3 threads.
  const CubeShape shape{7, 5, 83};
  const std::size_t n_spaxels = shape.n_spaxels();
  std::vector<float> values(shape.n_voxels());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f + 1.0f;
  const int threads = omp_get_max_threads();
  for (const int t : {1, 2, 3}) {
    omp_set_num_threads(t);
    for (const std::size_t max_elements : {std::size_t{1}, 64 * n_spaxels, std::size_t{1} << 20}) {
      std::vector<float> stored;  // what a writer would store: (n_wave, ny, nx)
      int next = 0;
      bool on_caller = true;
      const int caller = omp_get_thread_num();
      detail::for_each_plane_block<float>(
          shape, values, max_elements, [&](int k0, int k1, float* block) {
            CHECK(k0 == next);
            next = k1;
            on_caller = on_caller && omp_get_thread_num() == caller;
            stored.insert(stored.end(), block, block + (k1 - k0) * n_spaxels);
          });
      CHECK(on_caller);
      CHECK(next == shape.n_wave);
      REQUIRE(stored.size() == values.size());
      std::size_t wrong = 0;
      for (std::size_t sp = 0; sp < n_spaxels; ++sp)
        for (int k = 0; k < shape.n_wave; ++k)
          wrong +=
              stored[static_cast<std::size_t>(k) * n_spaxels + sp] != values[sp * shape.n_wave + k];
      CHECK(wrong == 0);
    }
    // A write that fails stops the pass and its exception reaches the caller.
    int writes = 0;
    CHECK_THROWS_WITH(detail::for_each_plane_block<float>(shape, values, 1,
                                                          [&](int, int, float*) {
                                                            if (++writes == 2)
                                                              throw InputError("disk full");
                                                          }),
                      "disk full");
    CHECK(writes == 2);
  }
  omp_set_num_threads(threads);
}

TEST_CASE("outputs: FITS cube round trip, bitwise in float32", "[outputs]") {
  TempDir dir("fits");
  const Cube cube = test::example_cube();
  write_cube_fits(cube, dir / "cube.fits");
  CHECK(dir.n_files() == 1);  // no temporary left behind
  check_round_trip(cube, read_cube_fits(dir / "cube.fits"));
  check_round_trip(cube, read_cube(dir / "cube.fits"));
  // Writing again replaces the file.
  Cube twice = cube;
  for (auto& v : twice.data) v *= 2;
  write_cube_fits(twice, dir / "cube.fits");
  CHECK(read_cube(dir / "cube.fits").at(4, 6, 29) == as_float(2 * cube.at(4, 6, 29)));
}

TEST_CASE("outputs: HDF5 cube round trip, bitwise in float32, and its layout", "[outputs]") {
  TempDir dir("hdf5");
  const Cube cube = test::example_cube();
  write_cube_hdf5(cube, dir / "cube.h5");
  CHECK(dir.n_files() == 1);
  check_round_trip(cube, read_cube_hdf5(dir / "cube.h5"));
  check_round_trip(cube, read_cube(dir / "cube.h5"));
  // The documented layout: /data (n_wave, ny, nx), wavelengths of the pixel centres.
  h5::File f(dir / "cube.h5");
  CHECK(f.shape("data") == std::vector<hsize_t>{40, 9, 13});
  CHECK(f.shape("variance") == std::vector<hsize_t>{40, 9, 13});
  const auto data = f.read<float>("data");
  CHECK(data[(29 * 9 + 6) * 13 + 4] == static_cast<float>(cube.at(4, 6, 29)));
  const auto wave = f.read<double>("wavelength_angstrom");
  REQUIRE(wave.size() == 40);
  CHECK(wave[17] == 4750.0 + 17 * 1.25);
  CHECK(f.string_attribute("unit", "variance") == "10**(-40)*erg**2/(s**2*cm**4*Angstrom**2)");
  CHECK(f.string_attribute("CTYPE3", "data") == "AWAV");
}

TEST_CASE("outputs: a cube without variance, in vacuum, round-trips in both formats", "[outputs]") {
  TempDir dir("novar");
  Cube cube = test::example_cube();
  cube.variance.clear();
  cube.axes.wavelength_medium = "vacuum";
  cube.unit = "Msun";
  cube.provenance.clear();
  for (const char* name : {"cube.fits", "cube.hdf5"}) {
    write_cube(cube, dir / name);
    const Cube back = read_cube(dir / name);
    CHECK(back.variance.empty());
    CHECK(back.axes.wavelength_medium == "vacuum");
    CHECK(back.unit == "Msun");
    CHECK(back.provenance.empty());
    CHECK(back.at(12, 8, 39) == as_float(cube.at(12, 8, 39)));
  }
}

TEST_CASE("outputs: the float32 cube comes back bitwise, maps float32 cannot hold as float64",
          "[outputs]") {
  TempDir dir("float32");
  Cube cube = test::example_cube();
  // The cube is held as float32 (data/datacube.h) and written as it is held: every value, a
  // subnormal variance (1e-40) included, comes back bit for bit from either file.
  for (auto& v : cube.data) v *= 1e-20f;
  for (auto& v : cube.variance) v *= 1e-30f;
  cube.variance[7] = 1e-40f;
  cube.unit = "erg/(s*cm**2*Angstrom)";
  // Maps stay double, stored as float32 only where that holds them.
  CHECK(fits_in_float32({0.0, -0.0, std::nan(""), 1.0f, -3.4e38}));
  CHECK_FALSE(fits_in_float32({1e39}));
  CHECK_FALSE(fits_in_float32({1e-46}));
  for (const char* name : {"cube.fits", "cube.h5"}) {
    write_cube(cube, dir / name);
    const Cube back = read_cube(dir / name);
    REQUIRE(back.data.size() == cube.data.size());
    REQUIRE(back.variance.size() == cube.variance.size());
    CHECK(std::memcmp(back.data.data(), cube.data.data(), cube.data.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(back.variance.data(), cube.variance.data(),
                      cube.variance.size() * sizeof(float)) == 0);
    CHECK(back.variance[7] == 1e-40f);
  }
}

TEST_CASE("outputs: bad cubes and bad files give clear errors and leave no file", "[outputs]") {
  TempDir dir("errors");
  Cube cube = test::example_cube();
  cube.data.pop_back();
  for (const char* name : {"cube.fits", "cube.h5"}) {
    CHECK_THROWS_WITH(
        write_cube(cube, dir / name),
        Catch::Contains(name) && Catch::Contains("cube has 4679 values, its shape needs 4680"));
  }
  cube = test::example_cube();
  cube.provenance.push_back({"snapshot", "98"});
  CHECK_THROWS_WITH(write_cube(cube, dir / "cube.h5"),
                    Catch::Contains("provenance key \"snapshot\" appears twice"));
  cube = test::example_cube();
  cube.maps["white_light"].values.pop_back();
  CHECK_THROWS_WITH(write_cube(cube, dir / "cube.fits"),
                    Catch::Contains("map \"white_light\" has 116 values, the field has 117"));
  cube = test::example_cube();
  cube.maps["stat"] = cube.maps["white_light"];
  CHECK_THROWS_WITH(write_cube(cube, dir / "cube.h5"),
                    Catch::Contains("map name \"stat\" is taken"));
  cube = test::example_cube();
  cube.axes.wavelength_medium = "water";
  CHECK_THROWS_WITH(write_cube(cube, dir / "cube.fits"), Catch::Contains("wavelength medium"));
  // A failure after the temporary file was created (too many provenance cards for FITS) removes
  // it; so does one at its creation (a directory that does not exist).
  cube = test::example_cube();
  for (int i = 0; i < 1000; ++i)
    cube.provenance.push_back({std::string("k").append(std::to_string(i)), "v"});
  CHECK_THROWS_WITH(write_cube(cube, dir / "cube.fits"),
                    Catch::Contains("at most 999 provenance entries"));
  CHECK_THROWS_WITH(write_cube(test::example_cube(), dir / "missing/cube.fits"),
                    Catch::Contains("missing/cube.fits"));
  CHECK(dir.n_files() == 0);

  CHECK_THROWS_WITH(read_cube(dir / "cube.txt"), Catch::Contains("unknown cube file type"));
  CHECK_THROWS_AS(read_cube(dir / "absent.fits"), InputError);
  CHECK_THROWS_WITH(read_cube(dir / "absent.fits"),
                    Catch::Contains("absent.fits: cannot open FITS file"));
  // An HDF5 file that is not a cube.
  {
    h5::File f(dir / "other.h5", h5::File::Mode::truncate);
    f.write<float>("x", {1, 2}, {2});
  }
  CHECK_THROWS_WITH(read_cube(dir / "other.h5"),
                    Catch::Contains("other.h5: attribute \"format\" of /"));
}

TEST_CASE("outputs: squared units parse the way astropy does", "[outputs]") {
  CHECK(squared_unit("10**(-20)*erg/(s*cm**2*Angstrom)") ==
        "10**(-40)*erg**2/(s**2*cm**4*Angstrom**2)");
  CHECK(squared_unit("10**(-20)*erg/s/cm**2/Angstrom") ==
        "10**(-40)*erg**2/(s**2*cm**4*Angstrom**2)");
  CHECK(squared_unit("erg/s/cm2/Angstrom") == "erg**2/(s**2*cm**4*Angstrom**2)");
  CHECK(squared_unit("km/s") == "km**2/s**2");
  CHECK(squared_unit("Msun") == "Msun**2");
  CHECK(squared_unit("km s-1") == "km**2*s**(-2)");
  CHECK(squared_unit("") == "");
  CHECK(squared_unit("/s") == "(/s)**2");
  CHECK(squared_unit("erg/(s/cm)") == "(erg/(s/cm))**2");
  CHECK(squared_unit("erg/(s cm2)") == "erg**2/(s**2*cm**4)");
}

TEST_CASE("outputs: compare exits 0 for equal cubes, 1 beyond tolerance, 2 for other shapes",
          "[outputs]") {
  TempDir dir("compare");
  const Cube cube = test::example_cube();
  write_cube(cube, dir / "a.fits");
  write_cube(cube, dir / "a.h5");
  std::string out;
  CHECK(run_ifusim("compare " + (dir / "a.fits") + " " + (dir / "a.h5"), out, dir) == 0);
  CHECK_THAT(out, Catch::Contains("identical") && Catch::Contains("PASS"));

  // One voxel off by 1e-3 relative: fails at the default rtol 1e-5 and names the voxel, passes
  // at rtol 2e-3.
  Cube perturbed = cube;
  const std::size_t i = (static_cast<std::size_t>(6) * 13 + 4) * 40 + 29;
  perturbed.data[i] *= 1.001;
  write_cube(perturbed, dir / "b.h5");
  CHECK(run_ifusim("compare " + (dir / "b.h5") + " " + (dir / "a.fits"), out, dir) == 1);
  CHECK_THAT(out, Catch::Contains("(ix 4, iy 6, wavelength 4786.25 Angstrom = pixel 29)") &&
                      Catch::Contains("1 of 4680 values beyond") && Catch::Contains("FAIL"));
  CHECK(run_ifusim("compare --rtol 2e-3 " + (dir / "b.h5") + " " + (dir / "a.fits"), out, dir) ==
        0);
  CHECK(run_ifusim("compare --rtol 0 --atol 1 " + (dir / "b.h5") + " " + (dir / "a.fits"), out,
                   dir) == 0);

  // A NaN against a number is a failure whatever the tolerance.
  perturbed = cube;
  perturbed.data[7] = std::nan("");
  write_cube(perturbed, dir / "nan.fits");
  CHECK(run_ifusim("compare --rtol 1 --atol 1e30 " + (dir / "nan.fits") + " " + (dir / "a.h5"), out,
                   dir) == 1);
  CHECK_THAT(out, Catch::Contains("NaN: 1 in A, 0 in B") &&
                      Catch::Contains("1 values NaN in one cube only"));
  // NaN in the same voxels of both (a spaxel outside an aperture) is equal, also at rtol 0; a NaN
  // moved to another voxel is not.
  for (int k = 0; k < 40; ++k) perturbed.data[static_cast<std::size_t>(5) * 40 + k] = std::nan("");
  write_cube(perturbed, dir / "masked_a.fits");
  write_cube(perturbed, dir / "masked_b.h5");
  CHECK(run_ifusim("compare --rtol 0 " + (dir / "masked_a.fits") + " " + (dir / "masked_b.h5"), out,
                   dir) == 0);
  CHECK_THAT(out, Catch::Contains("identical (4680 values, NaN in the same places)") &&
                      Catch::Contains("PASS") && !Catch::Contains("FAIL"));
  perturbed.data[8] = std::nan("");
  write_cube(perturbed, dir / "masked_c.h5");
  CHECK(run_ifusim("compare --rtol 0 " + (dir / "masked_a.fits") + " " + (dir / "masked_c.h5"), out,
                   dir) == 1);

  // Shapes and wavelength axes must match.
  Cube smaller = cube;
  smaller.shape.n_wave = 39;
  smaller.data.resize(smaller.shape.n_voxels());
  smaller.variance.clear();
  write_cube(smaller, dir / "small.fits");
  CHECK(run_ifusim("compare " + (dir / "small.fits") + " " + (dir / "a.fits"), out, dir) == 2);
  CHECK_THAT(
      out, Catch::Contains("shapes differ: A is 13 x 9 x 39 (nx x ny x n_wave), B is 13 x 9 x 40"));
  Cube shifted = cube;
  shifted.axes.wave_start_angstrom += 1.25;
  write_cube(shifted, dir / "shifted.h5");
  CHECK(run_ifusim("compare " + (dir / "shifted.h5") + " " + (dir / "a.fits"), out, dir) == 2);
  CHECK_THAT(out, Catch::Contains("wavelength axes differ"));
  CHECK(run_ifusim("compare " + (dir / "absent.h5") + " " + (dir / "a.fits"), out, dir) == 2);
  CHECK_THAT(out, Catch::Contains("absent.h5: cannot open HDF5 file"));
}

TEST_CASE("outputs: white-light image and integrated spectrum", "[outputs]") {
  const Cube cube = test::example_cube();
  const auto image = spaxel_means(cube);
  const auto spectrum = integrated_spectrum(cube);
  REQUIRE(image.size() == 13 * 9);
  REQUIRE(spectrum.size() == 40);
  // Against the closed form the cube was built from: sums of 40 (or 117) float32 voxels.
  double spectrum_sum = 0, blob_sum = 0;
  for (int k = 0; k < 40; ++k) spectrum_sum += test::example_spectrum(4750.0 + 1.25 * k);
  for (int iy = 0; iy < 9; ++iy)
    for (int ix = 0; ix < 13; ++ix) {
      blob_sum += test::example_blob(ix, iy);
      CHECK(
          image[iy * 13 + ix] ==
          Approx(100.0 * test::example_blob(ix, iy) * spectrum_sum / 40).epsilon(test::kCubeValue));
    }
  for (int k = 0; k < 40; ++k)
    CHECK(spectrum[k] == Approx(100.0 * blob_sum * test::example_spectrum(4750.0 + 1.25 * k))
                             .epsilon(test::kCubeValue));
}

TEST_CASE("outputs: quick-look PNGs are valid, sized and not uniform", "[outputs]") {
  TempDir dir("png");
  const Cube cube = test::example_cube();
  const auto image = spaxel_means(cube);
  write_map_png(
      dir / "white_light.png", image, 13, 9,
      MapStyle{"white light", Colormap::viridis, false, false, "10**(-20)*erg/(s*cm**2*Angstrom)"});
  // A velocity-like map: antisymmetric in x, with empty (NaN) spaxels in one corner.
  std::vector<double> velocity(13 * 9);
  for (int iy = 0; iy < 9; ++iy)
    for (int ix = 0; ix < 13; ++ix)
      velocity[iy * 13 + ix] = (ix + iy < 3) ? std::nan("") : 25.0 * (ix - 6) + 3.0 * iy;
  write_map_png(dir / "velocity.png", velocity, 13, 9,
                MapStyle{"velocity", Colormap::diverging, true, false, "km/s"});
  write_spectrum_png(dir / "spectrum.png", wavelength_angstrom(cube), integrated_spectrum(cube),
                     "wavelength [Angstrom]", "flux [10**(-20)*erg/s/cm**2/Angstrom]",
                     "integrated spectrum");
  CHECK(dir.n_files() == 3);

  const Png white = read_png(dir / "white_light.png");
  const Png vel = read_png(dir / "velocity.png");
  const Png spec = read_png(dir / "spectrum.png");
  // 13 x 9 spaxels at 36 px each (480 / 13), plus margins and the colour bar.
  CHECK(white.width >= 13 * 36);
  CHECK(white.height >= 9 * 36);
  CHECK(spec.width == 900);
  CHECK(spec.height == 520);
  CHECK(white.n_colours() > 50);  // a smooth blob and a colour bar, not a flat image
  CHECK(vel.n_colours() > 30);
  CHECK(spec.n_colours() > 3);
  const std::array<std::uint8_t, 3> grey = {160, 160, 160}, viridis_top = {253, 231, 37};
  CHECK(vel.has(grey));           // empty spaxels drawn grey
  CHECK_FALSE(white.has(grey));   // none in the white-light image
  CHECK(white.has(viridis_top));  // the colour bar reaches the map's maximum colour

  // One outlier does not wash the map out: the colours span the 2nd-98th percentile, the values
  // beyond take the end colours. A log-scale map's values <= 0 take the lowest colour, not grey.
  std::vector<double> ramp(13 * 9);
  for (std::size_t i = 0; i < ramp.size(); ++i) ramp[i] = 1.0 + static_cast<double>(i);
  ramp[116] = 1e6;
  ramp[0] = -5;
  write_map_png(dir / "ramp.png", ramp, 13, 9,
                MapStyle{"ramp", Colormap::viridis, false, true, "counts"});
  const Png r = read_png(dir / "ramp.png");
  // The centre of spaxel i (32 px spaxels, the largest drawn, from (16, 38); row iy = 0 at the
  // bottom).
  auto at = [&](std::size_t i) {
    const std::size_t ix = i % 13, iy = i / 13;
    return r.pixels[(38 + (8 - iy) * 32 + 16) * r.width + 16 + ix * 32 + 16];
  };
  const std::array<std::uint8_t, 3> viridis_bottom = {68, 1, 84};
  CHECK(at(0) == viridis_bottom);  // -5 on a log scale
  CHECK(at(116) == viridis_top);   // the outlier, saturated
  CHECK(at(115) == viridis_top);   // above the 98th percentile
  const auto middle = at(58);      // log10(59) of log10(3) .. log10(115): the upper middle
  CHECK(middle != viridis_bottom);
  CHECK(middle != viridis_top);
  CHECK(int(middle[1]) > 120);  // viridis' green rises through the range: not near the bottom
  CHECK_FALSE(r.has(grey));

  CHECK_THROWS_WITH(write_map_png(dir / "bad.png", image, 12, 9, MapStyle{}),
                    Catch::Contains("map of 117 values for nx = 12, ny = 9"));
  CHECK_THROWS_AS(write_map_png(dir / "missing/bad.png", image, 13, 9, MapStyle{}), InputError);
  CHECK(dir.n_files() == 4);
}
