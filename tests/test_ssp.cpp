// SSP template libraries: MILES directory, pyPipe3D FITS, the project's HDF5 layout.
// Real-data tests read $IFUSIM_DATA_DIR/ssp (see ../shared/data/README.md); fixtures for the
// error paths and the row-order test are written here with cfitsio into a temp directory.
#include <fitsio.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "core/config_error.h"
#include "io/hdf5.h"
#include "io/ssp/miles.h"
#include "io/ssp/pypipe3d.h"
#include "io/ssp/ssp_hdf5.h"
#include "io/ssp/ssp_library.h"
#include "temp_dir.h"

using namespace ifusim;
namespace fs = std::filesystem;

namespace {

std::string data_dir() {
  if (const char* env = std::getenv("IFUSIM_DATA_DIR")) return env;
  return std::string(IFUSIM_SOURCE_DIR) + "/../shared/data";
}
std::string miles_dir() {
  return data_dir() + "/ssp/MILES_BASTI_CH_baseFe";
}
std::string mastar_file() {
  return data_dir() + "/ssp/MaStar_CB19.12_1_5.fits.gz";
}

using test::TempDir;

using Key = std::pair<std::string, std::variant<double, std::string>>;

// Writes a float64 primary image of shape dims (NAXIS1 first) with the given keywords.
void write_fits(const std::string& path, std::vector<long> dims, const std::vector<double>& data,
                const std::vector<Key>& keys) {
  fitsfile* f = nullptr;
  int status = 0;
  const std::string name = "!" + path;  // "!" = overwrite
  fits_create_file(&f, name.c_str(), &status);
  fits_create_img(f, DOUBLE_IMG, static_cast<int>(dims.size()), dims.data(), &status);
  for (const auto& [key, value] : keys) {
    if (const double* d = std::get_if<double>(&value)) {
      double v = *d;
      fits_update_key(f, TDOUBLE, key.c_str(), &v, nullptr, &status);
    } else {
      std::string s = std::get<std::string>(value);
      fits_update_key(f, TSTRING, key.c_str(), s.data(), nullptr, &status);
    }
  }
  fits_write_img(f, TDOUBLE, 1, static_cast<LONGLONG>(data.size()),
                 const_cast<double*>(data.data()), &status);
  fits_close_file(f, &status);
  REQUIRE(status == 0);
}

// A small synthetic pyPipe3D grid: ages x Zs, n_pix pixels, rows in `order` (row r holds node
// order[r]). Row data are positive pseudo-random numbers; NORM differs per node.
struct SmallPyPipe3D {
  std::vector<std::string> age_tokens = {"0.01", "1.5", "10"};
  std::vector<std::string> z_tokens = {"0004", "019", "03"};
  long n_pix = 16;
  std::vector<double> spectra;  // node-major (i_age * n_z + i_z), n_pix each, normalised
  std::vector<double> norms;
  SmallPyPipe3D() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(0.5, 1.5);
    const std::size_t n = age_tokens.size() * z_tokens.size();
    for (std::size_t i = 0; i < n * n_pix; ++i) spectra.push_back(u(rng));
    for (std::size_t i = 0; i < n; ++i) norms.push_back(1e-5 * (1.0 + static_cast<double>(i)));
  }
  void write(const std::string& path, const std::vector<std::size_t>& order,
             const std::string& skip_key = "", const std::string& bad_name_key = "") const {
    std::vector<double> data;
    std::vector<Key> keys = {
        {"CRVAL1", 3000.0}, {"CDELT1", 2.0}, {"CRPIX1", 1.0}, {"WAVENORM", 5000.0}};
    for (std::size_t r = 0; r < order.size(); ++r) {
      const std::size_t node = order[r];
      data.insert(data.end(), spectra.begin() + node * n_pix, spectra.begin() + (node + 1) * n_pix);
      const std::string name = "spec_ssp_" + age_tokens[node / z_tokens.size()] + "_z" +
                               z_tokens[node % z_tokens.size()] + ".spec";
      const std::string nk = "NAME" + std::to_string(r), mk = "NORM" + std::to_string(r);
      if (nk != skip_key) keys.push_back({nk, nk == bad_name_key ? "ssp_10Gyr_Zsun" : name});
      if (mk != skip_key) keys.push_back({mk, norms[node]});
    }
    write_fits(path, {n_pix, static_cast<long>(order.size())}, data, keys);
  }
  std::vector<std::size_t> canonical() const {
    std::vector<std::size_t> o(age_tokens.size() * z_tokens.size());
    std::iota(o.begin(), o.end(), 0);
    return o;
  }
};

