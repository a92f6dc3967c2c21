// The passes over a whole reduced cube that follow the stages (issue 22): the PSF and the LSF, the
// noise stage and the writing of cube.fits, cube.h5 and the quick-looks' sums, each against the
// memory-bandwidth floor of the bytes it must move. The floor is measured here, on the cube's own
// arrays: a memcpy of the data array (read + write), best of --repeats, on one thread and on all of
// them. A pass's floor is its bytes over that bandwidth (the copy's read + write bytes per second):
//   psf: two in-place passes (x, then y), each reading and writing the data (4 arrays);
//   lsf: one in-place pass (2 arrays);
//   noise: read the data, write the data and the variance (3 arrays);
//   cube.fits / cube.h5: read data and variance, write the file's 2 arrays (4 arrays);
//   white-light image, integrated spectrum: read the data (1 array).
// The cube: MUSE-WFM's 300 x 300 spaxels x 3721 bins by default (--nx, --ny, --nwave), an
// exponential disc times a sloped continuum, NaN outside a circle (aperture_mask's), in float.
// Usage: bench_cube_passes [--nx 300] [--ny 300] [--nwave 3721] [--dir /dev/shm] [--repeats 3]
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "data/host_memory.h"
#include "io/cube/cube_io.h"
#include "io/cube/plane_blocks.h"
#include "io/cube/quicklook.h"
#include "stages/common/convolution.h"
#include "stages/noise/noise.h"
#include "stages/psf/psf.h"

namespace {

using ifusim::Cube;

// The process's CPU seconds (user + system, all threads): on the shared 2-core VM the wall time
// of a pass grows with the other processes' load, its CPU time much less.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double last_cpu = 0.0;  // the CPU seconds of the run best_of returned

// The best wall time of `repeats` runs of f, each after `setup` (untimed).
double best_of(int repeats, const std::function<void()>& setup, const std::function<void()>& f) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    setup();
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (wall < best) last_cpu = cpu_seconds() - c0;
    best = std::min(best, wall);
  }
  return best;
}

Cube disc_cube(int nx, int ny, int n_wave) {
  Cube cube;
  cube.shape = {nx, ny, n_wave};
  cube.axes.spaxel_arcsec = 0.2;
  cube.axes.wave_start_angstrom = 4750.0;
  cube.axes.wave_step_angstrom = 1.25;
  cube.axes.ra_deg = 150.1;
  cube.axes.dec_deg = 2.2;
  cube.unit = "10**(-20)*erg/(s*cm**2*Angstrom)";
  cube.data = ifusim::large_vector<float>(cube.shape.n_voxels());
  const double radius = 0.5 * std::min(nx, ny);
#pragma omp parallel for schedule(static)
  for (long long s = 0; s < static_cast<long long>(cube.shape.n_spaxels()); ++s) {
    const double x = static_cast<double>(s % nx) - 0.5 * nx,
                 y = static_cast<double>(s / nx) - 0.5 * ny;
    const double r = std::hypot(x, y);
    for (int k = 0; k < n_wave; ++k)
      cube.data[static_cast<std::size_t>(s) * n_wave + k] =
          r > radius ? std::nanf("")
                     : static_cast<float>(500.0 * std::exp(-r / (0.15 * radius)) *
                                          (1.0 + 0.3 * k / n_wave));
  }
  return cube;
}

