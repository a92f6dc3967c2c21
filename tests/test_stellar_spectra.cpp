#include <omp.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "bench/cube_agreement.h"
#include "binned_product_cases.h"
#include "data/wavelength.h"
#include "helpers.h"
#include "io/ssp/ssp_library.h"
#include "pipeline/devices.h"
#include "pipeline/registry.h"
#include "ssp_fixture.h"
#include "stages/common/particle_fields.h"
#include "stages/common/vector_kernels.h"
#include "stages/spaxel_grid/spaxel_grid.h"
#include "stages/stage.h"
#include "stages/stellar_spectra/binned_product.h"
#include "stages/stellar_spectra/stellar_spectra.h"
#include "tests/cube_tolerance.h"
#include "tng_test_util.h"

using namespace ifusim;

namespace {

const WaveBins kBins{4700.0, 1.25, 1800};  // 4699.375 .. 6949.375 A
constexpr double kRedshift = 0.05;

struct SpectraRun {
  Cube cube;
  std::map<std::string, std::vector<double>> maps;
  std::vector<std::int32_t> spaxel_index;
};

StellarSpectraParams method_params(SpectralMethod method,
                                   OutsideGrid outside = OutsideGrid::clamp) {
  StellarSpectraParams params;
  params.method = method;
  params.outside = outside;
  return params;
}

SpectraRun run_spectra(int n_devices, const test::HostStars& host,
                       std::shared_ptr<const SspGrid> grid, const StellarSpectraParams& params,
                       const WaveBins& bins = kBins, int n_spaxels = 8,
                       double spaxel_size_kpc = 2.0, double redshift = kRedshift,
                       const std::string& medium = "air", const std::string& smoothing = "none") {
  auto mesh = make_mesh(Backend::cpu, n_devices);
  RunState state(*mesh);
  state.data.stars = test::put_stars(*mesh, host);
  state.observation.redshift = redshift;
  state.observation.axes.wavelength_medium = medium;
  state.observation.axes.wave_start_angstrom = bins.start_angstrom;
  state.observation.axes.wave_step_angstrom = bins.log10_step > 0 ? 0.0 : bins.step_angstrom;
  state.observation.axes.wave_log10_step = bins.log10_step;
  const auto spaxels = make_spaxel_grid_stage(
      nlohmann::json{
          {"n_spaxels", n_spaxels}, {"spaxel_size_kpc", spaxel_size_kpc}, {"smoothing", smoothing}},
      "p");
  run_stage(*spaxels, state);  // with its pass over the stars (kNN lengths) where smoothed
  state.spaxels.n_wave = bins.n;
  make_stellar_spectra_stage(grid, params)->run(state);
  SpectraRun out;
  out.spaxel_index = state.data.stars.derived.at(fields::stars_spaxel_index).to_host();
  reduce_partials(state);
  out.cube = std::move(*state.cube);
  out.maps = test::map_values(std::move(state.maps));
  return out;
}

SpectraRun run_exact(int n_devices, const test::HostStars& host,
                     std::shared_ptr<const SspGrid> grid,
                     OutsideGrid outside = OutsideGrid::clamp) {
  return run_spectra(n_devices, host, grid, method_params(SpectralMethod::exact, outside));
}

std::vector<float> column(const std::vector<float>& rows, int c) {
  std::vector<float> out;
  for (std::size_t i = c; i < rows.size(); i += 3) out.push_back(rows[i]);
  return out;
}

}  // namespace

TEST_CASE("stellar spectra: one star lands in its spaxel at the Doppler-shifted wavelength",
          "[spectra]") {
  // A template that is zero but for one pixel at 5000 A: after the shift the light must sit at
  // 5000 (1 + z)(1 + v / c) in the star's spaxel, and nowhere else.
  auto grid = std::make_shared<SspGrid>(test::synthetic_ssp_grid());
  std::fill(grid->flux.begin(), grid->flux.end(), 0.0f);
  const std::size_t line_pixel = 1000;  // 3000 + 2 * 1000 = 5000 A, 2 A wide
  for (std::size_t node = 0; node < grid->n_age() * grid->n_metallicity(); ++node)
    grid->flux[node * grid->n_wave() + line_pixel] = 1e-4f;

  test::HostStars one = test::random_stars(1, 3);
  one.position_kpc = {-3.1f, 5.5f,
                      1.0f};  // ix = floor((-3.1 + 8) / 2) = 2, iy = floor(13.5 / 2) = 6
  one.velocity_kms = {10.0f, -20.0f, 250.0f};
  one.initial_mass_msun = {2.0e6f};
  const SpectraRun run = run_exact(1, one, grid);

  const double doppler = (1 + kRedshift) * (1 + 250.0 / kSpeedOfLightKms);
  const double centre = 5000.0 * doppler;                          // 5251.1 A
  const double energy = 2.0e6 * static_cast<double>(1e-4f) * 2.0;  // L_sun in the line
  double total = 0, weighted_wavelength = 0;
  for (int iy = 0; iy < 8; ++iy)
    for (int ix = 0; ix < 8; ++ix)
      for (int k = 0; k < kBins.n; ++k) {
        const double v = run.cube.at(ix, iy, k);
        REQUIRE(std::isfinite(v));
        if (ix != 2 || iy != 6) REQUIRE(v == 0.0);
        total += v * kBins.step_angstrom;
        weighted_wavelength +=
            v * kBins.step_angstrom * (kBins.start_angstrom + k * kBins.step_angstrom);
      }
  CHECK(total == Approx(energy).epsilon(test::kCubeValue));  // light conserved
  // The centroid of bin centres, weighted by the light, sits within a small fraction of a bin of
  // the shifted line (it is exact only up to binning); a wrong Doppler factor moves it by
  // 4.4 A (v / c) or 250 A (z).
  CHECK(std::abs(weighted_wavelength / total - centre) < 0.05 * kBins.step_angstrom);
  // The shifted pixel spans 2 A * doppler = 2.1 A: it touches only the bins around the centre.
  const int k_centre =
      static_cast<int>(std::lround((centre - kBins.start_angstrom) / kBins.step_angstrom));
  for (int k = 0; k < kBins.n; ++k)
    if (std::abs(k - k_centre) > 2) CHECK(run.cube.at(2, 6, k) == 0.0);
  // The kinematic maps see the star's velocity, mass- and light-weighted.
  CHECK(run.maps.at("velocity_mass_kms")[6 * 8 + 2] == Approx(250.0).epsilon(1e-9));
  CHECK(run.maps.at("velocity_light_kms")[6 * 8 + 2] == Approx(250.0).epsilon(1e-9));
  CHECK(run.maps.at("dispersion_mass_kms")[6 * 8 + 2] == Approx(0.0).margin(1e-3));
  CHECK(std::isnan(run.maps.at("velocity_mass_kms")[0]));
}

TEST_CASE("stellar spectra: the fused kernel matches the double-precision reference", "[spectra]") {
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  for (unsigned seed : {1u, 2u}) {
    test::HostStars host = test::random_stars(400, seed, 4.0);
    // Some stars outside the grid's ages and metallicities, to exercise the policy.
    host.age_gyr[0] = 0.01f;
    host.metallicity[1] = 0.1f;
    for (OutsideGrid policy : {OutsideGrid::clamp, OutsideGrid::zero}) {
      const SpectraRun run = run_exact(1, host, grid, policy);
      const auto reference = reference_stellar_cube(
          *grid, policy, "air", kRedshift, kBins, 64, column(host.velocity_kms, 2),
          host.initial_mass_msun, host.age_gyr, host.metallicity, run.spaxel_index);
      double max_ref = 0;
      for (double v : reference) max_ref = std::max(max_ref, std::abs(v));
      REQUIRE(max_ref > 0);
      // Per voxel: 1e-9 of the brightest voxel (float32 inputs are shared; only summation order
      // and the fixed-point quantum differ), and the cube's rounding to float32 (2^-24 of a
      // voxel, at most of the brightest).
      double worst = 0;
      for (std::size_t i = 0; i < reference.size(); ++i) {
        REQUIRE(std::isfinite(run.cube.data[i]));
        worst = std::max(worst, std::abs(run.cube.data[i] - reference[i]));
      }
      INFO("seed " << seed << ", worst |fused - reference| / max = " << worst / max_ref);
      CHECK(worst <= (1e-9 + test::kFloatRounding) * max_ref);
    }
  }
}