// A small MILES-style directory: 2 ages x 2 [M/H], 8 pixels each.
void write_small_miles(const TempDir& dir, double crval_of_last = 3540.5) {
  const std::vector<std::string> ages = {"01.0000", "10.0000"}, mhs = {"m0.25", "p0.06"};
  int n = 0;
  for (const auto& a : ages)
    for (const auto& z : mhs) {
      ++n;
      std::vector<double> flux(8, 1e-5 * n);
      write_fits(dir / ("Mch1.30Z" + z + "T" + a + "_iTp0.00_baseFe.fits"), {8}, flux,
                 {{"CRVAL1", n == 4 ? crval_of_last : 3540.5}, {"CDELT1", 0.9}, {"CRPIX1", 1.0}});
    }
}

bool all_finite_positive(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x) && x > 0.0f; });
}

}  // namespace

TEST_CASE("MILES BaSTI [M/H] -> Z reproduces the library's Z table", "[ssp]") {
  // The MILES website's BaSTI table ([M/H] label -> Z), e.g. as copied in
  // fuhaiastro/spfit ssp/MIUSCAT/miuscat_readme.txt. Tolerance 1.5 %: the labels are rounded to
  // 0.01 dex (+-1.15 %).
  const std::vector<std::pair<double, double>> table = {
      {-2.27, 0.0001}, {-1.79, 0.0003}, {-1.49, 0.0006}, {-1.26, 0.001},
      {-0.96, 0.002},  {-0.66, 0.004},  {-0.35, 0.008},  {-0.25, 0.01},
      {+0.06, 0.0198}, {+0.15, 0.024},  {+0.26, 0.03},   {+0.40, 0.04}};
  for (const auto& [mh, z] : table) {
    INFO("[M/H] = " << mh);
    CHECK(basti_metallicity_from_mh(mh) == Approx(z).epsilon(0.015));
  }
  // Closed form at +0.06: r = 0.0245 * 10^0.06, Z = 0.755 r / (1 + 2.4 r) (to 1e-12 relative).
  const double r = 0.0245 * std::pow(10.0, 0.06);
  CHECK(basti_metallicity_from_mh(0.06) == Approx(0.755 * r / (1.0 + 2.4 * r)).epsilon(1e-12));
  // Monotonic, so the grid's metallicity axis keeps the [M/H] order.
  CHECK(basti_metallicity_from_mh(-0.25) < basti_metallicity_from_mh(0.06));
}

TEST_CASE("MILES directory loads as a complete 53 x 12 x 4300 grid", "[ssp]") {
  const SspGrid g = load_ssp_library(miles_dir(), "auto");
  REQUIRE(g.n_age() == 53);
  REQUIRE(g.n_metallicity() == 12);
  REQUIRE(g.n_wave() == 4300);
  REQUIRE(g.flux.size() == 53u * 12u * 4300u);
  CHECK(std::is_sorted(g.age_gyr.begin(), g.age_gyr.end()));
  CHECK(std::is_sorted(g.metallicity.begin(), g.metallicity.end()));
  CHECK(g.age_gyr.front() == 0.03);
  CHECK(g.age_gyr.back() == 14.0);
  CHECK(g.age_gyr[44] == 10.0);
  CHECK(g.metallicity[8] == basti_metallicity_from_mh(0.06));
  CHECK(g.metallicity.front() == Approx(0.0001).epsilon(0.015));
  CHECK(g.metallicity.back() == Approx(0.04).epsilon(0.015));
  // README: CRVAL1 = 3540.5, CDELT1 = 0.9, CRPIX1 = 1 -> 3540.5 .. 7409.6 A (1e-9 A: rounding).
  CHECK(g.wavelength_angstrom.front() == 3540.5);
  CHECK(g.wavelength_angstrom.back() == Approx(7409.6).margin(1e-9));
  CHECK(g.wavelength_angstrom[1] - g.wavelength_angstrom[0] == Approx(0.9).margin(1e-9));
  CHECK(g.resolution_fwhm_angstrom.constant());
  CHECK(g.resolution_fwhm_angstrom.at(5000.0) == 2.51);
  CHECK(g.z_solar == 0.0198);
  CHECK(g.wavelength_medium == "air");
  CHECK(g.name == "MILES_BASTI_CH_baseFe");
  CHECK(all_finite_positive(g.flux));
  // Flux sanity: 10 Gyr, [M/H] = +0.06 at 5000.3 A (pixel 1622) is 2.0167558e-05 L_sun/A/M_sun
  // (read with astropy: fits.getdata('Mch1.30Zp0.06T10.0000_iTp0.00_baseFe.fits')[1622]); the
  // file's float32 is kept exactly.
  CHECK(g.wavelength_angstrom[1622] == Approx(5000.3).margin(1e-9));
  const float f5000 = g.spectrum(44, 8)[1622];
  CHECK(f5000 == 2.0167558e-05f);
  CHECK(f5000 > 1e-5f);
  CHECK(f5000 < 1e-4f);
  // Older populations are fainter per unit initial mass at 5000 A (0.03 Gyr vs 14 Gyr, solar).
  CHECK(g.spectrum(0, 8)[1622] > 10.0f * g.spectrum(52, 8)[1622]);
}

