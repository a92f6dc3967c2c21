// The emission_lines stage: one cell's lines against their analytic place, width and luminosity;
// the calibrations' ratios; the dust screen; device-count invariance and smoothing; the ratio
// table; errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/config_error.h"
#include "data/wavelength.h"
#include "io/emission_line_table.h"
#include "io/hdf5.h"
#include "io/run_config.h"
#include "io/ssp/ssp_library.h"
#include "io/telescope.h"
#include "pipeline/devices.h"
#include "pipeline/registry.h"
#include "ssp_fixture.h"
#include "stages/dust/dust.h"
#include "stages/emission_lines/emission_lines.h"
#include "stages/flux/flux.h"
#include "stages/spaxel_grid/spaxel_grid.h"
#include "stages/stage.h"
#include "stages/stellar_spectra/stellar_spectra.h"
#include "tests/cube_tolerance.h"
#include "tng_test_util.h"

using namespace ifusim;
namespace fs = std::filesystem;

namespace {

// What the runner gives the stage: line-ratio tables read by io/.
StageResources io_resources() {
  StageResources r;
  r.load_line_ratio_table = [](const std::string& file, const std::string&) {
    return std::make_shared<const LineRatioTable>(read_line_ratio_table(file));
  };
  return r;
}

// Gas cells on the host, every field the stage and the dust screen read.
struct HostGasCells {
  std::vector<float> position_kpc, velocity_kms;                    // (N, 3)
  std::vector<float> mass_msun, density, metallicity, sfr, metals;  // metals (N, 10)
  bool with_metals = false;
  void add(float x, float y, float z, float v_los, float sfr_msun_yr, float z_metals,
           float mass = 1e6f) {
    position_kpc.insert(position_kpc.end(), {x, y, z});
    velocity_kms.insert(velocity_kms.end(), {0.0f, 0.0f, v_los});
    mass_msun.push_back(mass);
    density.push_back(1e7f);  // Msun/kpc^3: a cell radius of 0.29 kpc for 1e6 Msun
    metallicity.push_back(z_metals);
    sfr.push_back(sfr_msun_yr);
  }
  std::size_t size() const { return sfr.size(); }
};

Gas put_gas_cells(const Mesh& mesh, const HostGasCells& h) {
  Gas g;
  const auto sh = Sharding::sharded();
  g.position_kpc = device_put(mesh, h.position_kpc, 3, sh);
  g.velocity_kms = device_put(mesh, h.velocity_kms, 3, sh);
  g.mass_msun = device_put(mesh, h.mass_msun, 1, sh);
  g.density_msun_per_kpc3 = device_put(mesh, h.density, 1, sh);
  g.metallicity = device_put(mesh, h.metallicity, 1, sh);
  g.sfr_msun_per_yr = device_put(mesh, h.sfr, 1, sh);
  if (h.with_metals) g.metals = device_put(mesh, h.metals, 10, sh);
  return g;
}

// The spaxel stages place stars: one, which these tests' stages do not use.
Stars one_star(const Mesh& mesh) {
  HostStars h;
  h.position_kpc = {0.5f, 0.5f, 0.0f};
  h.velocity_kms = {0.0f, 0.0f, 0.0f};
  h.mass_msun = h.initial_mass_msun = {1e6f};
  h.metallicity = {0.02f};
  h.age_gyr = {5.0f};
  return put_stars(mesh, h);
}

// Mass fractions (H, O among GFM_Metals' ten) giving 12 + log(O/H) = `oxygen`.
std::vector<float> metals_for(double oxygen) {
  std::vector<float> m(10, 0.0f);
  m[0] = 0.74f;
  m[1] = 0.25f;
  m[4] = static_cast<float>(0.74 * std::pow(10.0, oxygen - 12.0) * 15.999 / 1.008);
  return m;
}

// 8 x 8 spaxels of 2 kpc; spaxel (4, 4) holds 0 < x, y < 2 kpc.
struct Setup {
  int n_devices = 1;
  double redshift = 0.05;
  double wave_start_angstrom = 4700.0, wave_step_angstrom = 1.25;
  double wave_log10_step = 0.0;  // > 0: a logarithmic grid (wave_step_angstrom then unused)
  int n_wave = 1800;             // to 6949 A
  std::string medium = "air";
  nlohmann::json grid{{"n_spaxels", 8}, {"spaxel_size_kpc", 2.0}};
  bool dust = false;
  nlohmann::json dust_params{{"curve", "ccm89"}};
  ResolutionCurve template_fwhm_angstrom = 0.0;    // the SSP library's resolution (rest frame)
  ResolutionCurve instrument_fwhm_angstrom = 2.6;  // the telescope's LSF (observed frame)
  // Stages after the lines (and psum), by registry name, e.g. flux and lsf.
  std::vector<std::pair<std::string, nlohmann::json>> after;
  bool stars = false;  // stellar_spectra too (synthetic templates, the cell-free star)
  bool lines = true;
};

struct LineRun {
  Cube cube;
  std::map<std::string, SkyMap> maps;
};

LineRun run_lines(const Setup& s, const HostGasCells& gas, const nlohmann::json& params) {
  auto mesh = make_mesh(Backend::cpu, s.n_devices);
  RunState state(*mesh);
  state.data.stars = one_star(*mesh);
  state.data.gas = put_gas_cells(*mesh, gas);
  state.observation.redshift = s.redshift;
  state.observation.telescope.wavelength_medium = s.medium;
  state.observation.axes.wave_start_angstrom = s.wave_start_angstrom;
  state.observation.axes.wave_step_angstrom = s.wave_log10_step > 0 ? 0.0 : s.wave_step_angstrom;
  state.observation.axes.wave_log10_step = s.wave_log10_step;
  state.observation.template_fwhm_angstrom = s.template_fwhm_angstrom;
  state.observation.telescope_lsf_fwhm_angstrom = s.instrument_fwhm_angstrom;
  state.observation.luminosity_distance_mpc = 100.0;
  run_stage(*make_spaxel_grid_stage(s.grid, "g"), state);
  state.spaxels.n_wave = s.n_wave;
  if (s.dust) run_stage(*make_dust_stage(s.dust_params, "d"), state);
  if (s.stars)
    run_stage(*make_stellar_spectra_stage(
                  std::make_shared<const SspGrid>(test::synthetic_ssp_grid()), {}),
              state);
  if (s.lines)
    run_stage(*make_emission_lines_stage(params, "stages.emission_lines", io_resources()), state);
  reduce_partials(state);
  for (const auto& [name, stage_params] : s.after)
    run_stage(*make_stage(name, stage_params, "stages." + name, {}), state);
  REQUIRE(state.cube);
  return {std::move(*state.cube), std::move(state.maps)};
}

double halpha_lsun(double sfr) {
  // Chabrier IMF: Kennicutt & Evans' Kroupa 10^41.27, the SFR x 0.63 / 0.67 (Madau & Dickinson
  // 2014).
  return sfr * std::pow(10.0, 41.27) * 0.67 / 0.63 / kSolarLuminosityErgPerS;
}

double observed_air(double vacuum_rest, double redshift, double v_kms) {
  return air_from_vacuum(vacuum_rest * (1 + redshift) * (1 + v_kms / kSpeedOfLightKms));
}

std::size_t spaxel(int ix, int iy) {
  return static_cast<std::size_t>(iy) * 8 + ix;
}

}  // namespace