TEST_CASE("stellar spectra: air wavelengths are converted at the observed wavelength",
          "[spectra][air]") {
  // One star with one bright template pixel, at z = 1, seen by a telescope in air. Its light
  // must span the pixel's vacuum edges times D = (1 + z)(1 + v/c), converted to air at that
  // observed wavelength (~10008 A): n(10008 A) - 1 is 4.8e-6 smaller than n(5004 A) - 1, so
  // converting at rest instead would put the line 0.048 A bluer, ~1 of these 0.05 A bins.
  constexpr double z = 1.0;
  const WaveBins bins{9990.0, 0.05, 600};  // 9989.975 .. 10019.975 A (air)
  const double doppler = (1 + z) * (1 + 250.0 / kSpeedOfLightKms);
  test::HostStars one = test::random_stars(1, 3);
  one.position_kpc = {-3.1f, 5.5f, 1.0f};  // spaxel (2, 6)
  one.velocity_kms = {10.0f, -20.0f, 250.0f};
  one.initial_mass_msun = {2.0e6f};
  for (const std::string template_medium : {"vacuum", "air"}) {
    INFO("templates in " << template_medium);
    auto grid = std::make_shared<SspGrid>(test::synthetic_ssp_grid());
    grid->wavelength_medium = template_medium;
    std::fill(grid->flux.begin(), grid->flux.end(), 0.0f);
    const std::size_t line_pixel = 1000;  // centre 5000 A, neighbours 2 A away
    for (std::size_t node = 0; node < grid->n_age() * grid->n_metallicity(); ++node)
      grid->flux[node * grid->n_wave() + line_pixel] = 1e-4f;
    // The pixel's rest edges in vacuum (midpoints of the converted centres) and in air.
    auto vacuum = [&](double w) { return template_medium == "air" ? vacuum_from_air(w) : w; };
    const double vac_lo = 0.5 * (vacuum(4998.0) + vacuum(5000.0));
    const double vac_hi = 0.5 * (vacuum(5000.0) + vacuum(5002.0));
    const double expected =
        0.5 * (air_from_vacuum(vac_lo * doppler) + air_from_vacuum(vac_hi * doppler));
    const double converted_at_rest =
        0.5 * (air_from_vacuum(vac_lo) + air_from_vacuum(vac_hi)) * doppler;
    REQUIRE(expected - converted_at_rest > 0.04);  // the effect the test resolves

    for (SpectralMethod method : {SpectralMethod::exact, SpectralMethod::binned}) {
      INFO((method == SpectralMethod::exact ? "exact" : "binned"));
      const SpectraRun run = run_spectra(1, one, grid, method_params(method), bins, 8, 2.0, z);
      double total = 0, weighted = 0;
      for (int k = 0; k < bins.n; ++k) {
        const double v = run.cube.at(2, 6, k) * bins.step_angstrom;
        total += v;
        weighted += v * (bins.start_angstrom + k * bins.step_angstrom);
      }
      // Light conserved: the pixel's energy is its flux times its width in its own medium. The
      // binned method's basis B is float (binned_product.cpp): each bin's value rounds to a
      // relative 6e-8, so its total holds to 2e-7; the cube's float32 voxels add their rounding
      // (tests/cube_tolerance.h).
      CHECK(total == Approx(2.0e6 * static_cast<double>(1e-4f) * 2.0)
                         .epsilon(method == SpectralMethod::exact ? test::kCubeValue
                                                                  : 2e-7 + test::kCubeValue));
      // The centroid of a 4 A box binned in 0.05 A bins is within step^2 / (4 width) = 1.6e-4 A
      // of the box's centre; the binned method's velocity interpolation moves it by < 1e-6 A.
      INFO("centroid " << weighted / total << ", expected " << expected << ", converted at rest "
                       << converted_at_rest);
      CHECK(std::abs(weighted / total - expected) < 1e-3);
    }
  }
}

TEST_CASE("stellar spectra: exact, binned and reference agree for a vacuum telescope at z = 1",
          "[spectra][air]") {
  // The library is in air (converted to vacuum at rest), the telescope in vacuum (its bins used
  // as they are): the other combination of media than the default tests.
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const WaveBins bins{8000.0, 2.5, 1200};  // 7998.75 .. 10998.75 A (vacuum)
  const test::HostStars host = test::random_stars(400, 9, 4.0);
  const SpectraRun exact =
      run_spectra(1, host, grid, method_params(SpectralMethod::exact), bins, 8, 2.0, 1.0, "vacuum");
  const auto reference = reference_stellar_cube(
      *grid, OutsideGrid::clamp, "vacuum", 1.0, bins, 64, column(host.velocity_kms, 2),
      host.initial_mass_msun, host.age_gyr, host.metallicity, exact.spaxel_index);
  double max_ref = 0, worst = 0;
  for (double v : reference) max_ref = std::max(max_ref, std::abs(v));
  REQUIRE(max_ref > 0);
  for (std::size_t i = 0; i < reference.size(); ++i)
    worst = std::max(worst, std::abs(exact.cube.data[i] - reference[i]));
  // As the default test: summation order, quantum and the float32 voxel only.
  CHECK(worst <= (1e-9 + test::kFloatRounding) * max_ref);
  const SpectraRun binned = run_spectra(1, host, grid, method_params(SpectralMethod::binned), bins,
                                        8, 2.0, 1.0, "vacuum");
  const CubeAgreement a =
      cube_agreement(binned.cube.data, exact.cube.data, binned.maps.at("velocity_light_kms"),
                     exact.maps.at("velocity_light_kms"));
  CHECK(a.total_relative <= 1e-6);
  CHECK(a.max_over_peak <= 2e-3);
}

TEST_CASE("stellar spectra: a library whose edges fold when converted to vacuum is refused",
          "[spectra][air]") {
  // Air to vacuum is monotonic, but rounding can map two adjacent doubles to a non-increasing
  // pair; a grid that samples there must be an error naming the library, not a negative pixel.
  double a = 6000.0;
  bool found = false;
  for (int i = 0; i < 2000000 && !found; ++i) {
    const double b = std::nextafter(a, 1e9);
    if (vacuum_from_air(b) <= vacuum_from_air(a))
      found = true;
    else
      a = b;
  }
  REQUIRE(found);
  SspGrid grid = test::synthetic_ssp_grid();
  grid.name = "folded_library";
  grid.wavelength_medium = "air";
  const std::size_t n_nodes = grid.n_age() * grid.n_metallicity();
  grid.wavelength_angstrom = {a - 1.0, a, std::nextafter(a, 1e9), a + 1.0};
  grid.flux.assign(n_nodes * 4, 1.0f);
  CHECK_THROWS_WITH(make_ssp_tables(grid),
                    Catch::Contains("folded_library") && Catch::Contains("do not increase"));
  grid.wavelength_medium = "vacuum";  // the same grid in vacuum is not converted: accepted
  CHECK_NOTHROW(make_ssp_tables(grid));
}

TEST_CASE(
    "stellar spectra: cube and maps bitwise identical for 1, 2, 3 and 5 devices, both methods",
    "[spectra]") {
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const auto host = test::random_stars(2001, 77, 5.0);
  for (SpectralMethod method : {SpectralMethod::exact, SpectralMethod::binned}) {
    const SpectraRun one = run_spectra(1, host, grid, method_params(method));
    for (int d : {2, 3, 5}) {
      const SpectraRun many = run_spectra(d, host, grid, method_params(method));
      CHECK(std::memcmp(many.cube.data.data(), one.cube.data.data(),
                        one.cube.data.size() * sizeof(one.cube.data[0])) == 0);
      for (const auto& [name, map] : one.maps)
        CHECK(std::memcmp(many.maps.at(name).data(), map.data(), map.size() * sizeof(double)) == 0);
    }
  }
}