TEST_CASE("MaStar pyPipe3D file loads as 4 x 3 x 8000, rows placed by NAMEi and times NORMi",
          "[ssp]") {
  const SspGrid g = load_ssp_library(mastar_file(), "auto");
  REQUIRE(g.n_age() == 4);
  REQUIRE(g.n_metallicity() == 3);
  REQUIRE(g.n_wave() == 8000);
  CHECK(g.age_gyr == std::vector<double>{0.0115, 0.225, 2.1, 12.25});
  CHECK(g.metallicity == std::vector<double>{0.0005, 0.017, 0.040});
  CHECK(g.wavelength_angstrom.front() == 2000.0);
  CHECK(g.wavelength_angstrom.back() == 9999.0);
  CHECK(g.z_solar == 0.017);
  // No FWHM keyword: MaStar's curve, lambda / R from the BOSS spectrographs' R (Smee et al.
  // 2013): 1560 at 3700 A, 2270 at 6000 A (blue), 1850 at 6000 A, 2650 at 9000 A (red).
  const ResolutionCurve& r = g.resolution_fwhm_angstrom;
  CHECK_FALSE(r.constant());
  CHECK(r.at(3000.0) == Approx(3700.0 / 1560.0).epsilon(1e-12));  // constant beyond the table
  CHECK(r.at(3700.0) == Approx(3700.0 / 1560.0).epsilon(1e-12));
  CHECK(r.at(4850.0) == Approx(0.5 * (3700.0 / 1560.0 + 6000.0 / 2270.0)).epsilon(1e-12));
  CHECK(r.at(5999.0) < 2.65);  // blue channel up to the dichroic, red beyond
  CHECK(r.at(6001.0) > 3.24);
  CHECK(r.at(9000.0) == Approx(9000.0 / 2650.0).epsilon(1e-12));
  CHECK(r.at(9999.0) == Approx(9000.0 / 2650.0).epsilon(1e-12));
  CHECK(all_finite_positive(g.flux));

  // Precomputed with /usr/bin/python3 + astropy: h = fits.open(file)[0];
  // np.float32(h.data[row][k] * h.header['NORM%d' % row]) for row 10 (spec_ssp_12.25_z017)
  // and row 2 (spec_ssp_0.0115_z040) at pixels 0, 3000 (5000 A), 7999.
  CHECK(g.spectrum(3, 1)[0] == 1.0771923086849711e-07f);
  CHECK(g.spectrum(3, 1)[3000] == 1.6456273442599922e-05f);
  CHECK(g.spectrum(3, 1)[7999] == 1.5257825907610822e-05f);
  CHECK(g.spectrum(0, 2)[0] == 0.03953604772686958f);
  CHECK(g.spectrum(0, 2)[3000] == 0.0035269453655928373f);
  CHECK(g.spectrum(0, 2)[7999] == 0.0022227216977626085f);

  // Independent read of every row with cfitsio: its NAMEi parsed here with sscanf, its node
  // looked up in the grid's axes, raw pixel * NORMi compared (float rounding of one product).
  fitsfile* f = nullptr;
  int status = 0;
  fits_open_file(&f, mastar_file().c_str(), READONLY, &status);
  REQUIRE(status == 0);
  for (int row = 0; row < 12; ++row) {
    char name[FLEN_VALUE];
    double norm = 0;
    fits_read_key(f, TSTRING, ("NAME" + std::to_string(row)).c_str(), name, nullptr, &status);
    fits_read_key(f, TDOUBLE, ("NORM" + std::to_string(row)).c_str(), &norm, nullptr, &status);
    double age = 0;
    char zdigits[32] = {0};
    REQUIRE(std::sscanf(name, "spec_ssp_%lf_z%31[0-9]", &age, zdigits) == 2);
    const double z = std::atof(zdigits) / std::pow(10.0, std::strlen(zdigits));
    const auto ia = std::find(g.age_gyr.begin(), g.age_gyr.end(), age) - g.age_gyr.begin();
    const auto iz = std::find_if(g.metallicity.begin(), g.metallicity.end(),
                                 [z](double m) { return std::abs(m - z) < 1e-12; }) -
                    g.metallicity.begin();
    REQUIRE(ia < 4);
    REQUIRE(iz < 3);
    for (long k : {0L, 1234L, 3000L, 7999L}) {
      double raw = 0;
      int anynul = 0;
      fits_read_img(f, TDOUBLE, row * 8000L + k + 1, 1, nullptr, &raw, &anynul, &status);
      INFO("row " << row << " (" << name << ") pixel " << k);
      CHECK(g.spectrum(ia, iz)[k] == static_cast<float>(raw * norm));
    }
  }
  fits_close_file(f, &status);
  CHECK(status == 0);
}

