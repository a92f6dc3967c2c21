// Logarithmic wavelength axes and the MaNGA LOGCUBE layout (issue 25, survey data products):
// the MaNGA presets' grid against Law et al. 2016 (AJ 152, 83), the FITS and HDF5 files of a
// logarithmic cube read back, the MaNGA extensions (IVAR, MASK, WAVE, SPECRES, PRESPECRES), and the
// noise stage's per-Angstrom S/N on bins of different widths. The cube's WCS as astropy reads it
// and fitsverify are checked on a pipeline run (tests/test_pipeline_fits.py with MaNGA-12).
#include <fitsio.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "core/config_error.h"
#include "example_cube.h"
#include "io/cube/cube_io.h"
#include "io/hdf5.h"
#include "io/telescope.h"
#include "stages/noise/noise.h"
#include "temp_dir.h"
#include "tests/cube_tolerance.h"

using namespace ifusim;
namespace fs = std::filesystem;

namespace {

float as_float(double v) {
  return static_cast<float>(v);
}

// The example cube (tests/example_cube.h) on a logarithmic grid of MaNGA's step from 4750 A.
Cube log_example_cube() {
  Cube c = test::example_cube();
  c.axes.wave_step_angstrom = 0.0;
  c.axes.wave_log10_step = 1e-4;
  c.axes.wavelength_medium = "vacuum";
  for (int iy = 0; iy < c.shape.ny; ++iy)
    for (int ix = 0; ix < c.shape.nx; ++ix)
      for (int k = 0; k < c.shape.n_wave; ++k) {
        const std::size_t i = (static_cast<std::size_t>(iy) * c.shape.nx + ix) * c.shape.n_wave + k;
        c.data[i] = 100.0 * test::example_blob(ix, iy) *
                    test::example_spectrum(c.axes.wavelength_angstrom(k));
        c.variance[i] = 0.1 * c.data[i] + 0.5;
      }
  return c;
}

using test::TempDir;

}  // namespace

TEST_CASE("logcube: the MaNGA presets are the DRP's LOGCUBE grid", "[logcube]") {
  // Law et al. 2016, AJ 152, 83: 3621.6-10353.8 A, dlog10(lambda) = 1e-4, 4563 pixels, vacuum.
  for (const char* name : {"MaNGA-12", "MaNGA-32"}) {
    CAPTURE(name);
    const Telescope t = load_telescope_preset(name, "telescope");
    CHECK(t.n_wave() == 4563);
    CHECK(t.wave_log10_step == 1e-4);
    CHECK(t.wave_step_angstrom == 0.0);
    CHECK(t.wavelength_medium == "vacuum");
    CHECK(t.fits_layout == "manga");
    CubeAxes axes;
    axes.wave_start_angstrom = t.wave_start_angstrom;
    axes.wave_log10_step = t.wave_log10_step;
    CHECK(axes.wavelength_angstrom(0) == Approx(3621.6).margin(0.01));
    CHECK(axes.wavelength_angstrom(4562) == Approx(10353.8).margin(0.01));
    // log10 of the first centre is MaNGA's 3.5589 (its header's CRVAL3 = 3621.59598486 A).
    CHECK(std::log10(axes.wavelength_angstrom(0)) == Approx(3.5589).margin(1e-9));
    // Bins: edges at the centres' geometric midpoints, widths growing as lambda.
    for (int k : {0, 1000, 4562}) {
      CHECK(axes.edge_angstrom(k) ==
            Approx(std::sqrt(axes.wavelength_angstrom(k - 1) * axes.wavelength_angstrom(k)))
                .epsilon(1e-13));
      CHECK(axes.width_angstrom(k) ==
            Approx(axes.wavelength_angstrom(k) * (std::pow(10.0, 0.5e-4) - std::pow(10.0, -0.5e-4)))
                .epsilon(1e-10));  // a difference of two edges ~1e4 times a width
    }
  }
}