TEST_CASE("stellar spectra: parameters are validated", "[spectra]") {
  CHECK_THROWS_WITH(StellarSpectraParams::from_json(
                        JsonParams(nlohmann::json{{"outside_grid", "extrapolate"}}, "ssp")),
                    Catch::Contains("ssp.outside_grid: expected one of \"clamp\", \"zero\""));
}

namespace {

void check_targets(const SpectraRun& binned, const SpectraRun& exact) {
  const CubeAgreement a =
      cube_agreement(binned.cube.data, exact.cube.data, binned.maps.at("velocity_light_kms"),
                     exact.maps.at("velocity_light_kms"));
  INFO("total " << a.total_relative << ", max/peak " << a.max_over_peak << ", median "
                << a.median_relative << ", p99 " << a.p99_relative << ", |dv| "
                << a.max_velocity_kms << " km/s");
  REQUIRE(a.finite);
  REQUIRE(a.peak > 0);
  CHECK(a.same_spaxels);
  CHECK(a.total_relative <= 1e-6);
  CHECK(a.max_over_peak <= 2e-3);
  CHECK(a.median_relative <= 1e-3);
  CHECK(a.p99_relative <= 1e-2);
  CHECK(a.max_velocity_kms <= 2.0);
}

}  // namespace

TEST_CASE("binned spectra: one star lands in its spaxel at the Doppler-shifted wavelength",
          "[spectra][binned]") {
  auto grid = std::make_shared<SspGrid>(test::synthetic_ssp_grid());
  std::fill(grid->flux.begin(), grid->flux.end(), 0.0f);
  for (std::size_t node = 0; node < grid->n_age() * grid->n_metallicity(); ++node)
    grid->flux[node * grid->n_wave() + 1000] = 1e-4f;  // one pixel at 5000 A, 2 A wide
  test::HostStars one = test::random_stars(1, 3);
  one.position_kpc = {-3.1f, 5.5f, 1.0f};  // spaxel (2, 6)
  one.velocity_kms = {10.0f, -20.0f, 250.0f};
  one.initial_mass_msun = {2.0e6f};
  const SpectraRun run = run_spectra(1, one, grid, method_params(SpectralMethod::binned));
  const double centre = 5000.0 * (1 + kRedshift) * (1 + 250.0 / kSpeedOfLightKms);
  double total = 0, weighted_wavelength = 0;
  for (int iy = 0; iy < 8; ++iy)
    for (int ix = 0; ix < 8; ++ix)
      for (int k = 0; k < kBins.n; ++k) {
        const double v = run.cube.at(ix, iy, k);
        REQUIRE(std::isfinite(v));
        if (ix != 2 || iy != 6) REQUIRE(v == 0.0);
        total += v * kBins.step_angstrom;
        weighted_wavelength +=
            v * kBins.step_angstrom * (kBins.edge(k) + 0.5 * kBins.step_angstrom);
      }
  CHECK(total == Approx(2.0e6 * static_cast<double>(1e-4f) * 2.0).epsilon(test::kCubeValue));
  // Cloud-in-cell between velocity nodes 5 km/s apart moves the centroid by far less than a bin.
  CHECK(std::abs(weighted_wavelength / total - centre) < 0.05 * kBins.step_angstrom);
  CHECK(run.maps.at("velocity_light_kms")[6 * 8 + 2] == Approx(250.0).margin(0.1));
  CHECK(run.maps.at("velocity_mass_kms")[6 * 8 + 2] == Approx(250.0).epsilon(1e-9));
}

TEST_CASE("binned spectra agree with the exact method within the accuracy targets",
          "[spectra][binned]") {
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  test::HostStars host = test::random_stars(20000, 11, 4.0);
  host.age_gyr[0] = 0.01f;  // outside the grid, for the policies
  host.metallicity[1] = 0.1f;
  for (OutsideGrid policy : {OutsideGrid::clamp, OutsideGrid::zero}) {
    const SpectraRun exact =
        run_spectra(2, host, grid, method_params(SpectralMethod::exact, policy));
    const SpectraRun binned =
        run_spectra(2, host, grid, method_params(SpectralMethod::binned, policy));
    check_targets(binned, exact);
    // The mass-weighted maps do not depend on the method.
    CHECK(binned.maps.at("velocity_mass_kms") == exact.maps.at("velocity_mass_kms"));
  }
}

TEST_CASE("binned spectra with kernel smoothing agree with the exact method's, any storage",
          "[spectra][binned][smoothing]") {
  // Kernel smoothing (docs/smoothing.md) spreads each star over the spaxels of its footprint;
  // the binned method deposits its histogram entries there with the same weights as the exact
  // method its spectrum, so the accuracy targets must hold as without smoothing, whether the
  // histogram is dense or sparse (the automatic choice counts the footprint's spaxels).
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const test::HostStars host = test::random_stars(6000, 29, 4.0);
  // 16 x 16 spaxels of 1 kpc: the 32-neighbour lengths span several spaxels.
  const SpectraRun exact = run_spectra(2, host, grid, method_params(SpectralMethod::exact), kBins,
                                       16, 1.0, kRedshift, "air", "kernel");
  const SpectraRun unsmoothed = run_spectra(2, host, grid, method_params(SpectralMethod::exact),
                                            kBins, 16, 1.0, kRedshift, "air", "none");
  // The smoothing did spread the light: more lit spaxels than without.
  auto lit = [](const SpectraRun& r) {
    int n = 0;
    for (int s = 0; s < 256; ++s)
      for (int k = 0; k < kBins.n; ++k)
        if (r.cube.data[static_cast<std::size_t>(s) * kBins.n + k] != 0.0) {
          ++n;
          break;
        }
    return n;
  };
  REQUIRE(lit(exact) > lit(unsmoothed));
  for (HistogramStorage storage :
       {HistogramStorage::automatic, HistogramStorage::dense, HistogramStorage::sparse}) {
    INFO("storage " << static_cast<int>(storage));
    StellarSpectraParams params = method_params(SpectralMethod::binned);
    params.histogram = storage;
    const SpectraRun binned =
        run_spectra(3, host, grid, params, kBins, 16, 1.0, kRedshift, "air", "kernel");
    check_targets(binned, exact);
    CHECK(binned.maps.at("velocity_mass_kms") == exact.maps.at("velocity_mass_kms"));
    // The light-weighted velocities compared are there: defined, and not all 0, on the lit
    // spaxels.
    const std::vector<double>& v = binned.maps.at("velocity_light_kms");
    int defined = 0;
    double largest_kms = 0.0;
    for (double x : v)
      if (!std::isnan(x)) {
        ++defined;
        largest_kms = std::max(largest_kms, std::abs(x));
      }
    CHECK(defined == lit(exact));
    CHECK(largest_kms > 10.0);
  }
}

TEST_CASE("binned spectra with kernel smoothing: bitwise identical for 1, 2 and 3 devices",
          "[spectra][binned][smoothing]") {
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const test::HostStars host = test::random_stars(2001, 31, 4.0);
  const StellarSpectraParams params = method_params(SpectralMethod::binned);
  const SpectraRun one =
      run_spectra(1, host, grid, params, kBins, 16, 1.0, kRedshift, "air", "kernel");
  for (int d : {2, 3}) {
    const SpectraRun many =
        run_spectra(d, host, grid, params, kBins, 16, 1.0, kRedshift, "air", "kernel");
    CHECK(std::memcmp(many.cube.data.data(), one.cube.data.data(),
                      one.cube.data.size() * sizeof(one.cube.data[0])) == 0);
    for (const auto& [name, map] : one.maps)
      CHECK(std::memcmp(many.maps.at(name).data(), map.data(), map.size() * sizeof(double)) == 0);
  }
}

