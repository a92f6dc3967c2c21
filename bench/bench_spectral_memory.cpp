// Peak memory of the spectral core against the number of stars, for MUSE (25 x 25 spaxels,
// 3721 bins) and a real SSP library: the aperture stage, the fused stellar-spectra stage and
// psum. Each size runs in its own child process (this program, re-executed with --child N), so
// that its peak RSS is its own. RUBIX materialises one float32 spectrum per particle
// (N x n_wave x 4 bytes); the fused kernel never does, so memory grows with N, not N x lambda.
//
//   bench_spectral_memory [--ssp mastar|miles|PATH] [--sizes 1e4,3e4,1e5,3e5,1e6]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "bench/bench_common.h"
#include "data/buffer.h"
#include "pipeline/devices.h"
#include "stages/common/particle_fields.h"

using namespace ifusim;

namespace {

struct Sample {
  long long n = 0;
  long long device_peak_bytes = 0;  // memory::peak_bytes(cpu): every DeviceBuffer of the run
  long long rss_delta_bytes = 0;    // process peak RSS over the RSS before the stars existed
  long long in_field = 0;           // stars the aperture kept
  double seconds = 0.0;
  int n_wave = 0;
};

// One size, in this (child) process: prints one "RESULT ..." line.
int run_child(long long n, const std::string& ssp) {
  const Telescope muse = load_telescope_preset("MUSE", "bench");
  auto grid = std::make_shared<const SspGrid>(load_ssp_library(bench::ssp_path(ssp)));
  const auto mesh = make_mesh(Backend::cpu, 1);

  const bool clean_peak = bench::reset_peak_rss();
  const long long rss_before = bench::proc_status_bytes("VmRSS");
  const long long hwm_before = bench::proc_status_bytes("VmHWM");
  memory::reset_peak(Backend::cpu);
  const std::size_t device_before = memory::bytes_in_use(Backend::cpu);
  const auto start = std::chrono::steady_clock::now();

  long long in_field = 0;
  double light = 0.0;
  {
    const bench::HostStars host =
        bench::disc_stars(static_cast<std::size_t>(n), 42, bench::disc_scale_kpc(muse));
    auto state = bench::prepared_state(*mesh, muse, host);
    for (std::int32_t s : state->data.stars.derived.at(fields::stars_spaxel_index).to_host())
      in_field += s >= 0;
    const auto spectra = make_stellar_spectra_stage(grid, bench::exact_params());
    const Cube cube = bench::spectra_cube(*spectra, *state);
    light = bench::total(cube.data);
  }
  const double seconds = bench::seconds_since(start);
  const long long device_peak =
      static_cast<long long>(memory::peak_bytes(Backend::cpu) - device_before);
  // Without a clean reset the peak may predate the stars (the library's loading): subtract the
  // larger of the two baselines, which can only understate the run's own growth.
  const long long rss_delta = bench::proc_status_bytes("VmHWM") -
                              (clean_peak ? rss_before : std::max(rss_before, hwm_before));
  if (!(light > 0.0) || in_field == 0) {
    std::fprintf(stderr, "bench_spectral_memory: N = %lld gave an empty cube\n", n);
    return 1;
  }
  std::printf("RESULT %lld %lld %lld %lld %.3f %d\n", n, device_peak, rss_delta, in_field, seconds,
              muse.n_wave());
  return 0;
}

Sample run_size(const std::string& self, long long n, const std::string& ssp) {
  const std::string command =
      "'" + self + "' --child " + std::to_string(n) + " --ssp '" + ssp + "'";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot start " + command);
  Sample s;
  char line[512];
  bool found = false;
  while (std::fgets(line, sizeof line, pipe))
    found =
        found || std::sscanf(line, "RESULT %lld %lld %lld %lld %lf %d", &s.n, &s.device_peak_bytes,
                             &s.rss_delta_bytes, &s.in_field, &s.seconds, &s.n_wave) == 6;
  if (pclose(pipe) != 0 || !found) throw std::runtime_error("child failed: " + command);
  return s;
}

// Least-squares slope and intercept of y against x.
std::pair<double, double> fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) mx += x[i] / x.size(), my += y[i] / x.size();
  double sxy = 0, sxx = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx);
  const double slope = sxy / sxx;
  return {slope, my - slope * mx};
}

std::vector<long long> parse_sizes(const std::string& list) {
  std::vector<long long> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    const double v = std::stod(item);
    if (!(v >= 1)) throw std::invalid_argument("--sizes: expected counts >= 1, got " + item);
    out.push_back(static_cast<long long>(v));
  }
  if (out.size() < 2) throw std::invalid_argument("--sizes: expected at least two counts");
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string ssp = bench::option(argc, argv, "ssp", "mastar");
  const std::string child = bench::option(argc, argv, "child", "");
  if (!child.empty()) return run_child(std::stoll(child), ssp);

  const auto sizes = parse_sizes(bench::option(argc, argv, "sizes", "1e4,3e4,1e5,3e5,1e6"));
  const std::string self = "/proc/" + std::to_string(getpid()) + "/exe";
  std::printf("bench_spectral_memory: MUSE (25 x 25 spaxels, 3721 bins), z = %.2f, SSP %s\n",
              bench::kRedshift, bench::ssp_path(ssp).c_str());
  std::printf(
      "one cpu device; aperture + fused stellar spectra + psum; each size in a fresh process\n\n");
  std::printf("%10s %9s %14s %10s %14s %10s %14s %12s %8s\n", "N", "in field", "device peak",
              "B/star", "RSS peak delta", "B/star", "RUBIX N*L*4", "RUBIX/RSS", "seconds");
  std::vector<double> xs, device_ys, rss_ys;
  int n_wave = 0;
  for (long long n : sizes) {
    const Sample s = run_size(self, n, ssp);
    n_wave = s.n_wave;
    const double rubix = static_cast<double>(n) * s.n_wave * 4.0;
    std::printf("%10lld %9lld %11.1f MB %10.1f %11.1f MB %10.1f %11.1f GB %12.1f %8.2f\n", n,
                s.in_field, s.device_peak_bytes / 1e6, double(s.device_peak_bytes) / n,
                s.rss_delta_bytes / 1e6, double(s.rss_delta_bytes) / n, rubix / 1e9,
                rubix / s.rss_delta_bytes, s.seconds);
    std::fflush(stdout);
    xs.push_back(double(n));
    device_ys.push_back(double(s.device_peak_bytes));
    rss_ys.push_back(double(s.rss_delta_bytes));
  }
  const auto [device_slope, device_intercept] = fit_line(xs, device_ys);
  const auto [rss_slope, rss_intercept] = fit_line(xs, rss_ys);
  std::printf("\nfitted slope, device memory: %.1f bytes/star (+ %.1f MB independent of N)\n",
              device_slope, device_intercept / 1e6);
  std::printf("fitted slope, peak RSS:      %.1f bytes/star (+ %.1f MB independent of N)\n",
              rss_slope, rss_intercept / 1e6);
  std::printf("RUBIX's per-particle spectra: n_wave x 4 = %d bytes/star, %.0fx the RSS slope;\n",
              n_wave * 4, n_wave * 4.0 / rss_slope);
  std::printf("  at N = %lld that is N x lambda x 4 = %.1f GB against %.1f MB here\n", sizes.back(),
              double(sizes.back()) * n_wave * 4.0 / 1e9, rss_ys.back() / 1e6);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_spectral_memory: %s\n", e.what());
  return 1;
}