TEST_CASE("logcube: the wavelength keys are validated", "[logcube]") {
  const nlohmann::json base = {
      {"name", "t"}, {"fov_arcsec", 10.0}, {"spaxel_arcsec", 0.5}, {"lsf_fwhm_angstrom", 2.5}};
  auto with = [&](nlohmann::json wavelength) {
    nlohmann::json t = base;
    t["wavelength"] = std::move(wavelength);
    return parse_telescope(t, "telescope");
  };
  const Telescope t =
      with({{"start_angstrom", 4000.0}, {"end_angstrom", 5000.0}, {"log10_step", 1e-4}});
  // ceil(log10(5000 / 4000) / 1e-4) = ceil(969.1): the end is exclusive, as for linear grids.
  CHECK(t.n_wave() == 970);
  CHECK_THROWS_WITH(
      with({{"start_angstrom", 4000.0},
            {"end_angstrom", 5000.0},
            {"log10_step", 1e-4},
            {"step_angstrom", 1.0}}),
      Catch::Contains("telescope.wavelength.step_angstrom") && Catch::Contains("not both"));
  CHECK_THROWS_WITH(
      with({{"start_angstrom", 4000.0}, {"end_angstrom", 5000.0}, {"log10_step", 0.2}}),
      Catch::Contains("telescope.wavelength.log10_step"));
  CHECK_THROWS_WITH(
      with({{"start_angstrom", 4000.0}, {"end_angstrom", 5000.0}, {"log10_step", -1e-4}}),
      Catch::Contains("telescope.wavelength.log10_step"));
  CHECK_THROWS_WITH(with({{"start_angstrom", 4000.0}, {"end_angstrom", 5000.0}}),
                    Catch::Contains("step_angstrom"));
  CHECK_THROWS_WITH(parse_telescope(
                        [&] {
                          nlohmann::json j = base;
                          j["wavelength"] = {{"start_angstrom", 4000.0},
                                             {"end_angstrom", 5000.0},
                                             {"step_angstrom", 1.0}};
                          j["fits_layout"] = "sami";
                          return j;
                        }(),
                        "telescope"),
                    Catch::Contains("telescope.fits_layout"));
}

TEST_CASE("logcube: a logarithmic cube round-trips through FITS and HDF5", "[logcube][outputs]") {
  TempDir dir("roundtrip");
  const Cube cube = log_example_cube();
  for (const char* name : {"cube.fits", "cube.h5"}) {
    CAPTURE(name);
    write_cube(cube, dir / name);
    const Cube back = read_cube(dir / name);
    REQUIRE(back.shape == cube.shape);
    CHECK(back.axes.is_log());
    CHECK(back.axes.wave_step_angstrom == 0.0);
    CHECK(back.axes.wave_start_angstrom == Approx(cube.axes.wave_start_angstrom).epsilon(1e-14));
    CHECK(back.axes.wave_log10_step == Approx(1e-4).epsilon(1e-13));
    CHECK(back.axes.wavelength_medium == "vacuum");
    for (int k = 0; k < cube.shape.n_wave; ++k)
      REQUIRE(back.axes.wavelength_angstrom(k) ==
              Approx(cube.axes.wavelength_angstrom(k)).epsilon(1e-13));
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < cube.data.size(); ++i)
      mismatches += back.data[i] != as_float(cube.data[i]);
    CHECK(mismatches == 0);
    CHECK(back.at(4, 6, 29) > 100.0);
  }
  // The HDF5 wavelengths are the centres, and its WCS attributes those of the FITS file.
  h5::File f(dir / "cube.h5");
  const auto wave = f.read<double>("wavelength_angstrom");
  REQUIRE(wave.size() == 40);
  CHECK(wave[17] == Approx(4750.0 * std::pow(10.0, 17e-4)).epsilon(1e-14));
  CHECK(f.string_attribute("CTYPE3", "data") == "WAVE-LOG");
  CHECK(f.attribute<double>("CDELT3", "data") ==
        Approx(4750.0 * std::log(10.0) * 1e-4).epsilon(1e-14));
  // A linear file has no log10 step: linear files are as they were.
  write_cube(test::example_cube(), dir / "linear.h5");
  CHECK_FALSE(h5::File(dir / "linear.h5").has_attribute("wave_log10_step"));
}