TEST_CASE("binned spectra: a template's end inside the band is exact, whatever the nodes",
          "[spectra][binned]") {
  // The band (2800-9000 A) holds both ends of the templates (3000-8000 A at rest, 3150-8400 A
  // observed), where each star's spectrum steps to zero at its own shifted wavelength. Cloud-in-
  // cell velocity weights alone would split that step between two nodes, an error of first
  // order in du; the ends' windows (EdgeWindow) make it exact. Flat templates (a different level
  // per node) leave nothing else to interpolate but 1/D, so even 20 km/s nodes must agree with
  // the exact method to 1e-6 of the peak; the shaped templates must meet the accuracy targets.
  const WaveBins wide{2800.0, 2.0, 3100};
  const test::HostStars host = test::random_stars(4000, 17, 4.0);
  auto flat = std::make_shared<SspGrid>(test::synthetic_ssp_grid());
  for (std::size_t i = 0; i < flat->flux.size(); ++i)
    flat->flux[i] = 1e-5f * static_cast<float>(1 + i / flat->n_wave() % 7);
  auto shaped = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  for (const auto& [grid, bin_kms] :
       {std::pair<std::shared_ptr<const SspGrid>, double>{flat, 20.0}, {shaped, 5.0}}) {
    INFO((grid == shaped ? "shaped" : "flat") << " templates, " << bin_kms << " km/s nodes");
    StellarSpectraParams params = method_params(SpectralMethod::binned);
    params.velocity_bin_kms = bin_kms;
    const SpectraRun exact =
        run_spectra(2, host, grid, method_params(SpectralMethod::exact), wide, 4, 4.0);
    const SpectraRun binned = run_spectra(3, host, grid, params, wide, 4, 4.0);
    check_targets(binned, exact);
    const CubeAgreement a =
        cube_agreement(binned.cube.data, exact.cube.data, binned.maps.at("velocity_light_kms"),
                       exact.maps.at("velocity_light_kms"));
    INFO("max/peak " << a.max_over_peak << " at bin " << a.worst_voxel % wide.n);
    if (grid == flat) CHECK(a.max_over_peak <= 1e-6);
    // Dark below the blue end and above the red end (beyond the stars' largest shifts).
    const int dark_blue = static_cast<int>((3000.0 * (1 + kRedshift) * 0.995 - 2799.0) / 2.0);
    const int dark_red = static_cast<int>((8000.0 * (1 + kRedshift) * 1.005 - 2799.0) / 2.0) + 1;
    for (std::size_t s = 0; s < 16; ++s) {
      for (int k = 0; k < dark_blue; ++k) REQUIRE(binned.cube.data[s * wide.n + k] == 0.0);
      for (int k = dark_red; k < wide.n; ++k) REQUIRE(binned.cube.data[s * wide.n + k] == 0.0);
    }
  }
}

TEST_CASE("binned spectra agree with exact on the MaStar and MILES libraries, MUSE bins",
          "[spectra][binned][data]") {
  const std::string data_dir = test::data_dir();
  const WaveBins muse{4750.0, 1.25, 3721};
  const test::HostStars host = test::random_stars(20000, 5, 4.0);
  for (const std::string library :
       {"ssp/MaStar_CB19.12_1_5.fits.gz", "ssp/MILES_BASTI_CH_baseFe"}) {
    INFO(library);
    auto grid = std::make_shared<const SspGrid>(load_ssp_library(data_dir + "/" + library, "auto"));
    const SpectraRun exact =
        run_spectra(2, host, grid, method_params(SpectralMethod::exact), muse, 5, 4.0);
    const SpectraRun binned =
        run_spectra(2, host, grid, method_params(SpectralMethod::binned), muse, 5, 4.0);
    check_targets(binned, exact);
  }
}

namespace {

// The products' tests' input: the synthetic library's templates on 300 bins of 2.5 A from
// 4000 A, velocity nodes +-300 km/s in 20, z = 0.02, `n_spaxels` rows.
BinnedProductInput product_input(const SspTables& tables, std::int32_t n_spaxels) {
  BinnedProductInput in;
  in.ssp = tables.host_view(OutsideGrid::clamp);
  in.bins.start_angstrom = 4000.0;
  in.bins.step_angstrom = 2.5;
  in.bins.n = 300;
  in.band_first_bin = 0;
  in.band_end_bin = in.bins.n;
  in.tile.n_spaxels = n_spaxels;
  in.tile.n_nodes = static_cast<int>(tables.log_age.size() * tables.log_z.size());
  in.tile.velocity = {-1e-3, 1e-4, 20};
  in.tile.one_plus_z = 1.02;
  return in;
}

// H with an entry of 1e4 x [0.5, 1.5) Msun at each (row, column) where keep(r, c, uniform), from a
// seeded generator of uniform draws in [0, 1).
template <class Keep>
HostHistogram random_histogram(const BinnedProductInput& in, std::uint64_t seed, Keep keep) {
  std::uint64_t state = seed;
  auto uniform = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) / 9007199254740992.0;
  };
  const std::size_t n_columns = in.tile.columns();
  HostHistogram h;
  for (std::size_t r = 0; r < static_cast<std::size_t>(in.tile.n_spaxels); ++r)
    for (std::size_t c = 0; c < n_columns; ++c)
      if (keep(r, c, uniform)) {
        h.index.push_back(r * n_columns + c);
        h.mass_msun.push_back(1e4 * (0.5 + uniform()));
      }
  return h;
}

}  // namespace

// B's chunks (binned_product.h): made and multiplied a range of wavelength bins at a time, a chunk
// to a thread. Each voxel's sum still runs over all its block's columns in one product: the cube
// agrees with B whole's to float rounding (here bitwise: Eigen tiles these bins the same way), and
// the light moments (each column's band energy summed chunk by chunk, in the chunks' order) to
// double rounding, and both agree with sums made row by row from basis_row. A chunk that lost or
// repeated a bin, a basis row restarted at the wrong edge, or a block's columns gathered from the
// wrong chunk, would be off by a bin's or a column's light.
TEST_CASE("binned product: B in chunks of bins gives B whole's cube", "[spectra][binned]") {
  const SspTables tables = make_ssp_tables(test::synthetic_ssp_grid());
  BinnedProductInput in = product_input(tables, 70);  // row blocks of 32, 32 and 6
  const std::size_t n_columns = in.tile.columns();
  // H: the first block dense (every spaxel on the first 60 columns: dense products), the others a
  // few scattered columns each (sparse).
  const HostHistogram h =
      random_histogram(in, 12345, [](std::size_t r, std::size_t c, auto& uniform) {
        return r < 32 ? c < 60 : uniform() < 0.01;
      });
  const std::size_t n_voxels = static_cast<std::size_t>(in.tile.n_spaxels) * in.bins.n;
  struct Product {
    std::vector<float> cube;
    std::vector<double> moments;
    BinnedProductStats stats;
  };
  auto product = [&](std::size_t basis_bytes) {
    in.basis_memory_bytes = basis_bytes;
    Product p{std::vector<float>(n_voxels, 0.0f),
              std::vector<double>(3 * static_cast<std::size_t>(in.tile.n_spaxels), 0.0),
              {}};
    p.stats = binned_product(in, h, p.cube.data(), p.moments.data());
    return p;
  };
  const Product whole = product(n_columns * static_cast<std::size_t>(in.bins.n) * sizeof(float));
  double peak = 0.0;
  for (const float v : whole.cube) {
    REQUIRE(std::isfinite(v));
    peak = std::max(peak, std::abs(static_cast<double>(v)));
  }
  REQUIRE(peak > 0.0);
  CHECK(whole.stats.dense_blocks > 0);
  CHECK(whole.stats.sparse_blocks > 0);
  // Chunks of 48 bins (six, and one of 12), of 96, and the least (1 byte: 48 bins).
  const std::size_t bin_bytes = n_columns * sizeof(float);
  for (const std::size_t chunk_bytes : {48 * bin_bytes, 96 * bin_bytes, std::size_t{1}}) {
    const Product chunked = product(chunk_bytes);
    INFO("chunk bytes: " << chunk_bytes);
    double apart = 0.0;
    for (std::size_t i = 0; i < n_voxels; ++i)
      apart = std::max(apart, std::abs(static_cast<double>(chunked.cube[i]) - whole.cube[i]));
    CHECK(apart <= 1e-6 * peak);
    double moments_apart = 0.0;
    for (std::size_t i = 0; i < whole.moments.size(); ++i) {
      REQUIRE(std::isfinite(chunked.moments[i]));
      moments_apart = std::max(moments_apart, std::abs(chunked.moments[i] - whole.moments[i]) /
                                                  std::max(1e-300, std::abs(whole.moments[i])));
    }
    CHECK(moments_apart <= 1e-12);
    CHECK(chunked.stats.dense_blocks == whole.stats.dense_blocks);
  }
  // And the whole B against an independent sum of H's entries times each column's row (double,
  // basis_row): the float product errs by float rounding only.
  std::vector<double> expected(n_voxels, 0.0), row(static_cast<std::size_t>(in.bins.n));
  std::vector<double> expected_light(static_cast<std::size_t>(in.tile.n_spaxels), 0.0);
  for (std::size_t e = 0; e < h.index.size(); ++e) {
    const BasisColumn light = basis_row(in, h.index[e] % n_columns, row.data());
    const std::size_t r = h.index[e] / n_columns;
    for (std::size_t k = 0; k < row.size(); ++k)
      expected[r * row.size() + k] += h.mass_msun[e] * row[k];
    expected_light[r] += h.mass_msun[e] * light.band_energy;
  }
  REQUIRE(expected_light[0] > 0.0);  // the dense block's spaxels all hold light
  for (std::size_t r = 0; r < expected_light.size(); ++r) {
    CHECK(std::abs(whole.moments[3 * r] - expected_light[r]) <= 1e-12 * expected_light[r]);
  }
  double worst = 0.0;
  for (std::size_t i = 0; i < n_voxels; ++i)
    worst = std::max(worst, std::abs(whole.cube[i] - expected[i]));
  CHECK(worst <= 1e-5 * peak);
}

