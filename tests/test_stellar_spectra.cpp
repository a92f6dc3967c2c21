#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "helpers.h"
#include "pipeline/collectives/psum.h"
#include "pipeline/devices.h"
#include "pipeline/registry.h"
#include "ssp_fixture.h"
#include "stages/spaxel_grid/spaxel_grid.h"
#include "stages/stellar_spectra/stellar_spectra.h"

using namespace ifusim;

namespace {

const WaveBins kBins{4700.0, 1.25, 1800};  // 4699.375 .. 6949.375 A
constexpr double kRedshift = 0.05;

struct SpectraRun {
  Cube cube;
  Cube kinematics;
  std::vector<std::int32_t> spaxel_index;
};

SpectraRun run_spectra(int n_devices, const test::HostStars& host,
                       std::shared_ptr<const SspGrid> grid,
                       OutsideGrid outside = OutsideGrid::clamp) {
  auto mesh = make_mesh(Backend::cpu, n_devices);
  RunState state(*mesh);
  state.data.stars = test::put_stars(*mesh, host);
  state.observation.redshift = kRedshift;
  state.observation.axes.wave_start_angstrom = kBins.start_angstrom;
  state.observation.axes.wave_step_angstrom = kBins.step_angstrom;
  make_spaxel_grid_stage(nlohmann::json{{"n_spaxels", 8}, {"spaxel_size_kpc", 2.0}}, "p")
      ->run(state);
  state.spaxels.n_wave = kBins.n;
  StellarSpectraParams params;
  params.outside = outside;
  make_stellar_spectra_stage(grid, params)->run(state);
  SpectraRun out;
  out.spaxel_index = state.data.stars.spaxel_index.to_host();
  out.cube = reduce_to_cube(*mesh, *state.partial, "Lsun/Angstrom");
  out.kinematics = reduce_to_cube(*mesh, *state.kinematics, "");
  return out;
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
  const SpectraRun run = run_spectra(1, one, grid);

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
  CHECK(total == Approx(energy).epsilon(1e-9));  // light conserved
  // The centroid of bin centres, weighted by the light, sits within a small fraction of a bin of
  // the shifted line (it is exact only up to binning); a wrong Doppler factor moves it by
  // 4.4 A (v / c) or 250 A (z).
  CHECK(std::abs(weighted_wavelength / total - centre) < 0.05 * kBins.step_angstrom);
  // The shifted pixel spans 2 A * doppler = 2.1 A: it touches only the bins around the centre.
  const int k_centre =
      static_cast<int>(std::lround((centre - kBins.start_angstrom) / kBins.step_angstrom));
  for (int k = 0; k < kBins.n; ++k)
    if (std::abs(k - k_centre) > 2) CHECK(run.cube.at(2, 6, k) == 0.0);
  // The kinematic moments see the star's mass and velocity.
  CHECK(run.kinematics.at(2, 6, 1) / run.kinematics.at(2, 6, 0) == Approx(250.0).epsilon(1e-9));
}

TEST_CASE("stellar spectra: the fused kernel matches the double-precision reference", "[spectra]") {
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  for (unsigned seed : {1u, 2u}) {
    test::HostStars host = test::random_stars(400, seed, 4.0);
    // Some stars outside the grid's ages and metallicities, to exercise the policy.
    host.age_gyr[0] = 0.01f;
    host.metallicity[1] = 0.1f;
    for (OutsideGrid policy : {OutsideGrid::clamp, OutsideGrid::zero}) {
      const SpectraRun run = run_spectra(1, host, grid, policy);
      const auto reference = reference_stellar_cube(
          *grid, policy, "", kRedshift, kBins, 64, column(host.velocity_kms, 2),
          host.initial_mass_msun, host.age_gyr, host.metallicity, run.spaxel_index);
      double max_ref = 0;
      for (double v : reference) max_ref = std::max(max_ref, std::abs(v));
      REQUIRE(max_ref > 0);
      // Per voxel: 1e-9 of the brightest voxel (float32 inputs are shared; only summation order
      // and the fixed-point quantum differ).
      double worst = 0;
      for (std::size_t i = 0; i < reference.size(); ++i) {
        REQUIRE(std::isfinite(run.cube.data[i]));
        worst = std::max(worst, std::abs(run.cube.data[i] - reference[i]));
      }
      INFO("seed " << seed << ", worst |fused - reference| / max = " << worst / max_ref);
      CHECK(worst <= 1e-9 * max_ref);
    }
  }
}

TEST_CASE("stellar spectra: cube bitwise identical for 1, 3 and 5 devices", "[spectra]") {
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const auto host = test::random_stars(2001, 77, 5.0);
  const SpectraRun one = run_spectra(1, host, grid);
  for (int d : {3, 5}) {
    const SpectraRun many = run_spectra(d, host, grid);
    CHECK(std::memcmp(many.cube.data.data(), one.cube.data.data(),
                      one.cube.data.size() * sizeof(double)) == 0);
    CHECK(many.kinematics.data == one.kinematics.data);
  }
}

TEST_CASE("stellar spectra: parameters are validated", "[spectra]") {
  CHECK_THROWS_WITH(StellarSpectraParams::from_json(
                        JsonParams(nlohmann::json{{"outside_grid", "extrapolate"}}, "ssp")),
                    Catch::Contains("ssp.outside_grid: expected one of \"clamp\", \"zero\""));
}
