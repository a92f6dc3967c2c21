// The fibres stage (fibre-fed IFUs: MaNGA's bundles, dithered, reconstructed as MaNGA's DRP does)
// against expectations worked out from the bundle's geometry and the papers: light through the
// fibres and the reconstruction, the noise's spatial correlation measured from two noise
// realisations against the correlation matrix written in the FITS file (read back with cfitsio),
// a point source's broadening, and bad input.
#include <fitsio.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <numbers>
#include <string>

#include "core/config_error.h"
#include "fibre_fixtures.h"
#include "io/cube/cube_io.h"
#include "io/hdf5.h"
#include "io/run_config.h"
#include "io/telescope.h"
#include "pipeline/registry.h"
#include "pipeline/runner.h"
#include "stages/fibres/fibres.h"
#include "stages/psf/psf.h"
#include "tests/cube_tolerance.h"

using namespace ifusim;

namespace {

constexpr double kSpaxel = 0.5;  // arcsec, MaNGA's cubes

Cube sky_cube(int n_side, int n_wave, double wave_start) {
  Cube c;
  c.shape = {n_side, n_side, n_wave};
  c.axes.spaxel_arcsec = kSpaxel;
  c.axes.wave_start_angstrom = wave_start;
  c.axes.wave_step_angstrom = 1.0;
  c.unit = "erg/s/cm**2/Angstrom";
  c.data.assign(c.shape.n_voxels(), 0.0);
  return c;
}

std::vector<double> planes(const Cube& c) {
  std::vector<double> w(static_cast<std::size_t>(c.shape.n_wave));
  for (int k = 0; k < c.shape.n_wave; ++k) w[k] = c.axes.wavelength_angstrom(k);
  return w;
}

// Spaxel (ix, iy)'s centre in arcsec from the field's centre.
double centre(int i, int n) {
  return (i - 0.5 * (n - 1)) * kSpaxel;
}

// The FWHM of a plane's light (one plane, n x n spaxels) from its second moments, as a
// Gaussian's: 2 sqrt(2 ln 2) sqrt((M_xx + M_yy) / 2); NaN spaxels (not covered) left out.
double moment_fwhm(const Cube& c) {
  const int n = c.shape.nx;
  double sum = 0.0, sx = 0.0, sy = 0.0;
  for (int iy = 0; iy < n; ++iy)
    for (int ix = 0; ix < n; ++ix) {
      const double v = c.data[static_cast<std::size_t>(iy) * n + ix];
      if (!std::isfinite(v)) continue;
      sum += v;
      sx += v * centre(ix, n);
      sy += v * centre(iy, n);
    }
  const double mx = sx / sum, my = sy / sum;
  double m2 = 0.0;
  for (int iy = 0; iy < n; ++iy)
    for (int ix = 0; ix < n; ++ix) {
      const double v = c.data[static_cast<std::size_t>(iy) * n + ix];
      if (!std::isfinite(v)) continue;
      m2 += v * (std::pow(centre(ix, n) - mx, 2) + std::pow(centre(iy, n) - my, 2));
    }
  return std::sqrt(8.0 * std::log(2.0)) * std::sqrt(0.5 * m2 / sum);
}

}  // namespace

TEST_CASE("fibres: a flat sky fills each core and an exposure holds the bundle's filling factor",
          "[fibres]") {
  const FibresParams p = test::manga_bundle(19);
  Cube sky = sky_cube(41, 3, 5000.0);
  const double mu = 2.0;  // per arcsec^2
  std::fill(sky.data.begin(), sky.data.end(), mu * kSpaxel * kSpaxel);
  const FibreSampling sampling = fibre_sampling(p, sky.shape, kSpaxel);
  REQUIRE(sampling.size() == 19 * 3);
  const Cube fibres = fibre_spectra(sampling, sky);
  const double core_area = std::numbers::pi * 1.0 * 1.0;  // arcsec^2, a 2 arcsec core
  for (std::size_t f = 0; f < sampling.size(); ++f)
    CHECK(fibres.data[f * 3 + 1] == Approx(mu * core_area).epsilon(test::kCubeValue));
  // One exposure's 19 fibres against the light on the footprint of their 19 hexagonal lattice
  // cells (each (sqrt(3) / 2) p^2): the filling factor, core area over cell area, 0.580 for
  // MaNGA (Drory et al. 2015 quote 56% with the buffer and cladding's real spacing).
  double exposure = 0.0;
  for (std::size_t f = 0; f < 19; ++f) exposure += fibres.data[f * 3];
  const double cell = std::sqrt(3.0) / 2.0 * 2.5 * 2.5;
  const double filling = core_area / cell;
  CHECK(filling == Approx(0.5804).epsilon(1e-3));
  CHECK(exposure / (mu * 19 * cell) == Approx(filling).epsilon(test::kCubeValue));
  CHECK(fibre_filling_factor(p.bundle) == Approx(filling).epsilon(1e-12));
}

