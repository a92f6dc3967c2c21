// Speed of the fused spectral stage (+ psum), printed as ratios, on MUSE bins and a real SSP
// library:
//   1. against the double-precision reference path (reference_stellar_cube) on the same stars,
//      one cpu device: the speedup, and how closely the cubes agree;
//   2. one host device against two (the OpenMP threads split between them): the speedup, and
//      whether the cubes are bitwise identical (they must be: fixed-point sums);
//   3. the cuda backend with 1 and 4 logical devices, where a GPU exists (else a SKIPPED line):
//      against the reference and the cpu cube, and 1 against 4 devices.
// Timings are medians of --reps runs after one warm-up run.
//
//   bench_spectral_speed [--ssp mastar|miles|PATH] [--stars 2000] [--device-stars 20000]
//                        [--gpu-stars 1000000] [--reps 3]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "bench/bench_common.h"
#include "data/runtime.h"
#include "pipeline/devices.h"
#include "stages/common/particle_fields.h"

using namespace ifusim;

namespace {

struct FusedRun {
  double seconds = 0.0;        // stage + psum, median
  double stage_seconds = 0.0;  // the stage alone (templates, bound, kernels), median
  Cube cube;
  std::vector<std::int32_t> spaxel_index;
};

int g_all_threads = 1;  // the OpenMP threads of the process, read at start

// The fused stage + psum on `host` over `n_devices` devices of `backend`: median times after a
// warm-up, and the cube of the last repetition. The stars are placed and assigned to spaxels
// once, untimed. threads > 0: the OpenMP threads the cpu mesh shares (else all).
FusedRun time_fused(Backend backend, int n_devices, const Telescope& telescope,
                    const bench::HostStars& host, Stage& spectra, int reps, int threads = 0) {
  // A one-device mesh binds the calling thread (its OpenMP thread count) to that device: set
  // the count the mesh shares, and give the thread the whole machine back at the end.
  omp_set_num_threads(threads > 0 ? threads : g_all_threads);
  const Mesh& mesh = bench::lasting_mesh(backend, n_devices, omp_get_max_threads());
  auto state = bench::prepared_state(mesh, telescope, host);
  FusedRun run;
  std::vector<double> stage_t, total_t;
  for (int rep = -1; rep < reps; ++rep) {  // rep -1: the warm-up
    const auto start = std::chrono::steady_clock::now();
    spectra.run(*state);
    const double stage = bench::seconds_since(start);
    reduce_partials(*state);
    run.cube = std::move(*state->cube);
    if (rep >= 0) stage_t.push_back(stage), total_t.push_back(bench::seconds_since(start));
  }
  run.seconds = bench::median(total_t);
  run.stage_seconds = bench::median(stage_t);
  run.spaxel_index = state->data.stars.derived.at(fields::stars_spaxel_index).to_host();
  omp_set_num_threads(g_all_threads);
  return run;
}

bool bitwise_equal(const Cube& a, const Cube& b) {
  return a.data.size() == b.data.size() &&
         std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(a.data[0])) == 0;
}

long long count_in_field(const std::vector<std::int32_t>& spaxel_index) {
  long long n = 0;
  for (std::int32_t s : spaxel_index) n += s >= 0;
  return n;
}

// Section 1 (and the reference half of 3): fused on `backend` against the reference.
bool against_reference(Backend backend, const Telescope& telescope, const SspGrid& grid,
                       Stage& spectra, const bench::HostStars& host, int reps) {
  const FusedRun fused = time_fused(backend, 1, telescope, host, spectra, reps);
  const WaveBins bins{telescope.wave_start_angstrom, telescope.wave_step_angstrom,
                      telescope.n_wave()};
  const std::size_t n_spaxels = fused.cube.shape.n_spaxels();
  const auto v_los = host.velocity_los_kms();
  std::vector<double> reference;
  const double ref_seconds = bench::median_seconds(1, reps, [&] {
    reference = reference_stellar_cube(
        grid, OutsideGrid::clamp, telescope.wavelength_medium, bench::kRedshift, bins, n_spaxels,
        v_los, host.initial_mass_msun, host.age_gyr, host.metallicity, fused.spaxel_index);
  });
  const bench::Agreement g = bench::compare(fused.cube.data, reference);
  std::printf("  stars %zu (%lld in the field), cube %d x %d x %d\n", host.size(),
              count_in_field(fused.spaxel_index), fused.cube.shape.nx, fused.cube.shape.ny,
              fused.cube.shape.n_wave);
  std::printf("  reference (double, one star at a time, 1 thread): %9.4f s\n", ref_seconds);
  std::printf(
      "  fused %s stage + psum, 1 device:                  %9.4f s (stage %.4f s, psum + to double "
      "%.4f s)\n",
      to_string(backend), fused.seconds, fused.stage_seconds, fused.seconds - fused.stage_seconds);
  std::printf("  speedup reference / fused:                         %9.2fx\n",
              ref_seconds / fused.seconds);
  if (backend == Backend::cpu && g_all_threads > 1) {
    // Per core: the same device on one OpenMP thread, as the reference runs.
    const FusedRun single = time_fused(backend, 1, telescope, host, spectra, reps, 1);
    std::printf("  fused cpu stage + psum, 1 device of 1 thread:      %9.4f s (stage %.4f s)\n",
                single.seconds, single.stage_seconds);
    std::printf("  speedup reference / fused, one thread each:        %9.2fx\n",
                ref_seconds / single.seconds);
    const bool same = bitwise_equal(single.cube, fused.cube);
    std::printf("  1-thread cube bitwise identical to the %d-thread one: %s\n", g_all_threads,
                same ? "yes" : "NO");
    if (!same) return false;
  }
  std::printf(
      "  max |fused - ref| / max|ref| = %.3g; max relative difference (voxels >= 1e-3 max) = "
      "%.3g\n",
      g.max_abs_over_peak, g.max_rel_bright);
  const bool ok = g.finite && g.max_abs_over_peak <= 1e-9 + 0x1p-24 && bench::total(reference) > 0;
  std::printf("  agreement: %s (expected <= 1e-9 of the peak, plus the float32 voxel's 6e-8)\n",
              ok ? "OK" : "FAILED");
  return ok;
}