TEST_CASE(
    "emission lines: one cell's H-alpha lands at its shifted air wavelength, with its "
    "Kennicutt luminosity and its width",
    "[emission_lines]") {
  HostGasCells gas;
  const double v = 150.0, sfr = 2.5;
  gas.add(1.0f, 1.0f, 0.0f, static_cast<float>(v), static_cast<float>(sfr), 0.0134f);
  gas.add(-3.0f, 5.0f, 0.0f, -80.0f, 0.0f, 0.0134f);  // forms no stars: emits nothing
  const double turbulent = 60.0;
  const LineRun run =
      run_lines(Setup{}, gas, {{"lines", {"halpha"}}, {"turbulent_sigma_kms", turbulent}});
  const Cube& cube = run.cube;
  const double step = 1.25, first_edge = 4700.0 - 0.5 * step;
  // Total light: the H-alpha map, the cube's sum and L = SFR 10^41.297 erg/s agree.
  const double expected = halpha_lsun(sfr);
  CHECK(run.maps.at("flux_halpha").values[spaxel(4, 4)] == Approx(expected).epsilon(1e-12));
  CHECK(run.maps.at("flux_halpha").unit == "Lsun");
  double total = 0.0, first = 0.0, second = 0.0;
  for (std::size_t i = 0; i < cube.data.size(); ++i) {
    REQUIRE(std::isfinite(cube.data[i]));
    total += cube.data[i] * step;
  }
  // The cube's values are float32 (tests/cube_tolerance.h).
  CHECK(total == Approx(expected).epsilon(test::kCubeValue));
  // Only spaxel (4, 4) is lit; its line's centroid and width are the analytic ones (the
  // binned Gaussian's variance is sigma^2 + step^2 / 12, Sheppard's correction).
  for (int k = 0; k < cube.shape.n_wave; ++k) {
    const double lambda = first_edge + (k + 0.5) * step, e = cube.at(4, 4, k) * step;
    first += e * lambda;
    second += e * lambda * lambda;
  }
  // Over the cube's own total: its float32 values sum to `expected` only within 6e-8, which
  // times lambda^2 (4e7 A^2) would swamp the variance (2 A^2).
  const double centre = first / total;
  const double variance = second / total - centre * centre;
  const double air = observed_air(6564.61, 0.05, v);
  CHECK(std::abs(centre - air) < 2e-4);  // Angstrom
  // Not where converting at the rest wavelength would put it (0.0024 A off at z = 0.05).
  const double at_rest = air_from_vacuum(6564.61) * 1.05 * (1 + v / kSpeedOfLightKms);
  CHECK(std::abs(at_rest - air) > 2e-3);
  const double sigma_kms =
      std::sqrt(1.380649e-23 * 1e4 / (1.008 * 1.66053906660e-27) * 1e-6 + turbulent * turbulent);
  const double sigma = air * sigma_kms / kSpeedOfLightKms;
  CHECK(std::sqrt(variance) == Approx(std::sqrt(sigma * sigma + step * step / 12)).epsilon(2e-3));
  // The gas kinematics: H-alpha-weighted, the cell's line width included.
  CHECK(run.maps.at("velocity_gas_kms").values[spaxel(4, 4)] == Approx(v).epsilon(1e-9));
  CHECK(run.maps.at("dispersion_gas_kms").values[spaxel(4, 4)] == Approx(sigma_kms).epsilon(1e-6));
  CHECK(std::isnan(run.maps.at("velocity_gas_kms").values[spaxel(0, 0)]));

  // With templates of 2.5 A FWHM at rest, finer than the instrument's 3 A, the line is deposited
  // that much broader (observed: 2.625 A), for the LSF stage to remove with the templates'
  // resolution; the gas dispersion map keeps the cell's own width.
  Setup coarse;
  coarse.template_fwhm_angstrom = 2.5;
  coarse.instrument_fwhm_angstrom = 3.0;
  const LineRun broad =
      run_lines(coarse, gas, {{"lines", {"halpha"}}, {"turbulent_sigma_kms", turbulent}});
  double e0 = 0, e1 = 0, e2 = 0;
  for (int k = 0; k < broad.cube.shape.n_wave; ++k) {
    const double lambda = first_edge + (k + 0.5) * step, e = broad.cube.at(4, 4, k) * step;
    e0 += e;
    e1 += e * lambda;
    e2 += e * lambda * lambda;
  }
  const double template_sigma = 2.5 * 1.05 / 2.3548200450309493 * air / (6564.61 * 1.05);
  CHECK(std::sqrt(e2 / e0 - (e1 / e0) * (e1 / e0)) ==
        Approx(std::sqrt(sigma * sigma + template_sigma * template_sigma + step * step / 12))
            .epsilon(2e-3));
  CHECK(broad.maps.at("dispersion_gas_kms").values[spaxel(4, 4)] ==
        Approx(sigma_kms).epsilon(1e-6));
}