TEST_CASE("pyPipe3D reader does not depend on the row order", "[ssp]") {
  TempDir dir("order");
  const SmallPyPipe3D lib;
  auto order = lib.canonical();
  lib.write(dir / "canonical.fits", order);
  std::mt19937 rng(11);
  std::shuffle(order.begin(), order.end(), rng);
  REQUIRE(order != lib.canonical());
  lib.write(dir / "shuffled.fits", order);
  const SspGrid a = read_pypipe3d_fits(dir / "canonical.fits");
  const SspGrid b = read_pypipe3d_fits(dir / "shuffled.fits");
  CHECK(a.age_gyr == std::vector<double>{0.01, 1.5, 10.0});
  CHECK(a.metallicity == std::vector<double>{0.0004, 0.019, 0.03});
  CHECK(a.age_gyr == b.age_gyr);
  CHECK(a.metallicity == b.metallicity);
  CHECK(a.wavelength_angstrom == b.wavelength_angstrom);
  CHECK(a.wavelength_angstrom.back() == 3030.0);
  CHECK(a.flux == b.flux);  // bitwise
  for (std::size_t node = 0; node < 9; ++node)
    for (long k = 0; k < lib.n_pix; ++k)
      CHECK(a.flux[node * lib.n_pix + k] ==
            static_cast<float>(lib.spectra[node * lib.n_pix + k] * lib.norms[node]));
}

TEST_CASE("SSP HDF5 layout round-trips bitwise and leaves no temp file", "[ssp]") {
  TempDir dir("h5");
  for (const std::string& src : {mastar_file(), miles_dir()}) {
    const SspGrid a = load_ssp_library(src);
    const std::string out = dir / "grid.h5";
    write_ssp_hdf5(a, out);
    CHECK_FALSE(fs::exists(out + ".tmp"));
    const SspGrid b = load_ssp_library(out);
    CHECK(b.name == a.name);
    CHECK(b.source == a.source);
    CHECK(b.age_gyr == a.age_gyr);
    CHECK(b.metallicity == a.metallicity);
    CHECK(b.wavelength_angstrom == a.wavelength_angstrom);
    CHECK(b.flux == a.flux);
    CHECK(b.resolution_fwhm_angstrom.wavelength_angstrom ==
          a.resolution_fwhm_angstrom.wavelength_angstrom);
    CHECK(b.resolution_fwhm_angstrom.fwhm == a.resolution_fwhm_angstrom.fwhm);
    CHECK(b.z_solar == a.z_solar);
    CHECK(b.wavelength_medium == a.wavelength_medium);
    h5::File f(out);
    CHECK(f.shape("flux") == std::vector<hsize_t>{a.n_age(), a.n_metallicity(), a.n_wave()});
    CHECK(f.string_attribute("flux_unit") == kSspFluxUnit);
    // A constant resolution as format 1 stored it (the root attribute), a curve as a group.
    const bool constant = a.resolution_fwhm_angstrom.constant();
    CHECK(f.has_attribute("resolution_fwhm_angstrom") == constant);
    CHECK(f.exists("resolution") == !constant);
  }
}