// multiply_rows (the dense blocks' product) is each element's sum over the depth in order,
// products and sums rounded one by one: bitwise the plain loop's, whichever of its register
// tiles, depth panels and leftover paths makes the element (rows and widths not multiples of its
// tiles, depths across several panels), and within float rounding of the double product; b's
// rows taken in order or picked by index from a wider array (the block's columns of B's chunk).
TEST_CASE("multiply_rows: bitwise the ordered float sum, any shape", "[spectra][binned]") {
  std::mt19937_64 rng(41);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const bool picked : {false, true})
    for (const auto& [rows, depth, width] : std::vector<std::array<std::size_t, 3>>{
             {1, 1, 1}, {4, 7, 64}, {5, 513, 81}, {32, 1100, 128}, {9, 2048, 150}, {3, 30, 17}}) {
      INFO(rows << " x " << depth << " x " << width << (picked ? ", b's rows by index" : ""));
      // Picked: b holds 2 depth + 1 rows of width + 3, row q of the product at index 2 q + 1.
      const std::size_t b_stride = picked ? width + 3 : width;
      std::vector<float> a(rows * depth), b((picked ? 2 * depth + 1 : depth) * b_stride),
          c(rows * width, std::nanf(""));
      std::vector<std::int32_t> b_rows;
      for (std::size_t q = 0; picked && q < depth; ++q)
        b_rows.push_back(static_cast<std::int32_t>(2 * q + 1));
      for (float& x : a) x = value(rng);
      for (float& x : b) x = value(rng);
      auto b_at = [&](std::size_t q, std::size_t k) {
        return b[(picked ? 2 * q + 1 : q) * b_stride + k];
      };
      multiply_rows(a.data(), rows, depth, b.data(), b_stride, picked ? b_rows.data() : nullptr,
                    width, c.data());
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t k = 0; k < width; ++k) {
          float ordered = 0.0f;
          double exact = 0.0;
          for (std::size_t q = 0; q < depth; ++q) {
            const float product = a[r * depth + q] * b_at(q, k);
            ordered += product;
            exact += static_cast<double>(a[r * depth + q]) * b_at(q, k);
          }
          const float got = c[r * width + k];
          REQUIRE(std::isfinite(got));
          REQUIRE(std::memcmp(&got, &ordered, sizeof got) == 0);
          CHECK(std::abs(got - exact) <= 1e-5 * static_cast<double>(depth));
        }
    }
}

// add_scaled_rows (the sparse blocks' product) keeps a tile of y in registers over all the rows:
// bitwise its groups of kScaledRowsGroup rows, each summed in float from +0 in order and added to
// y in double, whether an element is in a whole tile or left over, for any widths, counts (none,
// part of a group and several groups included), strides and repeated rows; and within the float
// rounding of the sum in double (each group's sum of g terms off by at most about g float
// roundings of its terms' magnitudes).
TEST_CASE("add_scaled_rows: bitwise its float groups added in double, any shape",
          "[spectra][binned]") {
  std::mt19937_64 rng(47);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  const std::vector<std::array<std::size_t, 3>> shapes = {
      {1, 1, 1},       {64, 5, 64}, {100, 0, 128}, {31, 17, 40},
      {192, 300, 200}, {7, 3, 9},   {130, 8, 130}, {65, 9, 70}};
  for (const auto& [n, count, stride] : shapes) {
    INFO(n << " wide, " << count << " rows, stride " << stride);
    const std::size_t n_rows = count + 3;
    std::vector<float> x(n_rows * stride);
    for (float& v : x) v = static_cast<float>(value(rng));
    std::vector<double> a(count), y(n), expected(n), exact(n), magnitude(n, 0.0);
    std::vector<std::int32_t> rows(count);
    for (std::size_t e = 0; e < count; ++e) {
      a[e] = 1e3 * value(rng);
      rows[e] = static_cast<std::int32_t>((5 * e + 2) % n_rows);  // some rows more than once
    }
    for (std::size_t k = 0; k < n; ++k) y[k] = expected[k] = exact[k] = value(rng);
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t g = 0; g < count; g += kScaledRowsGroup) {
        float sum = 0.0f;
        for (std::size_t e = g; e < std::min(count, g + kScaledRowsGroup); ++e) {
          const float xk = x[static_cast<std::size_t>(rows[e]) * stride + k];
          const float product = static_cast<float>(a[e]) * xk;
          sum += product;
          exact[k] += a[e] * static_cast<double>(xk);
          magnitude[k] += std::abs(a[e] * static_cast<double>(xk));
        }
        expected[k] += static_cast<double>(sum);
      }
    add_scaled_rows(y.data(), n, a.data(), rows.data(), count, x.data(), stride);
    for (std::size_t k = 0; k < n; ++k) {
      REQUIRE(std::isfinite(y[k]));
      REQUIRE(std::memcmp(&y[k], &expected[k], sizeof(double)) == 0);
      CHECK(std::abs(y[k] - exact[k]) <=
            6e-8 * static_cast<double>(kScaledRowsGroup + 2) * magnitude[k] + 1e-12);
    }
  }
}

// mix_planes (a dust segment's reduced terms) sums each output element in double over the float
// planes in order from the first product, each product and sum rounded on its own (and
// mix_planes_rounded rounds that sum to float once): bitwise that, written out here one element at
// a time, whether the element is in a whole eight or left over, for 1 to 9 outputs (more than one
// register group of four) and 1 to 12 planes.
TEST_CASE("mix_planes: bitwise the ordered sum over the planes, any shape", "[spectra][binned]") {
  std::mt19937_64 rng(53);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  for (const auto& [n, n_planes, n_out] : std::vector<std::array<std::size_t, 3>>{
           {1, 1, 1}, {8, 7, 3}, {13, 12, 9}, {64, 7, 4}, {350, 7, 3}, {5, 2, 5}, {17, 10, 1}}) {
    INFO(n << " elements, " << n_planes << " planes, " << n_out << " outputs");
    std::vector<float> planes(n * n_planes);
    std::vector<double> weights(n_out * n_planes), out(n * n_out, -7.0);
    for (float& v : planes) v = static_cast<float>(1e3 * value(rng));
    for (double& v : weights) v = value(rng);
    mix_planes(out.data(), n, planes.data(), n_planes, weights.data(), n_out);
    // The rounded variant, its outputs a stride apart (3 elements of room between them, which
    // it must leave as they are).
    const std::size_t stride = n + 3;
    std::vector<float> rounded(n_out * stride, -7.0f);
    mix_planes_rounded(rounded.data(), stride, n, planes.data(), n_planes, weights.data(), n_out);
    for (std::size_t q = 0; q < n_out; ++q) {
      for (std::size_t g = 0; g < n; ++g) {
        double expected = weights[q * n_planes] * static_cast<double>(planes[g]);
        for (std::size_t t = 1; t < n_planes; ++t)
          expected += weights[q * n_planes + t] * static_cast<double>(planes[t * n + g]);
        REQUIRE(std::memcmp(&out[q * n + g], &expected, sizeof(double)) == 0);
        const auto expected_float = static_cast<float>(expected);
        REQUIRE(std::memcmp(&rounded[q * stride + g], &expected_float, sizeof(float)) == 0);
      }
      for (std::size_t g = n; g < stride; ++g) REQUIRE(rounded[q * stride + g] == -7.0f);
    }
  }
}