TEST_CASE("emission lines on a logarithmic grid: H-alpha keeps its light and its wavelength",
          "[emission_lines][logcube]") {
  // MaNGA's sampling (dlog10 lambda = 1e-4, Law et al. 2016) from 4700 A: the line's energy is
  // sum of value x width(k) over bins whose widths differ, and its centroid over the bins'
  // centres is the shifted air wavelength (a width taken as constant would lose 0.1% per 10
  // bins off; arithmetic edges would move the centroid).
  HostGasCells gas;
  const double v = 150.0, sfr = 2.5;
  gas.add(1.0f, 1.0f, 0.0f, static_cast<float>(v), static_cast<float>(sfr), 0.0134f);
  Setup log_grid;
  log_grid.wave_log10_step = 1e-4;
  log_grid.n_wave = 1700;
  // 60 km/s of turbulence: a line of 1.4 A sigma over bins of 1.07 A, whose binned centroid is
  // the line's (a line narrower than a bin has its centroid anywhere in it).
  const LineRun run =
      run_lines(log_grid, gas, {{"lines", {"halpha"}}, {"turbulent_sigma_kms", 60.0}});
  CubeAxes axes;
  axes.wave_start_angstrom = 4700.0;
  axes.wave_log10_step = 1e-4;
  const double expected = halpha_lsun(sfr);
  CHECK(run.maps.at("flux_halpha").values[spaxel(4, 4)] == Approx(expected).epsilon(1e-12));
  double total = 0.0, first = 0.0;
  for (int k = 0; k < run.cube.shape.n_wave; ++k) {
    REQUIRE(std::isfinite(run.cube.at(4, 4, k)));
    const double e = run.cube.at(4, 4, k) * axes.width_angstrom(k);
    total += e;
    first += e * 0.5 * (axes.edge_angstrom(k) + axes.edge_angstrom(k + 1));
  }
  CHECK(total == Approx(expected).epsilon(test::kCubeValue));                 // float32 voxels
  CHECK(std::abs(first / expected - observed_air(6564.61, 0.05, v)) < 2e-4);  // Angstrom
}