TEST_CASE("fibres: light conserved through the fibres and the reconstruction", "[fibres]") {
  const FibresParams p = test::manga_bundle(19);
  const int n = 41;
  Cube sky = sky_cube(n, 2, 5000.0);
  // A Gaussian blob (sigma 1.2 arcsec) at the centre, well inside the bundle (radius ~6 arcsec),
  // and a flat level in plane 1.
  const double sigma = 1.2;
  double total_in = 0.0;
  for (int iy = 0; iy < n; ++iy)
    for (int ix = 0; ix < n; ++ix) {
      const double x = centre(ix, n), y = centre(iy, n);
      const std::size_t s = static_cast<std::size_t>(iy) * n + ix;
      sky.data[s * 2] = std::exp(-(x * x + y * y) / (2 * sigma * sigma));
      sky.data[s * 2 + 1] = 3.0 * kSpaxel * kSpaxel;
      total_in += sky.data[s * 2];
    }
  Cube cube = sky;
  const std::size_t n_fibres = apply_fibres(p, kSpaxel, planes(cube), 1.0, 0, 1, cube);
  CHECK(n_fibres == 57);
  CHECK(cube.variance.empty());  // no noise asked
  double total_out = 0.0;
  int covered = 0;
  for (int iy = 0; iy < n; ++iy)
    for (int ix = 0; ix < n; ++ix) {
      const std::size_t s = static_cast<std::size_t>(iy) * n + ix;
      if (std::isnan(cube.data[s * 2])) continue;
      ++covered;
      total_out += cube.data[s * 2];
      // Surface brightness is kept where the fibres cover the sky all round.
      if (std::hypot(centre(ix, n), centre(iy, n)) < 3.0)
        CHECK(cube.data[s * 2 + 1] == Approx(3.0 * kSpaxel * kSpaxel).epsilon(5e-3));
    }
  CHECK(total_out == Approx(total_in).epsilon(0.02));
  // Spaxels farther than r_lim = 1.6 arcsec from every fibre are not covered: the far corners.
  CHECK(covered > 300);
  CHECK(covered < n * n);
  CHECK(std::isnan(cube.data[0]));
}