// multiply_by_transpose (the transpose's dL/dH = G B^T) sums each element in eight lanes (q mod
// 8), adds the lanes in one tree, then the last depth mod 8 products in order: bitwise that,
// written out here one element at a time, for any shape (leftover rows, columns and depths),
// strides and row list of b, and within double rounding of the long-double product.
TEST_CASE(
    "multiply_by_transpose and dots_with_row: bitwise the eight-lane sum, any shape, strides and "
    "rows",
    "[spectra][binned]") {
  std::mt19937_64 rng(43);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  for (const auto& [rows, depth, columns] : std::vector<std::array<std::size_t, 3>>{{1, 1, 1},
                                                                                    {4, 8, 4},
                                                                                    {5, 13, 7},
                                                                                    {32, 750, 41},
                                                                                    {3, 7, 2},
                                                                                    {9, 1031, 130},
                                                                                    {1, 750, 9}}) {
    INFO(rows << " x " << depth << " x " << columns);
    const std::size_t a_stride = depth + 3, b_stride = depth + 5, b_count = columns + 11;
    std::vector<double> a(rows * a_stride), b(b_count * b_stride);
    for (double& x : a) x = value(rng);
    for (double& x : b) x = value(rng);
    std::vector<std::int32_t> b_rows(columns);
    for (std::size_t j = 0; j < columns; ++j)
      b_rows[j] = static_cast<std::int32_t>((7 * j + 3) % b_count);
    for (const bool listed : {true, false}) {
      std::vector<double> c(rows * columns, std::nan(""));
      multiply_by_transpose(a.data(), a_stride, rows, depth, b.data(), b_stride,
                            listed ? b_rows.data() : nullptr, columns, c.data());
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t j = 0; j < columns; ++j) {
          const double* ar = a.data() + r * a_stride;
          const double* bj = b.data() + (listed ? b_rows[j] : j) * b_stride;
          double lane[8] = {};
          long double exact = 0;
          const std::size_t whole = depth / 8 * 8;
          for (std::size_t q = 0; q < whole; ++q) lane[q % 8] += ar[q] * bj[q];
          double want = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                        ((lane[4] + lane[5]) + (lane[6] + lane[7]));
          for (std::size_t q = whole; q < depth; ++q) want += ar[q] * bj[q];
          for (std::size_t q = 0; q < depth; ++q) exact += static_cast<long double>(ar[q]) * bj[q];
          const double got = c[r * columns + j];
          REQUIRE(std::isfinite(got));
          REQUIRE(std::memcmp(&got, &want, sizeof got) == 0);
          CHECK(std::abs(static_cast<long double>(got) - exact) <= 1e-14L * depth);
        }
      // dots_with_row: a column of c, its rows of a against one row of b, the same bits.
      std::vector<const double*> a_rows(rows);
      for (std::size_t r = 0; r < rows; ++r) a_rows[r] = a.data() + r * a_stride;
      std::vector<double> dots(rows, std::nan(""));
      for (std::size_t j = 0; j < columns; ++j) {
        dots_with_row(a_rows.data(), rows, b.data() + (listed ? b_rows[j] : j) * b_stride, depth,
                      dots.data());
        for (std::size_t r = 0; r < rows; ++r)
          REQUIRE(std::memcmp(&dots[r], &c[r * columns + j], sizeof(double)) == 0);
      }
    }
  }
}

// The product's dense blocks run on several threads at once, each its own GEMM (Eigen's): a
// product library that is not safe to call from two threads at once (the serial OpenBLAS tried
// for issue 22) changed whole (block, chunk) pieces of the cube in one run of five. Repeated on
// 1, 2 and 4 threads, several times, with many dense blocks and chunks: bitwise the same.
TEST_CASE("binned product: dense blocks on several threads at once give the same bits every time",
          "[spectra][binned]") {
  const SspTables tables = make_ssp_tables(test::synthetic_ssp_grid());
  BinnedProductInput in = product_input(tables, 160);  // five dense row blocks of 32
  const std::size_t n_columns = in.tile.columns();
  in.basis_memory_bytes = 24 * n_columns * sizeof(float);  // chunks of 24 bins: 13 of them
  const HostHistogram h = random_histogram(
      in, 777, [](std::size_t, std::size_t, auto& uniform) { return uniform() < 0.7; });
  const std::size_t n_voxels = static_cast<std::size_t>(in.tile.n_spaxels) * in.bins.n;
  const int threads_before = omp_get_max_threads();
  std::vector<float> first;
  for (const int threads : {1, 2, 4, 2, 4, 4, 2}) {
    INFO(threads << " threads");
    omp_set_num_threads(threads);
    std::vector<float> cube(n_voxels, 0.0f);
    std::vector<double> moments(3 * static_cast<std::size_t>(in.tile.n_spaxels), 0.0);
    const BinnedProductStats stats = binned_product(in, h, cube.data(), moments.data());
    CHECK(stats.dense_blocks == 5);
    if (first.empty()) {
      double peak = 0.0;
      for (const float v : cube) {
        REQUIRE(std::isfinite(v));
        peak = std::max(peak, std::abs(static_cast<double>(v)));
      }
      REQUIRE(peak > 0.0);
      first = std::move(cube);
      continue;
    }
    CHECK(std::memcmp(cube.data(), first.data(), n_voxels * sizeof(float)) == 0);
  }
  omp_set_num_threads(threads_before);
}