TEST_CASE("SSP readers reject bad input with messages naming file and key", "[ssp]") {
  TempDir dir("errors");
  using Catch::Contains;
  // Missing paths.
  CHECK_THROWS_WITH(load_ssp_library(dir / "nope"),
                    Contains("nope: SSP template library not found"));
  CHECK_THROWS_WITH(read_miles_directory(dir / "nope"),
                    Contains("nope: MILES SSP directory not found"));
  CHECK_THROWS_WITH(read_pypipe3d_fits(dir / "nope.fits"),
                    Contains("nope.fits: pyPipe3D SSP file not found"));
  // Not FITS.
  { std::ofstream(dir / "text.fits") << "this is not a FITS file\n"; }
  CHECK_THROWS_WITH(load_ssp_library(dir / "text.fits"),
                    Contains("text.fits: cannot open FITS file"));
  { std::ofstream(dir / "grid.txt") << "x\n"; }
  CHECK_THROWS_WITH(load_ssp_library(dir / "grid.txt"),
                    Contains("cannot tell the SSP library format"));
  CHECK_THROWS_AS(load_ssp_library(dir / "grid.txt", "bc03"), ConfigError);

  // pyPipe3D keywords.
  const SmallPyPipe3D lib;
  lib.write(dir / "no_name.fits", lib.canonical(), "NAME3");
  CHECK_THROWS_WITH(read_pypipe3d_fits(dir / "no_name.fits"),
                    Contains("no_name.fits: header keyword NAME3 not found"));
  lib.write(dir / "no_norm.fits", lib.canonical(), "NORM5");
  CHECK_THROWS_WITH(read_pypipe3d_fits(dir / "no_norm.fits"),
                    Contains("no_norm.fits: header keyword NORM5 not found"));
  lib.write(dir / "bad_name.fits", lib.canonical(), "", "NAME4");
  CHECK_THROWS_WITH(
      read_pypipe3d_fits(dir / "bad_name.fits"),
      Contains("bad_name.fits: header keyword NAME4 = 'ssp_10Gyr_Zsun': cannot parse"));
  auto dup = lib.canonical();
  dup[1] = dup[0];
  lib.write(dir / "dup.fits", dup);
  CHECK_THROWS_WITH(read_pypipe3d_fits(dir / "dup.fits"),
                    Contains("NAME0 and NAME1 give the same age and metallicity"));
  auto short_order = lib.canonical();
  short_order.pop_back();
  lib.write(dir / "incomplete.fits", short_order);
  CHECK_THROWS_WITH(
      read_pypipe3d_fits(dir / "incomplete.fits"),
      Contains("incomplete.fits: incomplete SSP grid: no NAMEi for age 10 Gyr and Z = 0.03"));

  // MILES: complete small grid loads; a missing file and a shifted wavelength grid do not.
  TempDir miles("miles");
  write_small_miles(miles);
  const SspGrid small = read_miles_directory(miles.path.string());
  CHECK(small.n_age() == 2);
  CHECK(small.n_metallicity() == 2);
  CHECK(small.spectrum(1, 1)[0] == static_cast<float>(4e-5));
  fs::remove(miles / "Mch1.30Zp0.06T01.0000_iTp0.00_baseFe.fits");
  CHECK_THROWS_WITH(read_miles_directory(miles.path.string()),
                    Contains(miles.path.string() + ": incomplete MILES grid: missing "
                                                   "Mch1.30Zp0.06T01.0000_iTp0.00_baseFe.fits"));
  TempDir shifted("shifted");
  write_small_miles(shifted, 3541.0);
  CHECK_THROWS_WITH(read_miles_directory(shifted.path.string()),
                    Contains("Mch1.30Zp0.06T10.0000_iTp0.00_baseFe.fits: header keyword "
                             "CRVAL1 = 3541 differs from 3540.5"));
  { std::ofstream(shifted / "Mch1.30Zq0.06T10.0000.fits") << "x"; }
  CHECK_THROWS_WITH(read_miles_directory(shifted.path.string()),
                    Contains("Mch1.30Zq0.06T10.0000.fits: cannot parse the MILES file name"));
}

TEST_CASE("ifusim templates convert and info", "[ssp][cli]") {
  TempDir dir("cli");
  const std::string bin = IFUSIM_BINARY;
  const std::string out = dir / "mastar.h5";
  REQUIRE(std::system((bin + " templates convert " + mastar_file() + " " + out).c_str()) == 0);
  CHECK(fs::exists(out));
  CHECK_FALSE(fs::exists(out + ".tmp"));
  const std::string json_path = dir / "info.json";
  REQUIRE(std::system((bin + " templates info " + out + " --json > " + json_path).c_str()) == 0);
  std::ifstream in(json_path);
  const auto j = nlohmann::json::parse(in);
  CHECK(j["n_age"] == 4);
  CHECK(j["n_metallicity"] == 3);
  CHECK(j["n_wave"] == 8000);
  CHECK(j["wavelength_min_angstrom"] == 2000.0);
  CHECK(j["wavelength_step_angstrom"] == 1.0);
  CHECK(j["z_solar"] == 0.017);
  // A failing conversion exits non-zero and leaves neither the output nor its temp file.
  const std::string bad = dir / "bad.h5";
  CHECK(std::system(
            (bin + " templates convert " + (dir / "nope") + " " + bad + " 2>/dev/null").c_str()) !=
        0);
  CHECK_FALSE(fs::exists(bad));
  CHECK_FALSE(fs::exists(bad + ".tmp"));
}