TEST_CASE("fibres: neighbouring spaxels' noise correlation matches the GCORREL written",
          "[fibres]") {
  FibresParams p = test::manga_bundle(19);
  NoiseParams noise;
  noise.snr = 5.0;
  noise.reference = 1.0;
  p.noise = noise;
  const int n = 31, n_wave = 3000;
  Cube sky = sky_cube(n, n_wave, 3500.0);
  for (int iy = 0; iy < n; ++iy)
    for (int ix = 0; ix < n; ++ix)
      for (int k = 0; k < n_wave; ++k)
        sky.data[(static_cast<std::size_t>(iy) * n + ix) * n_wave + k] =
            0.3 * std::exp(-(std::pow(centre(ix, n), 2) + std::pow(centre(iy, n), 2)) / 18.0);
  Cube a = sky, b = sky;
  apply_fibres(p, kSpaxel, planes(a), 1.0, 0, 11, a);
  apply_fibres(p, kSpaxel, planes(b), 1.0, 0, 12, b);
  // 3500-6499 A holds g (4702 A) and r (6175 A).
  REQUIRE(a.correlations.size() == 2);
  REQUIRE(a.correlations.count("RCORREL") == 1);

  // The matrix as written in the file, read back with cfitsio.
  const std::string file =
      (std::filesystem::temp_directory_path() / "ifusim_test_fibres_gcorrel.fits").string();
  write_cube_fits(a, file);
  int status = 0;
  fitsfile* f = nullptr;
  fits_open_file(&f, file.c_str(), READONLY, &status);
  char extname[] = "GCORREL";
  fits_movnam_hdu(f, BINARY_TBL, extname, 0, &status);
  long rows = 0, plane = -1;
  double bbwave = 0.0;
  fits_get_num_rows(f, &rows, &status);
  fits_read_key(f, TLONG, "BBINDEX", &plane, nullptr, &status);
  fits_read_key(f, TDOUBLE, "BBWAVE", &bbwave, nullptr, &status);
  std::vector<int> ix(rows), iy(rows), jx(rows), jy(rows);
  std::vector<double> rho(rows);
  int column = 1;
  for (auto* v : {&ix, &iy, &jx, &jy})
    fits_read_col(f, TINT, column++, 1, 1, rows, nullptr, v->data(), nullptr, &status);
  fits_read_col(f, TDOUBLE, column, 1, 1, rows, nullptr, rho.data(), nullptr, &status);
  fits_close_file(f, &status);
  std::filesystem::remove(file);
  REQUIRE(status == 0);
  REQUIRE(rows > 0);
  CHECK(bbwave == 4702.0);
  CHECK(plane == 4702 - 3500);

  // The noise of run a minus run b (seeds 11 and 12): twice the variance, the same correlation;
  // the 3000 planes are 3000 realisations (a flat spectrum: the same noise model in each).
  std::vector<double> d(a.data.size());
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = a.data[i] - b.data[i];
  auto moment = [&](std::size_t s, std::size_t t) {
    double sum = 0.0;
    for (int k = 0; k < n_wave; ++k) sum += d[s * n_wave + k] * d[t * n_wave + k];
    return sum / n_wave;
  };
  int checked = 0, adjacent = 0;
  for (long e = 0; e < rows; ++e) {
    const std::size_t s = static_cast<std::size_t>(iy[e]) * n + ix[e];
    const std::size_t t = static_cast<std::size_t>(jy[e]) * n + jx[e];
    REQUIRE(std::isfinite(rho[e]));
    if (std::hypot(centre(ix[e], n), centre(iy[e], n)) > 3.0) continue;
    if (s == t) {
      CHECK(rho[e] == Approx(1.0).epsilon(1e-12));
      // The variance stored for the cube against the measured one.
      CHECK(moment(s, s) / 2.0 ==
            Approx(a.variance[s * n_wave + static_cast<std::size_t>(plane)]).epsilon(0.1));
      continue;
    }
    const double measured = moment(s, t) / std::sqrt(moment(s, s) * moment(t, t));
    if (std::abs(ix[e] - jx[e]) + std::abs(iy[e] - jy[e]) == 1) {
      ++adjacent;
      CHECK(rho[e] > 0.3);  // MaNGA's adjacent spaxels: ~0.87 (Westfall et al. 2019, fig. 8)
      CHECK(measured > 0.3);
    }
    if (rho[e] < 0.5) continue;  // where 3000 realisations measure rho to better than 10%
    ++checked;
    CHECK(std::abs(measured - rho[e]) < 0.1 * rho[e]);
  }
  CHECK(adjacent > 50);
  CHECK(checked > 200);
}

TEST_CASE("fibres: a point source comes out broader than the seeing, as MaNGA's cubes",
          "[fibres]") {
  const FibresParams p = test::manga_bundle(19);
  const int n = 41;
  Cube sky = sky_cube(n, 1, 5000.0);
  sky.data[static_cast<std::size_t>(n / 2) * n + n / 2] = 1.0;  // at the field's centre
  PsfParams psf;
  psf.fwhm_arcsec = 1.5;  // seeing
  apply_psf(psf, kSpaxel, planes(sky), sky);
  // The seeing integrated over 0.5 arcsec spaxels: sigma^2 + s^2 / 12 per axis.
  const double in = moment_fwhm(sky);
  CHECK(in == Approx(std::sqrt(1.5 * 1.5 + 8.0 * std::log(2.0) * 0.25 / 12.0)).epsilon(0.02));
  Cube cube = sky;
  apply_fibres(p, kSpaxel, planes(cube), 1.0, 0, 1, cube);
  const double out = moment_fwhm(cube);
  // Variances add: the seeing's, a 2 arcsec core's top hat (R^2 / 4 per axis) and the Shepard
  // kernel's: a Gaussian of sigma 0.7 arcsec cut at 1.6 arcsec = x sigma has per axis
  // sigma^2 (1 - (x^2 / 2) e^(-x^2 / 2) / (1 - e^(-x^2 / 2))) = 0.388 arcsec^2. That gives 2.43
  // arcsec for 1.5 arcsec seeing; Law et al. (2016) report MaNGA's reconstructed PSF at a median
  // 2.54 arcsec FWHM.
  const double x = 1.6 / 0.7;
  const double shepard =
      0.49 * (1.0 - 0.5 * x * x * std::exp(-0.5 * x * x) / (1.0 - std::exp(-0.5 * x * x)));
  const double expected = std::sqrt(in * in + 8.0 * std::log(2.0) * (0.25 + shepard));
  CHECK(expected == Approx(2.43).margin(0.02));
  CHECK(out == Approx(expected).epsilon(0.1));
  CHECK(out == Approx(2.54).epsilon(0.1));
  CHECK(out > in + 0.7);
}