// A still cell's H-alpha after the lsf stage, as its second moment: sigma_instrument^2 +
// sigma_thermal^2 + sigma_turbulent^2 + step^2 / 12, whether the templates are finer or coarser
// than the instrument. Coarser templates once left the line with the templates' width (MUSE +
// MaStar H-alpha 29% too broad): the lsf stage cannot sharpen.
TEST_CASE(
    "emission lines: after the lsf stage a line has the instrument's resolution, whether the "
    "templates are finer or coarser than the instrument",
    "[emission_lines]") {
  HostGasCells gas;
  gas.add(1.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.0134f);
  const double turbulent = 10.0, redshift = 0.03, step = 1.25;
  const double gas_sigma_kms =
      std::sqrt(1.380649e-23 * 1e4 / (1.008 * 1.66053906660e-27) * 1e-6 + turbulent * turbulent);
  const Telescope muse = load_telescope_preset("MUSE", "telescope");
  const SspGrid mastar = load_ssp_library(ifusim::data_dir() + "/ssp/MaStar_CB19.12_1_5.fits.gz");
  struct Case {
    std::string what;
    ResolutionCurve templates, instrument;
  };
  const std::vector<Case> cases = {{"MUSE (Bacon et al. 2017) + MaStar",
                                    mastar.resolution_fwhm_angstrom, muse.lsf_fwhm_angstrom},
                                   {"MaNGA (2.8 A) + MaStar", mastar.resolution_fwhm_angstrom, 2.8},
                                   {"MaNGA + templates of 1 A, finer", 1.0, 2.8},
                                   {"templates of 4 A, coarser than MaNGA", 4.0, 2.8}};
  for (const Case& c : cases) {
    INFO(c.what);
    Setup s;
    s.redshift = redshift;
    s.medium = "air";
    s.template_fwhm_angstrom = c.templates;
    s.instrument_fwhm_angstrom = c.instrument;
    s.after = {{"lsf", nlohmann::json::object()}};
    const LineRun run =
        run_lines(s, gas, {{"lines", {"halpha"}}, {"turbulent_sigma_kms", turbulent}});
    const double first_edge = s.wave_start_angstrom - 0.5 * step;
    double e0 = 0, e1 = 0, e2 = 0;
    for (int k = 0; k < run.cube.shape.n_wave; ++k) {
      const double lambda = first_edge + (k + 0.5) * step, e = run.cube.at(4, 4, k) * step;
      REQUIRE(std::isfinite(e));
      e0 += e;
      e1 += e * lambda;
      e2 += e * lambda * lambda;
    }
    REQUIRE(e0 > 0);
    const double centre = e1 / e0;
    const double instrument_sigma = c.instrument.at(centre) / 2.3548200450309493;
    const double gas_sigma = centre * gas_sigma_kms / kSpeedOfLightKms;
    // Where the templates are finer the lsf stage convolves, and its kernel, integrated over
    // each pixel (stages/lsf/lsf.h), adds another step^2 / 12 to the deposit's.
    const bool convolved = c.templates.at(6564.61) * (1 + redshift) < c.instrument.at(centre);
    const double expected = std::sqrt(instrument_sigma * instrument_sigma + gas_sigma * gas_sigma +
                                      (convolved ? 2.0 : 1.0) * step * step / 12);
    const double measured = std::sqrt(e2 / e0 - centre * centre);
    INFO("templates at H-alpha (observed): "
         << c.templates.at(6564.61) * (1 + redshift) << " A FWHM, instrument "
         << c.instrument.at(centre) << " A; second moment " << measured << " A vs " << expected);
    // The LSF kernel is integrated over the bins and truncated at 1e-6 of its peak: 1%, inside
    // the 3%.
    CHECK(measured == Approx(expected).epsilon(0.01));
  }
}

TEST_CASE("emission lines: a line narrower than a bin keeps its light, in the bins around it",
          "[emission_lines]") {
  HostGasCells gas;
  gas.add(1.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.0134f);
  // Coarse bins (10 A), and a vacuum telescope: the line sits at lambda_vac (1 + z).
  Setup s;
  s.wave_step_angstrom = 10.0;
  s.n_wave = 250;
  s.medium = "vacuum";
  const LineRun run = run_lines(s, gas, {{"lines", {"halpha"}}, {"turbulent_sigma_kms", 0}});
  const double centre = 6564.61 * 1.05, first_edge = 4700.0 - 5.0;
  const int k = static_cast<int>(std::floor((centre - first_edge) / 10.0));
  CHECK(run.cube.at(4, 4, k) * 10.0 == Approx(halpha_lsun(1.0)).epsilon(test::kCubeValue));
}