TEST_CASE("logcube: the MaNGA layout writes FLUX, IVAR, MASK, WAVE, SPECRES(D) and PRESPECRES(D)",
          "[logcube][outputs]") {
  TempDir dir("manga");
  Cube cube = log_example_cube();
  cube.fits_layout = "manga";
  // Outside an aperture: no data, no variance.
  for (int k = 0; k < cube.shape.n_wave; ++k) {
    const std::size_t i = static_cast<std::size_t>(k);  // spaxel (0, 0)
    cube.data[i] = cube.variance[i] = std::nan("");
  }
  for (int k = 0; k < cube.shape.n_wave; ++k) cube.lsf_fwhm_angstrom.push_back(2.8 + 1e-4 * k);
  write_cube_fits(cube, dir / "cube.fits");
  const Cube back = read_cube(dir / "cube.fits");
  CHECK(back.fits_layout == "manga");
  CHECK(back.axes.is_log());
  REQUIRE(back.variance.size() == cube.variance.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < cube.data.size(); ++i) {
    if (std::isnan(cube.data[i])) {
      bad += !std::isnan(back.data[i]) || !std::isnan(back.variance[i]);
      continue;
    }
    bad += back.data[i] != as_float(cube.data[i]);
    // 1 / IVAR, IVAR = 1 / variance rounded to float32.
    bad += std::abs(back.variance[i] / cube.variance[i] - 1) > 1e-6;
  }
  CHECK(bad == 0);
  REQUIRE(back.lsf_fwhm_angstrom.size() == cube.lsf_fwhm_angstrom.size());
  for (std::size_t k = 0; k < cube.lsf_fwhm_angstrom.size(); ++k)
    CHECK(back.lsf_fwhm_angstrom[k] == Approx(cube.lsf_fwhm_angstrom[k]).epsilon(1e-13));
  {
    // The DRP data model: PRESPECRES = lambda / FWHM of the pre-pixel LSF, SPECRES that of the
    // pixelised one, FWHM^2 + 8 ln 2 width^2 / 12 (a Gaussian convolved with the pixel's top hat).
    // A file with SPECRES alone (PRESPECRES deleted) gives the same LSF back.
    fitsfile* f = nullptr;
    int status = 0;
    fits_open_file(&f, (dir / "cube.fits").c_str(), READWRITE, &status);
    const auto read_1d = [&](const char* extname) {
      fits_movnam_hdu(f, IMAGE_HDU, const_cast<char*>(extname), 0, &status);
      std::vector<double> v(static_cast<std::size_t>(cube.shape.n_wave));
      long first = 1;
      int any_null = 0;
      fits_read_pix(f, TDOUBLE, &first, cube.shape.n_wave, nullptr, v.data(), &any_null, &status);
      REQUIRE(status == 0);
      return v;
    };
    // SPECRESD, PRESPECRESD: the resolution's standard deviation between the fibres, 0 for the
    // simulated instrument's one LSF curve (written so that readers of DR17's model find them).
    for (const char* extname : {"SPECRESD", "PRESPECRESD"}) {
      CAPTURE(extname);
      const std::vector<double> spread = read_1d(extname);
      CHECK(std::count(spread.begin(), spread.end(), 0.0) == cube.shape.n_wave);
    }
    const std::vector<double> post = read_1d("SPECRES"), pre = read_1d("PRESPECRES");
    for (int k = 0; k < cube.shape.n_wave; k += 7) {
      const double lambda = cube.axes.wavelength_angstrom(k);
      const double width = lambda * (std::pow(10.0, 0.5e-4) - std::pow(10.0, -0.5e-4));
      const double fwhm = 2.8 + 1e-4 * k;
      CHECK(pre[k] == Approx(lambda / fwhm).epsilon(1e-12));
      CHECK(post[k] ==
            Approx(lambda / std::sqrt(fwhm * fwhm + 8 * std::log(2.0) * width * width / 12))
                .epsilon(1e-12));
    }
    fits_delete_hdu(f, nullptr, &status);  // the current HDU: PRESPECRES
    fits_close_file(f, &status);
    REQUIRE(status == 0);
    const Cube specres_only = read_cube(dir / "cube.fits");
    REQUIRE(specres_only.lsf_fwhm_angstrom.size() == cube.lsf_fwhm_angstrom.size());
    for (std::size_t k = 0; k < cube.lsf_fwhm_angstrom.size(); ++k)
      CHECK(specres_only.lsf_fwhm_angstrom[k] == Approx(cube.lsf_fwhm_angstrom[k]).epsilon(1e-10));
  }
  // The inverse variance's unit: the flux unit to the power -2, in the FITS form.
  CHECK(inverse_squared_unit("10**(-20)*erg/(s*cm**2*Angstrom)") ==
        "10**40*s**2*cm**4*Angstrom**2/erg**2");
  CHECK(inverse_squared_unit("Msun") == "1/Msun**2");
  CHECK(inverse_squared_unit("km/s") == "s**2/km**2");
  CHECK(squared_unit("10**(-20)*erg/(s*cm**2*Angstrom)") ==
        "10**(-40)*erg**2/(s**2*cm**4*Angstrom**2)");  // unchanged
}

TEST_CASE("logcube: a per-Angstrom S/N gives each logarithmic plane its own noise",
          "[logcube][noise]") {
  // A flat cube with background-only noise: the variance of plane k is
  // (S_ref / (snr sqrt(width_k)))^2, so it falls as 1 / width along a logarithmic grid.
  Cube cube;
  cube.shape = {4, 4, 200};
  cube.axes.wave_start_angstrom = 4000.0;
  cube.axes.wave_log10_step = 1e-3;  // widths grow by 58% over the planes
  cube.data.assign(cube.shape.n_voxels(), 10.0);
  NoiseParams params;
  params.snr = 20.0;
  params.per_angstrom = true;
  params.background_fraction = 1.0;
  params.reference = 10.0;
  std::vector<double> widths;
  for (int k = 0; k < cube.shape.n_wave; ++k) widths.push_back(cube.axes.width_angstrom(k));
  apply_noise(params, widths[0], 7, cube, "noise", widths);
  for (int k : {0, 100, 199}) {
    const double want = std::pow(10.0 / (20.0 * std::sqrt(widths[k])), 2);
    CHECK(cube.variance[static_cast<std::size_t>(k)] == Approx(want).epsilon(test::kCubeValue));
  }
  CHECK(widths[199] / widths[0] == Approx(std::pow(10.0, 0.199)).epsilon(1e-9));
}