// Dust segments (dust_expansion.h, DustSegment): each segment of 64 bins sums its fewer reduced
// terms. The cube stays within the truncation's tolerance (5e-7 of a star's least attenuated
// light, here below 1e-6 of the peak voxel with float's rounding) of the product over the whole
// expansion, and the transpose, which makes B's rows with each term's projected factor, is the
// reduced product's adjoint: sum_e H_e dL/dH_e = sum G . cube to float's rounding of the cube.
TEST_CASE("binned product with dust segments: the expansion's cube, and the transpose its adjoint",
          "[spectra][binned][vjp]") {
  for (const bool log_grid : {false, true}) {
    INFO((log_grid ? "logarithmic" : "linear") << " grid");
    test::ProductCase c(log_grid, true);
    // A star's dust terms are m phi_r(A_V), and the segments hold sums of such (the truncation is
    // judged on them, not on any vector of terms): each group the case's H meets gets one or two
    // stars' worth, A_V in [0, 5] mag.
    {
      const auto rank = static_cast<std::uint64_t>(c.dust.rank);
      const std::uint64_t n_columns = c.in.tile.columns();
      const DustExpansionView view = c.dust.view(c.dust.phi.data());
      std::mt19937_64 random(7);
      std::uniform_real_distribution<double> av(0.0, 5.0), mass(0.5e4, 1.5e4);
      HostHistogram physical;
      for (const std::uint64_t i : c.histogram.index) {
        const std::uint64_t first = i / n_columns * n_columns + i % n_columns / rank * rank;
        if (!physical.index.empty() && physical.index.back() >= first) continue;
        std::vector<double> h(rank, 0.0);
        for (int star = 0; star < 1 + static_cast<int>(i % 2); ++star) {
          int row = 0;
          double upper = 0.0;
          view.locate(av(random), row, upper);
          const double m = mass(random);
          for (std::uint64_t r = 0; r < rank; ++r)
            h[r] += m * view.weight(row, upper, static_cast<int>(r));
        }
        for (std::uint64_t r = 0; r < rank; ++r) {
          physical.index.push_back(first + r);
          physical.mass_msun.push_back(h[r]);
        }
      }
      c.histogram = std::move(physical);
    }
    const test::ProductResult reduced = test::run_product(c, binned_product);
    const DustSegments* segments = c.in.dust_segments;
    c.in.dust_segments = nullptr;
    const test::ProductResult whole = test::run_product(c, binned_product);
    c.in.dust_segments = segments;
    double peak = 0.0, worst = 0.0;
    std::size_t differ = 0;
    for (std::size_t i = 0; i < whole.cube.size(); ++i) {
      REQUIRE(std::isfinite(reduced.cube[i]));
      peak = std::max(peak, std::abs(static_cast<double>(whole.cube[i])));
      worst = std::max(worst, std::abs(static_cast<double>(reduced.cube[i]) - whole.cube[i]));
      differ += reduced.cube[i] != whole.cube[i];
    }
    REQUIRE(peak > 0.0);
    INFO("largest difference " << worst / peak << " of the peak voxel, " << differ << " voxels");
    CHECK(differ > 0);  // the reduced terms were summed, not the whole expansion's
    CHECK(worst <= 1e-6 * peak);
    for (std::size_t i = 0; i < whole.moments.size(); ++i)
      CHECK(std::abs(reduced.moments[i] - whole.moments[i]) <=
            1e-6 * std::abs(whole.moments[i]) + 1e-12);

    const test::TransposeCase t(c, false);
    const std::vector<double> dl_dh =
        t.run(c, [](auto&&... args) { binned_product_transpose(args...); });
    const std::size_t n_columns = c.in.tile.columns();
    double adjoint = 0.0, forward = 0.0, scale = 0.0;
    for (std::size_t e = 0; e < c.histogram.index.size(); ++e) {
      const std::size_t i = c.histogram.index[e];
      REQUIRE(i / n_columns < static_cast<std::size_t>(c.in.tile.n_spaxels));
      adjoint += c.histogram.mass_msun[e] * (dl_dh[i] - t.dl_dh[i]);
    }
    for (std::size_t i = 0; i < reduced.cube.size(); ++i) {
      forward += t.cotangent[i] * reduced.cube[i];
      scale += std::abs(t.cotangent[i] * reduced.cube[i]);
    }
    INFO("sum H dL/dH " << adjoint << ", sum G cube " << forward << " (of " << scale << ")");
    CHECK(std::abs(adjoint - forward) <= 1e-6 * scale);
  }
}

// The product on a device (binned_product_on_device: H's rows and B's spans sent to the device,
// each voxel summed there by MultiplyBasisSpan, kernels.inl) run on a CPU device: the functor's
// one source through the CPU backend's dispatch (the CUDA suite runs it on a GPU,
// tests/test_cuda_product.cpp). Bitwise the host's cube rows and light moments, with dense and
// sparse blocks, a template end's S and P columns, with a dust expansion and without, on a
// linear and a logarithmic grid; B in several chunks (64 bins: the last one shorter), sent whole,
// two chunks a span, and one at a time.
TEST_CASE("binned product on a device: bitwise the host's, dense and sparse blocks, any span",
          "[spectra][binned]") {
  auto mesh = make_mesh(Backend::cpu, 1);
  test::check_device_product(mesh->device(0), true);
}

TEST_CASE("binned product's transpose on a device: bitwise the host's, any chunks and places",
          "[spectra][binned][vjp]") {
  auto mesh = make_mesh(Backend::cpu, 1);
  test::check_device_transpose(mesh->device(0));
}

TEST_CASE("binned spectra: a histogram held in tiles of spaxels gives the same cube",
          "[spectra][binned]") {
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const auto host = test::random_stars(3000, 21, 5.0);
  const SpectraRun whole = run_spectra(1, host, grid, method_params(SpectralMethod::binned));
  StellarSpectraParams tiled = method_params(SpectralMethod::binned);
  // One spaxel's histogram row is 20 nodes x ~230 velocity nodes x 8 B = ~37 kB: 1e-4 GB holds
  // two or three, so the 64-spaxel field is done in the smallest tiles, 32 spaxels (two tiles).
  tiled.histogram_memory_gb = 1e-4;
  const SpectraRun tiles = run_spectra(3, host, grid, tiled);
  CHECK(std::memcmp(tiles.cube.data.data(), whole.cube.data.data(),
                    whole.cube.data.size() * sizeof(whole.cube.data[0])) == 0);
  CHECK(tiles.maps.at("velocity_light_kms") == whole.maps.at("velocity_light_kms"));
}

TEST_CASE("binned spectra: bad parameters and the dust screen are clear errors",
          "[spectra][binned]") {
  auto parse = [](const nlohmann::json& j) {
    return StellarSpectraParams::from_json(JsonParams(j, "stages.stellar_spectra"));
  };
  CHECK_THROWS_WITH(parse({{"method", "fft"}}),
                    Catch::Contains("stages.stellar_spectra.method: expected one of"));
  CHECK_THROWS_WITH(parse({{"velocity_bin_kms", 0}}),
                    Catch::Contains("stages.stellar_spectra.velocity_bin_kms"));
  CHECK_THROWS_WITH(parse({{"histogram_memory_gb", -1}}),
                    Catch::Contains("stages.stellar_spectra.histogram_memory_gb"));
  CHECK_THROWS_WITH(parse({{"kinematics_band_angstrom", {6000, 5000}}}),
                    Catch::Contains("stages.stellar_spectra.kinematics_band_angstrom"));
  CHECK_THROWS_WITH(parse({{"histogram", "compressed"}}),
                    Catch::Contains("stages.stellar_spectra.histogram: expected one of"));
  CHECK(parse(nlohmann::json::object()).method == SpectralMethod::binned);
}

TEST_CASE("binned spectra: sparse and dense histograms give the same cube, bitwise",
          "[spectra][binned]") {
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const auto host = test::random_stars(3000, 23, 5.0);
  StellarSpectraParams dense = method_params(SpectralMethod::binned);
  dense.histogram = HistogramStorage::dense;
  StellarSpectraParams sparse = dense;
  sparse.histogram = HistogramStorage::sparse;
  const SpectraRun reference = run_spectra(1, host, grid, dense);
  for (int d : {1, 2, 3, 5}) {
    const SpectraRun run = run_spectra(d, host, grid, sparse);
    CHECK(std::memcmp(run.cube.data.data(), reference.cube.data.data(),
                      reference.cube.data.size() * sizeof(reference.cube.data[0])) == 0);
    CHECK(run.maps.at("velocity_light_kms") == reference.maps.at("velocity_light_kms"));
  }
}

namespace {

// MaNGA-like logarithmic bins (dlog10 lambda = 1e-4, Law et al. 2016) over 4700-6950 A.
WaveBins log_bins() {
  WaveBins bins{4700.0, 0.0, 1700};
  bins.log10_step = 1e-4;
  return bins;
}

}  // namespace