TEST_CASE("emission lines: line ratios follow Case B, Curti et al. 2020 and the doublets",
          "[emission_lines]") {
  // z = 0 and a band from 3600 A: every line, each in its own spaxel's spectrum.
  Setup s;
  s.redshift = 0.0;
  s.wave_start_angstrom = 3600.0;
  s.n_wave = 2800;
  for (const double oxygen : {8.69, 8.3}) {
    INFO("12 + log(O/H) = " << oxygen);
    HostGasCells gas;
    gas.with_metals = true;
    gas.add(1.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.02f);
    gas.metals = metals_for(oxygen);
    const LineRun run = run_lines(s, gas, nlohmann::json::object());
    auto line = [&](const std::string& name) {
      return run.maps.at("flux_" + name).values[spaxel(4, 4)];
    };
    const double x = oxygen - 8.69;
    const double hbeta = line("hbeta");
    REQUIRE(hbeta > 0);
    CHECK(line("halpha") / hbeta == Approx(2.86).epsilon(1e-9));
    CHECK(line("hgamma") / hbeta == Approx(0.468).epsilon(1e-9));
    CHECK(line("hdelta") / hbeta == Approx(0.259).epsilon(1e-9));
    // The calibrations, through the 0.005 dex grid: within 1e-5 relative.
    CHECK(std::log10(line("nii_6584") / line("halpha")) ==
          Approx(-0.489 + 1.513 * x - 2.554 * x * x - 5.293 * x * x * x - 2.867 * std::pow(x, 4))
              .margin(1e-5));
    CHECK(std::log10(line("oiii_5007") / hbeta) ==
          Approx(-0.277 - 3.549 * x - 3.593 * x * x - 0.981 * x * x * x).margin(1e-5));
    CHECK(std::log10((line("oii_3726") + line("oii_3729")) / hbeta) ==
          Approx(0.435 - 1.362 * x - 5.655 * x * x - 4.851 * std::pow(x, 3) -
                 0.478 * std::pow(x, 4) + 0.736 * std::pow(x, 5))
              .margin(1e-5));
    CHECK(
        std::log10((line("sii_6716") + line("sii_6731")) / line("halpha")) ==
        Approx(-0.442 - 0.360 * x - 6.271 * x * x - 8.339 * std::pow(x, 3) - 3.559 * std::pow(x, 4))
            .margin(1e-5));
    CHECK(line("oiii_5007") / line("oiii_4959") == Approx(2.98).epsilon(1e-9));
    CHECK(line("nii_6584") / line("nii_6548") == Approx(3.05).epsilon(1e-9));
    // n_e = 100 cm^-3 (Sanders et al. 2016, eq. 7).
    CHECK(line("oii_3729") / line("oii_3726") == Approx(0.3771 * 2568.0 / 738.4).epsilon(1e-9));
    CHECK(line("sii_6716") / line("sii_6731") == Approx(0.4315 * 2207.0 / 727.1).epsilon(1e-9));
    CHECK(std::log10(line("oi_6300") / line("halpha")) == Approx(-1.5).margin(1e-9));
  }
  // Without GFM_Metals: 12 + log(O/H) = 8.69 + log10(Z / 0.0134); below the calibrations' range
  // the ratios are those at 7.6.
  HostGasCells gas;
  gas.add(1.0f, 1.0f, 0.0f, 0.0f, 1.0f, static_cast<float>(0.0134 * std::pow(10.0, -0.39)));
  gas.add(-5.0f, -5.0f, 0.0f, 0.0f, 1.0f, 1e-6f);
  const LineRun run = run_lines(s, gas, nlohmann::json::object());
  const auto& nii = run.maps.at("flux_nii_6584").values;
  const auto& halpha = run.maps.at("flux_halpha").values;
  const double x = -0.39, x_min = 7.6 - 8.69;
  auto n2 = [](double y) {
    return -0.489 + 1.513 * y - 2.554 * y * y - 5.293 * y * y * y - 2.867 * std::pow(y, 4);
  };
  CHECK(std::log10(nii[spaxel(4, 4)] / halpha[spaxel(4, 4)]) == Approx(n2(x)).margin(2e-5));
  CHECK(std::log10(nii[spaxel(1, 1)] / halpha[spaxel(1, 1)]) == Approx(n2(x_min)).margin(2e-5));
}

TEST_CASE(
    "emission lines: the dust in front and the birth clouds dim each line by the lines' curve at "
    "its rest wavelength",
    "[emission_lines][dust]") {
  // A sheet of non-star-forming gas in front of spaxel (4, 4) with A_V = 1, an emitting cell
  // behind it and one in front of it. Every emitting cell also sits in its birth clouds
  // (Charlot & Fall 2000): A_V^BC = 2.5 log10(e) tau_V^BC on top of the screen.
  const double mag_per_tau = 2.5 / std::log(10.0);
  struct Case {
    nlohmann::json params;
    DustCurve line_curve;  // what the lines must be dimmed with
    double tau_bc;
  };
  const std::vector<Case> cases{
      // Defaults: CCM89 (R_V = 3.1) for the lines, tau_V^BC = 1.
      {{{"curve", "ccm89"}}, {DustCurveKind::ccm89, 3.1}, 1.0},
      // Calzetti for the stars leaves the lines on CCM89.
      {{{"curve", "calzetti00"}}, {DustCurveKind::ccm89, 3.1}, 1.0},
      // The single screen of before: one curve, no birth clouds.
      {{{"curve", "calzetti00"}, {"line_curve", "calzetti00"}, {"birth_cloud_tau_v", 0}},
       {DustCurveKind::calzetti00, 4.05},
       0.0},
      {{{"line_r_v", 5.0}, {"birth_cloud_tau_v", 0.5}}, {DustCurveKind::ccm89, 5.0}, 0.5},
  };
  for (const Case& c : cases) {
    INFO("dust " << c.params.dump());
    const DustParams dp = DustParams::from_json(JsonParams(c.params, "d"));
    const double z_metals = 0.01;
    const float sheet_mass = static_cast<float>(4.0 / dp.av_per_gas_msun_per_kpc2(z_metals) / 4.0);
    HostGasCells gas;
    for (float dx : {0.3f, 0.7f, 1.2f, 1.6f})
      gas.add(dx, 2.0f - dx, -0.5f, 0.0f, 0.0f, static_cast<float>(z_metals), sheet_mass);
    gas.add(1.0f, 1.0f, 0.5f, 0.0f, 1.0f, 0.0134f, 1.0f);   // behind the sheet
    gas.add(3.0f, 1.0f, -1.0f, 0.0f, 1.0f, 0.0134f, 1.0f);  // spaxel (5, 4), nothing in front
    Setup s;
    s.wave_start_angstrom = 3600.0;
    s.n_wave = 2800;
    s.dust_params = c.params;
    const LineRun clear = run_lines(s, gas, nlohmann::json::object());
    s.dust = true;
    const LineRun dusty = run_lines(s, gas, nlohmann::json::object());
    const double a_bc = mag_per_tau * c.tau_bc;
    for (const auto& line : kEmissionLines) {
      INFO(line.name);
      const std::string map = "flux_" + std::string(line.name);
      const double k = attenuation_ratio(c.line_curve, line.vacuum_angstrom);
      const double behind =
          dusty.maps.at(map).values[spaxel(4, 4)] / clear.maps.at(map).values[spaxel(4, 4)];
      CHECK(behind == Approx(std::pow(10.0, -0.4 * (1.0 + a_bc) * k)).epsilon(5e-6));
      const double in_front =
          dusty.maps.at(map).values[spaxel(5, 4)] / clear.maps.at(map).values[spaxel(5, 4)];
      CHECK(in_front == Approx(std::pow(10.0, -0.4 * a_bc * k)).epsilon(5e-6));
    }
    // Bluer lines are dimmed more.
    CHECK(dusty.maps.at("flux_hbeta").values[spaxel(4, 4)] /
              dusty.maps.at("flux_halpha").values[spaxel(4, 4)] <
          1.0 / 2.86 * 0.85);
  }
}