void line(const char* what, double seconds, double bytes, double bandwidth) {
  const double floor = bytes / bandwidth;
  std::printf("  %-34s %8.3f s (cpu %6.3f s)   floor %6.3f s   %6.1fx the floor\n", what, seconds,
              last_cpu, floor, seconds / floor);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ifusim;
  const int nx = std::stoi(bench::option(argc, argv, "nx", "300"));
  const int ny = std::stoi(bench::option(argc, argv, "ny", "300"));
  const int n_wave = std::stoi(bench::option(argc, argv, "nwave", "3721"));
  const std::string dir = bench::option(argc, argv, "dir", "/dev/shm");
  const int repeats = std::stoi(bench::option(argc, argv, "repeats", "3"));
  const int threads = omp_get_max_threads();
  const std::size_t block_elements = std::stoul(bench::option(argc, argv, "block", "262144"));

  Cube clean = disc_cube(nx, ny, n_wave);
  const std::size_t n = clean.data.size();
  const double array_bytes = static_cast<double>(n) * sizeof(float);
  std::printf("cube %d x %d x %d (%.2f GB a float array), %d threads\n", nx, ny, n_wave,
              array_bytes / 1e9, threads);

  // The floor: memcpy of one array into another (both already touched), read + write bytes.
  std::vector<float> copy = large_vector<float>(n);
  auto memcpy_on = [&](int t) {
    omp_set_num_threads(t);
    const double s = best_of(
        repeats, [] {},
        [&] {
#pragma omp parallel
          {
            const std::size_t parts = static_cast<std::size_t>(omp_get_num_threads());
            const std::size_t me = static_cast<std::size_t>(omp_get_thread_num());
            const std::size_t lo = n * me / parts, hi = n * (me + 1) / parts;
            std::memcpy(copy.data() + lo, clean.data.data() + lo, (hi - lo) * sizeof(float));
          }
        });
    omp_set_num_threads(threads);
    return 2.0 * array_bytes / s;
  };
  const double bw1 = memcpy_on(1), bw = memcpy_on(threads);
  std::printf("floor: memcpy %.1f GB/s (read + write) on 1 thread, %.1f GB/s on %d\n", bw1 / 1e9,
              bw / 1e9, threads);
  copy = std::vector<float>();

  // The convolutions, on the cube with 0 for NaN (the stages run before aperture_mask's NaN):
  // MUSE-WFM's PSF (a Gaussian whose FWHM follows its preset's table, 0.87 to 0.75 arcsec, on
  // 0.2 arcsec spaxels) and an LSF of MUSE's width (sigma 0.3 to 0.55 pixels, a kernel per source
  // pixel), each timed on a fresh copy of the cube.
  std::printf("convolutions (in place):\n");
  Cube convolved;
  auto fresh_copy = [&] {
    if (convolved.data.size() != n) convolved.data = large_vector<float>(n);
    convolved.shape = clean.shape;
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < static_cast<long long>(n); ++i)
      convolved.data[i] = std::isnan(clean.data[i]) ? 0.0f : clean.data[i];
  };
  const PsfParams psf = PsfParams::from_json(JsonParams(
      nlohmann::json::parse(R"({"fwhm_arcsec": {"wavelength_angstrom": [4600, 5000, 5500, 6000,
          6500, 7000, 7500, 8000, 8500, 9000, 9400], "fwhm_arcsec": [0.8701, 0.8557, 0.8395,
          0.825, 0.8119, 0.8, 0.789, 0.7789, 0.7695, 0.7608, 0.7542]}})"),
      "psf"));
  std::vector<double> plane_wavelength(static_cast<std::size_t>(n_wave));
  for (int k = 0; k < n_wave; ++k) plane_wavelength[k] = clean.axes.wavelength_angstrom(k);
  const double psf_s = best_of(repeats, fresh_copy, [&] {
    apply_psf(psf, clean.axes.spaxel_arcsec, plane_wavelength, convolved);
  });
  line("psf (Gaussian, FWHM by wavelength)", psf_s, 4 * array_bytes, bw);
  std::vector<Kernel1D> lsf(static_cast<std::size_t>(n_wave));
  for (int k = 0; k < n_wave; ++k)
    lsf[k] = gaussian_pixel_kernel(0.3 + 0.25 * k / std::max(n_wave - 1, 1), 1e-6, n_wave - 1);
  const double lsf_s = best_of(repeats, fresh_copy, [&] {
    convolve_axis_in_place(convolved.data, clean.shape.n_spaxels(), n_wave, 1, lsf);
  });
  line("lsf (a Gaussian per source pixel)", lsf_s, 2 * array_bytes, bw);
  convolved = Cube();

  std::printf("noise (S/N 20 per Angstrom, seed 42):\n");
  Cube noisy;
  NoiseParams params;
  params.snr = 20.0;
  params.per_angstrom = true;
  const double reference = best_of(
      repeats, [] {}, [&] { noise_reference_level(clean, params.reference_threshold); });
  line("reference level (spaxel means)", reference, array_bytes, bw);
  const double alloc = best_of(
      repeats, [&] { noisy.variance = std::vector<float>(); },
      [&] { noisy.variance = large_vector<float>(n); });
  line("the variance's allocation", alloc, array_bytes, bw);
  const double noise = best_of(
      repeats,
      [&] {
        noisy.variance = std::vector<float>();
        // In huge pages, as the run's cube is (psum's large_vector): a copy-assigned vector
        // would sit in 4 kB pages, whose TLB misses the transpositions pay per spaxel.
        if (noisy.data.size() != n) noisy.data = large_vector<float>(n);
        std::copy(clean.data.begin(), clean.data.end(), noisy.data.begin());
        noisy.shape = clean.shape;
        noisy.unit = clean.unit;
        noisy.axes = clean.axes;
      },
      [&] { apply_noise(params, clean.axes.wave_step_angstrom, 42, noisy); });
  line("apply_noise (all of the stage)", noise, 3 * array_bytes, bw);

  std::printf("writing (into %s):\n", dir.c_str());
  // The writers' transposition (spaxel-major to plane-major blocks) alone, for both arrays.
  double sink = 0.0;
  const double transpose = best_of(
      repeats, [] {},
      [&] {
        for (const auto* values : {&noisy.data, &noisy.variance})
          detail::for_each_plane_block<float>(noisy.shape, *values, block_elements,
                                              [&](int, int, float* block) { sink += block[0]; });
      });
  line("transposition alone (FITS blocks)", transpose, 4 * array_bytes, bw);
  const std::string fits = dir + "/bench_cube_passes.fits", h5 = dir + "/bench_cube_passes.h5";
  const double fits_s = best_of(
      repeats, [&] { std::filesystem::remove(fits); }, [&] { write_cube_fits(noisy, fits); });
  std::filesystem::remove(fits);
  line("cube.fits (DATA + STAT)", fits_s, 4 * array_bytes, bw);
  const double h5_s = best_of(
      repeats, [&] { std::filesystem::remove(h5); }, [&] { write_cube_hdf5(noisy, h5); });
  std::filesystem::remove(h5);
  line("cube.h5 (data + variance)", h5_s, 4 * array_bytes, bw);
  const double white = best_of(
      repeats, [] {}, [&] { spaxel_means(noisy); });
  line("white-light image", white, array_bytes, bw);
  const double spectrum = best_of(
      repeats, [] {}, [&] { integrated_spectrum(noisy); });
  line("integrated spectrum", spectrum, array_bytes, bw);
  return sink == 0.12345 ? 1 : 0;  // the blocks' values used, so that nothing is left out
}
