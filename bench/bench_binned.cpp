// The binned spectral method against the exact one, printed as ratios:
//   1. accuracy on the same stars (a 1e5-star disc by default), for MUSE and MaNGA bins and the
//      MaStar and MILES libraries, against the targets (total light 1e-6; max |diff| 2e-3 of the
//      peak voxel; median 1e-3 and 99th percentile 1e-2 relative on voxels >= 1% of the peak;
//      light-weighted velocity 2 km/s);
//   2. speed of the stellar stage + psum (which makes the cube) at --speed-stars (1e6), MUSE,
//      MaStar: exact / binned (target >= 50x), one cpu device;
//   3. binned on 1 vs 2 host devices: speedup and bitwise identity;
//   4. the cuda backend where a GPU exists (else a SKIPPED line): binned and exact against the
//      cpu cube.
//
//   bench_binned [--stars 100000] [--speed-stars 1000000] [--reps 1]
#include <omp.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "bench/bench_common.h"
#include "bench/cube_agreement.h"
#include "data/runtime.h"
#include "pipeline/devices.h"
#include "stages/stage.h"

using namespace ifusim;

namespace {

struct Run {
  double stage_seconds = 0.0;  // the stellar stage
  double psum_seconds = 0.0;   // psum: for binned, the reduction and the product
  Cube cube;
  std::vector<double> velocity_light_kms;
};

Run run(Backend backend, int n_devices, const Telescope& telescope, const bench::HostStars& host,
        Stage& spectra) {
  const auto mesh = make_mesh(backend, n_devices);
  auto state = bench::prepared_state(*mesh, telescope, host);
  Run out;
  auto t0 = std::chrono::steady_clock::now();
  spectra.run(*state);
  out.stage_seconds = bench::seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  reduce_partials(*state);
  out.psum_seconds = bench::seconds_since(t0);
  out.cube = std::move(*state->cube);
  out.cube.axes = state->observation.axes;
  out.velocity_light_kms = state->maps.at("velocity_light_kms").values;
  return out;
}

std::unique_ptr<Stage> stage(std::shared_ptr<const SspGrid> grid, SpectralMethod method) {
  StellarSpectraParams p;
  p.method = method;
  return make_stellar_spectra_stage(std::move(grid), p);
}

bool accuracy(const std::string& telescope_name, const std::string& ssp, std::size_t n) {
  const Telescope telescope = load_telescope_preset(telescope_name, "bench");
  auto grid = std::make_shared<const SspGrid>(load_ssp_library(bench::ssp_path(ssp)));
  const bench::HostStars stars = bench::disc_stars(n, 3, bench::disc_scale_kpc(telescope));
  const Run exact = run(Backend::cpu, 1, telescope, stars, *stage(grid, SpectralMethod::exact));
  const Run binned = run(Backend::cpu, 1, telescope, stars, *stage(grid, SpectralMethod::binned));
  const CubeAgreement a = cube_agreement(binned.cube.data, exact.cube.data,
                                         binned.velocity_light_kms, exact.velocity_light_kms);
  std::printf(
      "  %-9s %-7s total %.2e  max/peak %.2e  median %.2e  p99 %.2e  |dv| %.3f km/s   "
      "(worst at %.1f A)  exact %7.2f s  binned %6.3f s (%.0fx)  %s\n",
      telescope_name.c_str(), ssp.c_str(), a.total_relative, a.max_over_peak, a.median_relative,
      a.p99_relative, a.max_velocity_kms,
      exact.cube.axes.wavelength_angstrom(
          static_cast<int>(a.worst_voxel % exact.cube.shape.n_wave)),
      exact.stage_seconds + exact.psum_seconds, binned.stage_seconds + binned.psum_seconds,
      (exact.stage_seconds + exact.psum_seconds) / (binned.stage_seconds + binned.psum_seconds),
      a.meets_targets() ? "OK" : "MISSES TARGETS");
  return a.meets_targets();
}

bool bitwise_equal(const Cube& a, const Cube& b) {
  return a.data.size() == b.data.size() &&
         std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(double)) == 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const auto n_accuracy = std::stoul(bench::option(argc, argv, "stars", "100000"));
  const auto n_speed = std::stoul(bench::option(argc, argv, "speed-stars", "1000000"));
  const std::string only = bench::option(argc, argv, "only", "");  // "accuracy": section 1 alone
  if (n_accuracy < 1 || n_speed < 1) throw std::invalid_argument("star counts must be >= 1");
  std::printf("bench_binned: z = %.2f, OpenMP threads: %d\n\n", bench::kRedshift,
              omp_get_max_threads());
  bool ok = true;