TEST_CASE(
    "emission lines: bitwise identical cubes and maps for 1, 2, 3 and 5 devices, with and "
    "without smoothing, smoothing conserves the light inside the field",
    "[emission_lines]") {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> pos(0.0, 1.5), vel(0.0, 120.0);
  std::lognormal_distribution<double> sfr(-3.0, 1.0);
  HostGasCells gas;
  for (int i = 0; i < 400; ++i)
    gas.add(static_cast<float>(pos(rng)), static_cast<float>(pos(rng)),
            static_cast<float>(pos(rng)), static_cast<float>(vel(rng)),
            i % 5 == 0 ? 0.0f : static_cast<float>(sfr(rng)), 0.015f);
  for (const std::string smoothing : {"none", "kernel"}) {
    INFO("smoothing " << smoothing);
    Setup s;
    s.grid["smoothing"] = smoothing;
    s.dust = true;
    s.n_devices = 1;
    const LineRun one = run_lines(s, gas, nlohmann::json::object());
    double lit = 0;
    for (const double v : one.cube.data) lit += v;
    REQUIRE(lit > 0);
    for (const int n : {2, 3, 5}) {
      s.n_devices = n;
      const LineRun other = run_lines(s, gas, nlohmann::json::object());
      CHECK(std::memcmp(one.cube.data.data(), other.cube.data.data(),
                        one.cube.data.size() * sizeof(one.cube.data[0])) == 0);
      for (const auto& [name, map] : one.maps) {
        INFO(name);
        const auto& values = other.maps.at(name).values;
        CHECK(std::memcmp(map.values.data(), values.data(), values.size() * sizeof(double)) == 0);
      }
    }
  }
  // Cells well inside the 16 kpc field: smoothed or not, the H-alpha light is all there.
  double expected = 0;
  HostGasCells inner;
  for (std::size_t i = 0; i < gas.size(); ++i)
    if (std::abs(gas.position_kpc[3 * i]) < 5 && std::abs(gas.position_kpc[3 * i + 1]) < 5) {
      inner.add(gas.position_kpc[3 * i], gas.position_kpc[3 * i + 1], 0.0f, 0.0f, gas.sfr[i],
                0.015f);
      expected += halpha_lsun(gas.sfr[i]);
    }
  for (const std::string smoothing : {"none", "kernel"}) {
    Setup s;
    s.grid["smoothing"] = smoothing;
    const LineRun run = run_lines(s, inner, {{"lines", {"halpha"}}});
    double total = 0;
    for (const double v : run.maps.at("flux_halpha").values) total += v;
    CHECK(total == Approx(expected).epsilon(1e-6));
  }
}