TEST_CASE("fibres: bad bundles name their key, and noise on the reconstructed cube is refused",
          "[fibres]") {
  auto telescope = [](nlohmann::json fibres) {
    return nlohmann::json{{"preset", "MaNGA-12"}, {"fibres", fibres}};
  };
  const nlohmann::json good = {
      {"n_fibres", 19}, {"core_diameter_arcsec", 2.0}, {"pitch_arcsec", 2.5}};
  CHECK(parse_telescope_entry(telescope(good), "telescope").fibres->n_fibres == 19);
  auto bad = good;
  bad["pitch_arcsec"] = 1.5;
  CHECK_THROWS_WITH(
      parse_telescope_entry(telescope(bad), "telescope"),
      Catch::Contains("telescope.fibres.pitch_arcsec") && Catch::Contains("core_diameter_arcsec"));
  bad = good;
  bad["core_diameter_arcsec"] = 0.0;
  CHECK_THROWS_WITH(parse_telescope_entry(telescope(bad), "telescope"),
                    Catch::Contains("telescope.fibres.core_diameter_arcsec"));
  bad = good;
  bad["n_fibres"] = 20;
  CHECK_THROWS_WITH(parse_telescope_entry(telescope(bad), "telescope"),
                    Catch::Contains("telescope.fibres.n_fibres"));
  bad = good;
  bad["dither_x_arcsec"] = {0.0, 1.0};
  CHECK_THROWS_WITH(parse_telescope_entry(telescope(bad), "telescope"),
                    Catch::Contains("telescope.fibres.dither_y_arcsec"));

  // The presets: MaNGA's 19- and 127-fibre bundles, SAMI's 61.
  CHECK(load_telescope_preset("MaNGA-12", "t").fibres->n_fibres == 19);
  CHECK(load_telescope_preset("MaNGA-32", "t").fibres->n_fibres == 127);
  CHECK(load_telescope_preset("SAMI", "t").fibres->n_fibres == 61);
  CHECK_FALSE(load_telescope_preset("MUSE-WFM", "t").fibres);

  // A fibre stage and a noise stage both make the variance: refused before anything runs.
  const nlohmann::json stages = {
      {{"stage", "psf"}, {"params", {{"fwhm_arcsec", 1.5}}}},
      {{"stage", "fibres"}, {"params", {{"bundle", good}}}},
      {{"stage", "noise"}, {"params", {{"snr", 10}, {"reference", 1.0}}}}};
  CHECK_THROWS_WITH(make_stages(stages, "stages", {"cube"}), Catch::Contains("stages[2]") &&
                                                                 Catch::Contains("variance") &&
                                                                 Catch::Contains("\"fibres\""));
  // Without the telescope's bundle the stage says what it needs.
  const nlohmann::json no_bundle = {{{"stage", "psf"}, {"params", {{"fwhm_arcsec", 1.5}}}},
                                    {{"stage", "fibres"}}};
  CHECK_THROWS_WITH(make_stages(no_bundle, "stages", {"cube"}),
                    Catch::Contains("telescope.fibres"));
  // Per-fibre noise takes the noise stage's models, by their keys (tests/test_fibre_exposure.cpp
  // for the exposure model's).
  CHECK_THROWS_WITH(
      make_fibres_stage({{"bundle", good}, {"noise", {{"model", "photons"}}}}, "stages.fibres"),
      Catch::Contains("stages.fibres.noise.model"));
  // The fibres need the PSF-convolved cube.
  const nlohmann::json no_psf = {{{"stage", "fibres"}, {"params", {{"bundle", good}}}}};
  CHECK_THROWS_WITH(make_stages(no_psf, "stages", {"cube"}), Catch::Contains("cube_psf"));
}