  std::printf(
      "[1] binned vs exact, %lu disc stars (targets: total 1e-6, max/peak 2e-3, median "
      "1e-3, p99 1e-2, |dv| 2 km/s)\n",
      n_accuracy);
  for (const char* telescope : {"MUSE", "MaNGA-32"})
    for (const char* ssp : {"mastar", "miles"}) ok = accuracy(telescope, ssp, n_accuracy) && ok;

  if (only == "accuracy") return ok ? 0 : 1;
  std::printf("\n[2] speed at %lu stars, MUSE, MaStar, 1 cpu device (stage + psum)\n", n_speed);
  const Telescope muse = load_telescope_preset("MUSE", "bench");
  auto mastar = std::make_shared<const SspGrid>(load_ssp_library(bench::ssp_path("mastar")));
  const bench::HostStars lots = bench::disc_stars(n_speed, 5, bench::disc_scale_kpc(muse));
  const auto binned_stage = stage(mastar, SpectralMethod::binned);
  const Run binned = run(Backend::cpu, 1, muse, lots, *binned_stage);
  const Run exact = run(Backend::cpu, 1, muse, lots, *stage(mastar, SpectralMethod::exact));
  const double t_binned = binned.stage_seconds + binned.psum_seconds;
  const double t_exact = exact.stage_seconds + exact.psum_seconds;
  std::printf("  exact:  stage %8.3f s + psum %6.3f s = %8.3f s\n", exact.stage_seconds,
              exact.psum_seconds, t_exact);
  std::printf("  binned: stage %8.3f s + psum and product %6.3f s = %8.3f s\n",
              binned.stage_seconds, binned.psum_seconds, t_binned);
  std::printf("  speedup exact / binned: %.1fx (target >= 50x): %s\n", t_exact / t_binned,
              t_exact / t_binned >= 50 ? "OK" : "BELOW TARGET");
  ok = ok && t_exact / t_binned >= 50;

  std::printf("\n[3] binned, 1 vs 2 host devices, %lu stars\n", n_speed);
  const Run two = run(Backend::cpu, 2, muse, lots, *binned_stage);
  std::printf("  1 device %.3f s, 2 devices %.3f s: %.2fx; bitwise identical: %s\n", t_binned,
              two.stage_seconds + two.psum_seconds,
              t_binned / (two.stage_seconds + two.psum_seconds),
              bitwise_equal(two.cube, binned.cube) ? "yes" : "NO");
  ok = ok && bitwise_equal(two.cube, binned.cube);

  std::printf("\n[4] cuda backend\n");
  if (runtime::cuda_device_count() > 0) {
    std::printf("  GPU 0: %s\n", runtime::cuda_device_name(0).c_str());
    for (SpectralMethod method : {SpectralMethod::binned, SpectralMethod::exact}) {
      const Run gpu = run(Backend::cuda, 1, muse, lots, *stage(mastar, method));
      const Cube& cpu = method == SpectralMethod::binned ? binned.cube : exact.cube;
      const CubeAgreement a =
          cube_agreement(gpu.cube.data, cpu.data, gpu.velocity_light_kms, gpu.velocity_light_kms);
      std::printf("  %s: stage %.4f s + psum %.4f s; vs cpu: max/peak %.2e, bitwise %s\n",
                  method == SpectralMethod::binned ? "binned" : "exact", gpu.stage_seconds,
                  gpu.psum_seconds, a.max_over_peak, bitwise_equal(gpu.cube, cpu) ? "yes" : "no");
      ok = ok && a.finite && a.max_over_peak <= 1e-9;
    }
  } else {
    std::printf("  SKIPPED: %s\n", runtime::cuda_built()
                                       ? runtime::cuda_unavailable_reason().c_str()
                                       : "this binary was built without the CUDA backend");
  }
  std::printf("\n%s\n", ok ? "all checks passed" : "SOME CHECKS FAILED");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_binned: %s\n", e.what());
  return 1;
}