TEST_CASE("emission lines: a ratio table replaces the calibrations of the lines it names",
          "[emission_lines]") {
  const fs::path file =
      fs::temp_directory_path() / ("ifusim_line_ratios_" + std::to_string(::getpid()) + ".h5");
  {
    h5::File f(file.string(), h5::File::Mode::truncate);
    f.write<double>("oxygen_abundance", {8.0, 9.0}, {2});
    f.write<double>("log_ionisation_parameter", {-4.0, -2.0}, {2});
    f.create_group("ratio_to_hbeta");
    // [N II] 6584 / H-beta: 0.5 at (8, -4) rising by 1 per dex of O/H and 0.2 per dex of U.
    f.write<double>("ratio_to_hbeta/nii_6584", {0.5, 0.9, 1.5, 1.9}, {2, 2});
  }
  HostGasCells gas;
  gas.with_metals = true;
  gas.add(1.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.02f);
  gas.metals = metals_for(8.5);
  Setup s;
  const LineRun run =
      run_lines(s, gas, {{"line_ratio_file", file.string()}, {"log_ionisation_parameter", -3.0}});
  auto line = [&](const std::string& name) {
    return run.maps.at("flux_" + name).values[spaxel(4, 4)];
  };
  CHECK(line("nii_6584") / line("hbeta") == Approx(1.2).epsilon(1e-6));  // O/H from floats
  // The lines it does not name keep their relations.
  CHECK(line("nii_6548") / line("halpha") ==
        Approx(std::pow(10.0, -0.489 + 1.513 * (-0.19) - 2.554 * 0.0361 + 5.293 * 0.006859 -
                                  2.867 * 0.00130321) /
               3.05)
            .epsilon(1e-4));

  // Bad tables: errors name the file and the dataset.
  {
    h5::File f(file.string(), h5::File::Mode::truncate);
    f.write<double>("oxygen_abundance", {8.0, 9.0}, {2});
    f.create_group("ratio_to_hbeta");
    f.write<double>("ratio_to_hbeta/halpha", {1.0, 1.0}, {2});
  }
  CHECK_THROWS_WITH(
      make_emission_lines_stage({{"line_ratio_file", file.string()}}, "p", io_resources()),
      Catch::Contains(file.string()) && Catch::Contains("ratio_to_hbeta/halpha") &&
          Catch::Contains("Case B"));
  {
    h5::File f(file.string(), h5::File::Mode::truncate);
    f.write<double>("oxygen_abundance", {9.0, 8.0}, {2});
  }
  CHECK_THROWS_WITH(
      make_emission_lines_stage({{"line_ratio_file", file.string()}}, "p", io_resources()),
      Catch::Contains("oxygen_abundance") && Catch::Contains("increasing"));
  {
    h5::File f(file.string(), h5::File::Mode::truncate);
    f.write<double>("oxygen_abundance", {8.0, 9.0}, {2});
    f.create_group("ratio_to_hbeta");
    f.write<double>("ratio_to_hbeta/sii_6716", {1.0, 1.0, 1.0}, {3});
  }
  CHECK_THROWS_WITH(
      make_emission_lines_stage({{"line_ratio_file", file.string()}}, "p", io_resources()),
      Catch::Contains("ratio_to_hbeta/sii_6716") && Catch::Contains("shape (2)"));
  fs::remove(file);
  CHECK_THROWS_WITH(
      make_emission_lines_stage({{"line_ratio_file", file.string()}}, "p", io_resources()),
      Catch::Contains(file.string()));
  // The stage reads no file itself: without the loader a table is a configuration error.
  CHECK_THROWS_WITH(make_emission_lines_stage({{"line_ratio_file", file.string()}}, "p", {}),
                    Catch::Contains("p.line_ratio_file"));
}

TEST_CASE("emission lines: parameters and inputs are checked, naming the key or the field",
          "[emission_lines]") {
  auto make = [](const nlohmann::json& p) {
    return make_emission_lines_stage(p, "stages.emission_lines", io_resources());
  };
  CHECK_THROWS_WITH(make({{"lines", {"halpha", "lyalpha"}}}),
                    Catch::Contains("stages.emission_lines.lines") && Catch::Contains("nii_6584"));
  CHECK_THROWS_WITH(make({{"lines", nlohmann::json::array()}}),
                    Catch::Contains("stages.emission_lines.lines"));
  CHECK_THROWS_WITH(make({{"turbulent_sigma_kms", -1}}),
                    Catch::Contains("stages.emission_lines.turbulent_sigma_kms"));
  CHECK_THROWS_WITH(make({{"electron_density_cm3", 0}}),
                    Catch::Contains("stages.emission_lines.electron_density_cm3"));
  CHECK_THROWS_WITH(make({{"sfr", 1}}), Catch::Contains("stages.emission_lines.sfr"));
  // Gas without star formation rates (a file without StarFormationRate).
  HostGasCells gas;
  gas.add(1.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.0134f);
  auto mesh = make_mesh(Backend::cpu, 1);
  RunState state(*mesh);
  state.data.stars = one_star(*mesh);
  state.data.gas = put_gas_cells(*mesh, gas);
  state.data.gas.sfr_msun_per_yr = {};
  state.observation.axes.wave_start_angstrom = 4700;
  state.observation.axes.wave_step_angstrom = 1.25;
  run_stage(*make_spaxel_grid_stage({{"n_spaxels", 8}, {"spaxel_size_kpc", 2.0}}, "g"), state);
  state.spaxels.n_wave = 100;
  CHECK_THROWS_WITH(run_stage(*make(nlohmann::json::object()), state),
                    Catch::Contains("sfr_msun_per_yr") && Catch::Contains("StarFormationRate"));
}

TEST_CASE("emission lines: the ratio table's path is resolved like the config's other paths",
          "[emission_lines]") {
  nlohmann::json doc = nlohmann::json::parse(
      std::ifstream(std::string(IFUSIM_SOURCE_DIR) + "/configs/examples/muse_disc_stars_gas.json"));
  doc["stages"]["emission_lines"]["line_ratio_file"] = "tables/ratios.h5";
  const RunConfig c = parse_run_config(doc, "/surveys/run1/config.json");
  for (const auto& stage : c.stages)
    if (stage.name == "emission_lines")
      CHECK(stage.params.at("line_ratio_file") == "/surveys/run1/tables/ratios.h5");
  doc["stages"]["emission_lines"]["line_ratio_file"] = "${IFUSIM_DATA_DIR}/lines.h5";
  for (const auto& stage : parse_run_config(doc, "/surveys/run1/config.json").stages)
    if (stage.name == "emission_lines")
      CHECK(stage.params.at("line_ratio_file") ==
            fs::path(data_dir() + "/lines.h5").lexically_normal().string());
}