// Sections 2 and 3: one device against `many`.
bool device_scaling(Backend backend, int many, const Telescope& telescope, Stage& spectra,
                    const bench::HostStars& host, int reps, const Cube* cpu_cube) {
  const FusedRun one = time_fused(backend, 1, telescope, host, spectra, reps);
  const FusedRun several = time_fused(backend, many, telescope, host, spectra, reps);
  const bool identical = bitwise_equal(one.cube, several.cube) && bench::total(one.cube.data) > 0;
  std::printf("  stars %zu (%lld in the field)\n", host.size(), count_in_field(one.spaxel_index));
  std::printf("  fused %s stage + psum, 1 device:  %9.4f s (stage %.4f s)\n", to_string(backend),
              one.seconds, one.stage_seconds);
  std::printf("  fused %s stage + psum, %d devices: %9.4f s (stage %.4f s)\n", to_string(backend),
              many, several.seconds, several.stage_seconds);
  std::printf("  speedup 1 / %d devices:            %9.2fx\n", many, one.seconds / several.seconds);
  std::printf("  cubes bitwise identical (1 vs %d devices): %s\n", many, identical ? "yes" : "NO");
  bool ok = identical;
  if (cpu_cube) {
    const bench::Agreement g = bench::compare(one.cube.data, cpu_cube->data);
    std::printf("  %s vs cpu cube: max |diff| / max = %.3g, bitwise identical: %s\n",
                to_string(backend), g.max_abs_over_peak,
                bitwise_equal(one.cube, *cpu_cube) ? "yes" : "no");
    ok = ok && g.finite && g.max_abs_over_peak <= 1e-9 + 0x1p-23;  // an ulp of a float32 voxel
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) try {
  g_all_threads = omp_get_max_threads();
  const std::string ssp = bench::option(argc, argv, "ssp", "mastar");
  const auto n_ref = std::stoul(bench::option(argc, argv, "stars", "2000"));
  const auto n_dev = std::stoul(bench::option(argc, argv, "device-stars", "20000"));
  const auto n_gpu = std::stoul(bench::option(argc, argv, "gpu-stars", "1000000"));
  const int reps = std::stoi(bench::option(argc, argv, "reps", "3"));
  if (reps < 1 || n_ref < 1 || n_dev < 1 || n_gpu < 1)
    throw std::invalid_argument("--reps and the star counts must be >= 1");

  const Telescope muse = load_telescope_preset("MUSE", "bench");
  auto grid = std::make_shared<const SspGrid>(load_ssp_library(bench::ssp_path(ssp)));
  const auto spectra = make_stellar_spectra_stage(grid, bench::exact_params());
  const double scale = bench::disc_scale_kpc(muse);
  std::printf(
      "bench_spectral_speed: MUSE (%d x %d spaxels, %d bins), z = %.2f, SSP %s (%zu x %zu x %zu)\n",
      muse.n_spaxels_side(), muse.n_spaxels_side(), muse.n_wave(), bench::kRedshift,
      bench::ssp_path(ssp).c_str(), grid->n_age(), grid->n_metallicity(), grid->n_wave());
  std::printf("median of %d runs after a warm-up; OpenMP threads: %d\n\n", reps, g_all_threads);
  bool ok = true;

  std::printf("[1] fused kernel vs double-precision reference (cpu)\n");
  const bench::HostStars few = bench::disc_stars(n_ref, 7, scale);
  ok = against_reference(Backend::cpu, muse, *grid, *spectra, few, reps) && ok;

  std::printf("\n[2] 1 vs 2 host devices (OpenMP threads split between them)\n");
  const bench::HostStars many = bench::disc_stars(n_dev, 11, scale);
  ok = device_scaling(Backend::cpu, 2, muse, *spectra, many, reps, nullptr) && ok;

  std::printf("\n[3] cuda backend, 1 vs 4 logical devices\n");
  if (runtime::cuda_device_count() > 0) {
    std::printf("  GPU 0: %s\n", runtime::cuda_device_name(0).c_str());
    ok = against_reference(Backend::cuda, muse, *grid, *spectra, few, reps) && ok;
    // The cpu cube of the same stars, to compare the backends.
    const FusedRun cpu = time_fused(Backend::cpu, 1, muse, many, *spectra, 1);
    ok = device_scaling(Backend::cuda, 4, muse, *spectra, many, reps, &cpu.cube) && ok;
    std::printf("  -- %lu stars:\n", n_gpu);
    const bench::HostStars lots = bench::disc_stars(n_gpu, 13, scale);
    ok = device_scaling(Backend::cuda, 4, muse, *spectra, lots, reps, nullptr) && ok;
  } else {
    std::printf("  SKIPPED: %s\n", runtime::cuda_built()
                                       ? runtime::cuda_unavailable_reason().c_str()
                                       : "this binary was built without the CUDA backend");
  }
  std::printf("\n%s\n", ok ? "all checks passed" : "SOME CHECKS FAILED");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_spectral_speed: %s\n", e.what());
  return 1;
}