TEST_CASE(
    "fibres: a MaNGA run writes the rebuilt cube and its correlation tables, and bad input "
    "writes nothing",
    "[fibres]") {
  namespace fs = std::filesystem;
  const std::string config =
      std::string(IFUSIM_SOURCE_DIR) + "/configs/examples/muse_synthetic.json";
  const fs::path out =
      fs::temp_directory_path() / ("ifusim_test_fibres_" + std::to_string(::getpid()));
  fs::remove_all(out);
  RunOptions options;
  options.n_devices = 1;
  options.output_dir = out.string();
  options.progress = false;
  // MaNGA-12 over 4600-4800 A (g's 4702 A inside), 1.5 arcsec seeing, noise per fibre.
  const std::vector<std::string> manga = {
      "input.synthetic.stars=2e4", "output.hdf5=true",
      R"(telescope={"preset": "MaNGA-12", "wavelength": {"start_angstrom": 4600,
         "end_angstrom": 4800, "step_angstrom": 1.0, "medium": "vacuum"}})",
      R"(pipeline=["orient", "aperture", "stellar_spectra", "psum", "flux", "psf", "lsf",
                   "fibres", "aperture_mask"])",
      R"(stages={"flux": {"unit_scale": 1e-20}, "psf": {"fwhm_arcsec": 1.5},
                 "fibres": {"noise": {"snr": 10}}})"};
  const RunReport report = run_pipeline(load_run_config(config, manga), options);
  REQUIRE(report.cube.shape.nx == 24);
  REQUIRE(report.cube.variance.size() == report.cube.data.size());
  REQUIRE(report.cube.correlations.count("GCORREL") == 1);
  const SpatialCorrelation& g = report.cube.correlations.at("GCORREL");
  CHECK(g.plane == 102);  // 4702 A on 4600 + k A
  REQUIRE_FALSE(g.rho.empty());
  for (std::size_t e = 0; e < g.rho.size(); ++e) {
    // Inside the cropped field, and only between measured (in-aperture) spaxels.
    REQUIRE((g.i_x[e] >= 0 && g.i_x[e] < 24 && g.j_y[e] >= 0 && g.j_y[e] < 24));
    CHECK(std::isfinite(report.cube.data[(static_cast<std::size_t>(g.i_y[e]) * 24 + g.i_x[e]) *
                                         report.cube.shape.n_wave]));
  }
  int status = 0;
  fitsfile* f = nullptr;
  fits_open_file(&f, (out / "cube.fits").string().c_str(), READONLY, &status);
  char extname[] = "GCORREL";
  fits_movnam_hdu(f, BINARY_TBL, extname, 0, &status);
  long rows = 0;
  fits_get_num_rows(f, &rows, &status);
  fits_close_file(f, &status);
  CHECK(status == 0);
  CHECK(rows == static_cast<long>(g.rho.size()));
  // The HDF5 file carries the same table.
  const h5::File h5file((out / "cube.h5").string());
  const auto table = h5file.group("correlations/GCORREL");
  CHECK(table.read<double>("RHOIJ") == g.rho);
  CHECK(table.read<std::int32_t>("INDXJ_C2") == g.j_y);
  CHECK(table.attribute<std::int32_t>("BBINDEX") == 102);
  fs::remove_all(out);

  // A pitch smaller than the core: refused naming the key, before anything runs.
  std::vector<std::string> bad = manga;
  bad[2] = R"(telescope={"preset": "MaNGA-12", "fibres": {"n_fibres": 19,
              "core_diameter_arcsec": 2.0, "pitch_arcsec": 1.8}})";
  CHECK_THROWS_WITH(load_run_config(config, bad), Catch::Contains("telescope.fibres.pitch_arcsec"));
  // Fibres and a noise stage both: refused, nothing written.
  std::vector<std::string> both = manga;
  both[3] = R"(pipeline=["orient", "aperture", "stellar_spectra", "psum", "flux", "psf", "lsf",
                         "fibres", "aperture_mask", "noise"])";
  both[4] = R"(stages={"psf": {"fwhm_arcsec": 1.5}, "noise": {"snr": 10}})";
  CHECK_THROWS_WITH(run_pipeline(load_run_config(config, both), options),
                    Catch::Contains("variance"));
  CHECK_FALSE(fs::exists(out));
}