TEST_CASE(
    "emission lines: lines-only flux after the flux and LSF stages is the cells' "
    "SFR x 10^41.297 / (4 pi D_L^2), and each line's total is its calibration summed over "
    "the cells",
    "[emission_lines]") {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> pos(0.0, 1.2), vel(0.0, 100.0);
  std::uniform_real_distribution<double> sfr(0.0, 2.0), logz(-2.5, -1.4);
  HostGasCells gas;
  std::vector<double> oxygen;
  for (int i = 0; i < 300; ++i) {
    const double z = std::pow(10.0, logz(rng));
    gas.add(static_cast<float>(pos(rng)), static_cast<float>(pos(rng)),
            static_cast<float>(pos(rng)), static_cast<float>(vel(rng)),
            static_cast<float>(sfr(rng)), static_cast<float>(z));
    oxygen.push_back(8.69 + std::log10(static_cast<double>(static_cast<float>(z)) / 0.0134));
  }
  Setup s;
  s.grid = {{"n_spaxels", 16}, {"spaxel_size_kpc", 1.0}};  // 16 kpc: every cell inside
  s.wave_start_angstrom = 3600.0;
  s.n_wave = 2800;
  s.after = {{"flux", {{"unit_scale", 1e-20}}}, {"lsf", nlohmann::json::object()}};
  const LineRun run = run_lines(s, gas, nlohmann::json::object());
  const double per_lsun = flux_per_solar_luminosity(100.0);  // erg/s/cm^2 per L_sun
  double sfr_total = 0;
  for (const float v : gas.sfr) sfr_total += v;
  auto map_total = [&](const std::string& line) {
    double t = 0;
    for (const double v : run.maps.at("flux_" + line).values) t += v;
    return t;
  };
  CHECK(run.maps.at("flux_halpha").unit == "erg/(s*cm**2)");
  CHECK(map_total("halpha") == Approx(halpha_lsun(sfr_total) * per_lsun).epsilon(1e-9));
  const EmissionLineParams params =
      EmissionLineParams::from_json(JsonParams(nlohmann::json::object(), "p"));
  double all_lines = 0;
  for (int l = 0; l < kNumEmissionLines; ++l) {
    INFO(kEmissionLines[l].name);
    double expected = 0;
    for (std::size_t i = 0; i < gas.size(); ++i)
      expected += halpha_lsun(gas.sfr[i]) * calibrated_ratio_to_halpha(params, l, oxygen[i]);
    CHECK(map_total(kEmissionLines[l].name) == Approx(expected * per_lsun).epsilon(1e-5));
    all_lines += map_total(kEmissionLines[l].name);
  }
  // The cube, LSF-convolved, still holds all of it (no line near the band's ends).
  double cube_total = 0;
  for (const double v : run.cube.data) cube_total += v * 1.25 * 1e-20;
  CHECK(cube_total == Approx(all_lines).epsilon(1e-6));
}

TEST_CASE("emission lines: stars + lines equals stars-only plus lines-only, voxel by voxel",
          "[emission_lines]") {
  HostGasCells gas;
  std::mt19937_64 rng(3);
  std::normal_distribution<double> pos(0.0, 2.0), vel(0.0, 100.0);
  for (int i = 0; i < 100; ++i)
    gas.add(static_cast<float>(pos(rng)), static_cast<float>(pos(rng)),
            static_cast<float>(pos(rng)), static_cast<float>(vel(rng)), 0.5f, 0.02f);
  Setup s;
  s.stars = true;
  const LineRun both = run_lines(s, gas, nlohmann::json::object());
  s.lines = false;
  const LineRun stars = run_lines(s, gas, nlohmann::json::object());
  s.stars = false;
  s.lines = true;
  const LineRun lines = run_lines(s, gas, nlohmann::json::object());
  REQUIRE(both.cube.data.size() == stars.cube.data.size());
  std::size_t differ = 0;
  double lit = 0;
  for (std::size_t i = 0; i < both.cube.data.size(); ++i) {
    // The lines land on the stars' float32 value as a double sum (rounded once); the lines-only
    // cube rounded that sum too: within two roundings of the float32 voxel.
    const double sum = static_cast<double>(stars.cube.data[i]) + lines.cube.data[i];
    differ += std::abs(both.cube.data[i] - sum) > 2 * test::kFloatRounding * std::abs(sum);
    lit += lines.cube.data[i];
  }
  REQUIRE(lit > 0);
  CHECK(differ == 0);
  CHECK(both.maps.count("velocity_light_kms") == 1);
  CHECK(both.maps.count("flux_halpha") == 1);
}

TEST_CASE("emission lines: gas that forms no stars gives an empty line cube, not an error",
          "[emission_lines]") {
  HostGasCells gas;
  gas.add(1.0f, 1.0f, 0.0f, 10.0f, 0.0f, 0.02f);
  Setup s;
  s.stars = true;
  const LineRun run = run_lines(s, gas, nlohmann::json::object());
  for (const double v : run.maps.at("flux_halpha").values) CHECK(v == 0.0);
  double lit = 0;
  for (const double v : run.cube.data) lit += v;
  CHECK(lit > 0);  // the star's light
}