TEST_CASE("stellar spectra on a logarithmic grid: one star lands at its shifted wavelength",
          "[spectra][logcube]") {
  // One template pixel at 5000 A (2 A wide), a star at 250 km/s at z = 0.05: its light must sit
  // at 5000 (1 + z)(1 + v / c) = 5254.4 A, in bin floor(log10(5254.4 / 4700) / 1e-4 + 0.5) =
  // 484 (the bins there are 1.21 A wide; a linear 1.25 A grid from 4700 A puts it in bin 444),
  // with its energy conserved over the non-uniform bins: sum of value x width(k).
  auto grid = std::make_shared<SspGrid>(test::synthetic_ssp_grid());
  std::fill(grid->flux.begin(), grid->flux.end(), 0.0f);
  for (std::size_t node = 0; node < grid->n_age() * grid->n_metallicity(); ++node)
    grid->flux[node * grid->n_wave() + 1000] = 1e-4f;
  test::HostStars one = test::random_stars(1, 3);
  one.position_kpc = {-3.1f, 5.5f, 1.0f};  // spaxel (2, 6)
  one.velocity_kms = {10.0f, -20.0f, 250.0f};
  one.initial_mass_msun = {2.0e6f};
  const WaveBins bins = log_bins();
  const double centre = 5000.0 * (1 + kRedshift) * (1 + 250.0 / kSpeedOfLightKms);
  const double energy = 2.0e6 * static_cast<double>(1e-4f) * 2.0;
  const int k_centre = static_cast<int>(std::floor(std::log10(centre / 4700.0) / 1e-4 + 0.5));
  REQUIRE(k_centre == 484);
  for (SpectralMethod method : {SpectralMethod::exact, SpectralMethod::binned}) {
    CAPTURE(method == SpectralMethod::exact ? "exact" : "binned");
    const SpectraRun run = run_spectra(1, one, grid, method_params(method), bins);
    double total = 0, weighted_wavelength = 0;
    for (int iy = 0; iy < 8; ++iy)
      for (int ix = 0; ix < 8; ++ix)
        for (int k = 0; k < bins.n; ++k) {
          const double v = run.cube.at(ix, iy, k);
          REQUIRE(std::isfinite(v));
          if (ix != 2 || iy != 6) REQUIRE(v == 0.0);
          total += v * bins.width(k);
          weighted_wavelength += v * bins.width(k) * bins.centre(k);
          // The bins' edges are the geometric midpoints of their centres.
          if (ix == 0 && iy == 0)
            REQUIRE(bins.edge(k + 1) ==
                    Approx(std::sqrt(bins.centre(k) * bins.centre(k + 1))).epsilon(1e-13));
        }
    // The binned method's basis is float (relative 6e-8): its total holds to 2e-7; the cube's
    // float32 voxels add their rounding (tests/cube_tolerance.h).
    const double light_tolerance =
        method == SpectralMethod::exact ? test::kCubeValue : 2e-7 + test::kCubeValue;
    CHECK(total == Approx(energy).epsilon(light_tolerance));
    CHECK(std::abs(weighted_wavelength / total - centre) < 0.05 * bins.width(k_centre));
    // Light only in the bins around the shifted pixel, most of it in the centre's.
    double near = 0;
    for (int k = 0; k < bins.n; ++k) {
      if (std::abs(k - k_centre) > 2)
        CHECK(run.cube.at(2, 6, k) == 0.0);
      else
        near += run.cube.at(2, 6, k) * bins.width(k);
    }
    CHECK(near == Approx(energy).epsilon(light_tolerance));
    CHECK(run.cube.at(2, 6, k_centre) > 0.0);
  }
}

TEST_CASE(
    "stellar spectra on a logarithmic grid: the light of a galaxy is that of a fine "
    "linear grid, and the exact kernel matches the reference",
    "[spectra][logcube]") {
  // The same stars on MaNGA-like logarithmic bins and on a linear grid of 0.1 A over exactly
  // the same band (its edges at the logarithmic grid's first and last): the light integrated
  // over wavelength, per spaxel, must agree (both conserve energy over their bins; a width
  // taken as the centre's spacing, or arithmetic instead of geometric edges, would not: the
  // log grid's widths grow by 48% over the band).
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const test::HostStars host = test::random_stars(300, 5, 4.0);
  const WaveBins bins = log_bins();
  const double lo = bins.edge(0), hi = bins.edge(bins.n);
  const int n_fine = 22500;
  const double fine_step = (hi - lo) / n_fine;
  const WaveBins fine{lo + 0.5 * fine_step, fine_step, n_fine};
  for (const std::string medium : {"vacuum", "air"}) {
    CAPTURE(medium);
    const auto params = method_params(SpectralMethod::exact);
    const SpectraRun log_run = run_spectra(1, host, grid, params, bins, 8, 2.0, kRedshift, medium);
    const SpectraRun lin_run = run_spectra(1, host, grid, params, fine, 8, 2.0, kRedshift, medium);
    double all = 0;
    for (int iy = 0; iy < 8; ++iy)
      for (int ix = 0; ix < 8; ++ix) {
        double log_light = 0, lin_light = 0;
        for (int k = 0; k < bins.n; ++k) log_light += log_run.cube.at(ix, iy, k) * bins.width(k);
        for (int k = 0; k < fine.n; ++k) lin_light += lin_run.cube.at(ix, iy, k) * fine_step;
        REQUIRE(std::isfinite(log_light));
        CHECK(log_light ==
              Approx(lin_light).epsilon(test::kCubeValue).margin(1e-12 * (1 + lin_light)));
        all += log_light;
      }
    CHECK(all > 0.0);
    // Bin by bin against the double-precision reference (its own overlap arithmetic).
    const auto reference = reference_stellar_cube(
        *grid, OutsideGrid::clamp, medium, kRedshift, bins, 64, column(host.velocity_kms, 2),
        host.initial_mass_msun, host.age_gyr, host.metallicity, log_run.spaxel_index);
    double worst = 0, peak = 0;
    for (std::size_t i = 0; i < reference.size(); ++i) {
      worst = std::max(worst, std::abs(log_run.cube.data[i] - reference[i]));
      peak = std::max(peak, std::abs(reference[i]));
    }
    CHECK(peak > 0.0);
    CHECK(worst <= 1e-6 * peak);
  }
}

TEST_CASE("binned spectra on a logarithmic grid agree with the exact method",
          "[spectra][binned][logcube]") {
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const test::HostStars host = test::random_stars(3000, 12, 4.0);
  const WaveBins bins = log_bins();
  const SpectraRun exact = run_spectra(1, host, grid, method_params(SpectralMethod::exact), bins);
  const SpectraRun binned = run_spectra(1, host, grid, method_params(SpectralMethod::binned), bins);
  check_targets(binned, exact);  // the accuracy targets of the linear grids
}

// locate_after (a row's bin edges in order, stepping on from the last pixel) finds locate's pixel
// and fraction bitwise, on a grid that is not uniform (MILES' in vacuum, where it replaces a
// search) and on a uniform one, from below the first edge to beyond the last, with repeated and
// edge-exact wavelengths.
TEST_CASE("locate_after: locate's pixel and fraction, stepping on", "[spectra][binned]") {
  std::vector<double> uneven(301), even(301);
  for (std::size_t i = 0; i < uneven.size(); ++i) {
    const double x = static_cast<double>(i);
    uneven[i] = 3500.0 + 0.9 * x + 1e-4 * x * x;
    even[i] = 3500.0 + 0.9 * x;
  }
  for (const bool uniform : {false, true}) {
    const std::vector<double>& edges = uniform ? even : uneven;
    SspView ssp;
    ssp.n_wave = static_cast<int>(edges.size()) - 1;
    ssp.edges = edges.data();
    ssp.uniform = uniform;
    ssp.edge0 = edges.front();
    ssp.step = 0.9;
    std::vector<double> lambdas{3400.0, edges[0], edges[0]};
    for (double l = 3450.0; l < 3820.0; l += 0.37) lambdas.push_back(l);
    for (const std::size_t i : {5, 100, 299, 300}) lambdas.push_back(edges[i]);
    std::sort(lambdas.begin(), lambdas.end());
    lambdas.push_back(edges.back());
    lambdas.push_back(4000.0);
    int j = -1;
    double f = 0.0;
    std::size_t inside = 0;
    for (const double lambda : lambdas) {
      int expected_j = 0;
      double expected_f = 0.0;
      locate(ssp, lambda, expected_j, expected_f);
      locate_after(ssp, lambda, j, f);
      INFO((uniform ? "uniform" : "not uniform") << ", lambda " << lambda);
      REQUIRE(j == expected_j);
      REQUIRE(std::memcmp(&f, &expected_f, sizeof f) == 0);
      inside += j >= 0 && j < ssp.n_wave;
    }
    CHECK(inside > 700);  // most of them inside the grid
  }
}
