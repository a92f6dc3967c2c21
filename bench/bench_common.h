#pragma once
// Shared pieces of the benchmarks: the MUSE observation, a random disc galaxy sized to the field,
// the real SSP library, driving the aperture and spectral stages directly, and timing / memory
// probes. Benchmarks print ratios (against the reference path, one device against several); they
// are built with the project so that they cannot rot, but ctest never runs them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "data/datacube.h"
#include "data/galaxy_data.h"
#include "data/mesh.h"
#include "data/sharded_array.h"
#include "io/ssp/ssp_library.h"
#include "io/telescope.h"
#include "pipeline/devices.h"
#include "stages/spaxel_grid/spaxel_grid.h"
#include "stages/stage.h"
#include "stages/stellar_spectra/stellar_spectra.h"

namespace ifusim::bench {

// The galaxy's redshift in every benchmark: MUSE's 5 arcsec field spans 3.1 kpc there
// (Planck 2015), and the 4700-9351 A bins see the rest-frame 4570-9090 A that every library
// used here covers.
inline constexpr double kRedshift = 0.03;

inline std::string data_dir() {
  const char* env = std::getenv("IFUSIM_DATA_DIR");
  return env && *env ? std::string(env) : std::string(IFUSIM_DEFAULT_DATA_DIR);
}

// "mastar" (the default), "miles", or a path load_ssp_library understands.
inline std::string ssp_path(const std::string& choice) {
  if (choice == "mastar") return data_dir() + "/ssp/MaStar_CB19.12_1_5.fits.gz";
  if (choice == "miles") return data_dir() + "/ssp/MILES_BASTI_CH_baseFe";
  return choice;
}

// The value after `--name` on the command line, else `fallback`.
inline std::string option(int argc, char** argv, const std::string& name,
                          const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == "--" + name) return argv[i + 1];
  return fallback;
}

using ifusim::HostStars;

// A rotating exponential disc (scale length `scale_kpc`, thin, inclined 60 degrees about x) with
// a 40 km/s dispersion and an arctan rotation curve (v_flat 200 km/s, turnover 0.5 kpc), ages
// uniform in 0.02-12 Gyr, metallicity log-uniform in 0.0005-0.04 (inside MaStar's and MILES'
// grids), initial masses log-normal around 1e5 Msun (0.3 dex). Deterministic for a seed.
inline HostStars disc_stars(std::size_t n, std::uint64_t seed, double scale_kpc) {
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> radius(2.0, scale_kpc);  // R e^(-R/h): an exponential disc
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> gauss(0.0, 1.0);
  const double inclination = 60.0 * std::numbers::pi / 180.0;
  const double ci = std::cos(inclination), si = std::sin(inclination);
  HostStars s;
  s.position_kpc.reserve(3 * n);
  s.velocity_kms.reserve(3 * n);
  for (auto* v : {&s.mass_msun, &s.initial_mass_msun, &s.metallicity, &s.age_gyr}) v->reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double r = radius(rng), phi = 2.0 * std::numbers::pi * unit(rng);
    const double height = 0.05 * scale_kpc * gauss(rng);
    const double x = r * std::cos(phi), y = r * std::sin(phi);
    const double v_c = 200.0 * (2.0 / std::numbers::pi) * std::atan(r / 0.5);
    const double vx = -v_c * std::sin(phi) + 40.0 * gauss(rng);
    const double vy = v_c * std::cos(phi) + 40.0 * gauss(rng);
    const double vz = 40.0 * gauss(rng);
    // Incline: rotate about x, so that +z (the line of sight) sees y sin i of the disc plane.
    s.position_kpc.insert(s.position_kpc.end(),
                          {static_cast<float>(x), static_cast<float>(y * ci - height * si),
                           static_cast<float>(y * si + height * ci)});
    s.velocity_kms.insert(s.velocity_kms.end(),
                          {static_cast<float>(vx), static_cast<float>(vy * ci - vz * si),
                           static_cast<float>(vy * si + vz * ci)});
    const double m = 1e5 * std::pow(10.0, 0.3 * gauss(rng));
    s.initial_mass_msun.push_back(static_cast<float>(m));
    s.mass_msun.push_back(static_cast<float>(0.6 * m));
    s.metallicity.push_back(static_cast<float>(0.0005 * std::pow(80.0, unit(rng))));
    s.age_gyr.push_back(static_cast<float>(0.02 + 11.98 * unit(rng)));
  }
  return s;
}

// The observation the pipeline would set up for `telescope` at kRedshift.
inline void observe(RunState& state, const Telescope& telescope) {
  Observation& obs = state.observation;
  obs.redshift = kRedshift;
  obs.luminosity_distance_mpc = obs.cosmology.luminosity_distance_mpc(kRedshift);
  obs.kpc_per_arcsec = obs.cosmology.kpc_per_arcsec(kRedshift);
  obs.telescope = telescope;
  obs.axes.spaxel_arcsec = telescope.spaxel_arcsec;
  obs.axes.wave_start_angstrom = telescope.wave_start_angstrom;
  obs.axes.wave_step_angstrom = telescope.wave_step_angstrom;
  obs.axes.wave_log10_step = telescope.wave_log10_step;
  obs.axes.wavelength_medium = telescope.wavelength_medium;
  obs.telescope_lsf_fwhm_angstrom = telescope.lsf_fwhm_angstrom;
}

// The disc's scale length for a telescope: a fifth of the field, so that most stars fall in it.
inline double disc_scale_kpc(const Telescope& telescope) {
  return 0.2 * telescope.fov_arcsec * Cosmology{}.kpc_per_arcsec(kRedshift);
}

// A RunState with the stars on the mesh and assigned to the telescope's spaxels (aperture stage,
// with `aperture_params`, e.g. {"smoothing": "kernel"}).
// A mesh of `n_devices` that lives until the program ends, one per backend, device count and
// OpenMP thread count (a one-device cpu mesh takes the calling thread's count). A stage keeps the
// device memory of its last run (its tables, which the adjoint reads) and releases it through its
// mesh's devices when it runs again or is destroyed: a stage that outlives a mesh made in a
// narrower scope releases through a destroyed device (on the GPU: a segmentation fault, found by
// bench_binned's cuda section on the first H100). Benches whose stages outlive one run take their
// meshes from here.
inline const Mesh& lasting_mesh(Backend backend, int n_devices, int threads) {
  static std::map<std::tuple<Backend, int, int>, std::unique_ptr<Mesh>> meshes;
  std::unique_ptr<Mesh>& mesh = meshes[{backend, n_devices, threads}];
  if (!mesh) mesh = make_mesh(backend, n_devices);
  return *mesh;
}

inline std::unique_ptr<RunState> prepared_state(
    const Mesh& mesh, const Telescope& telescope, const HostStars& host,
    const nlohmann::json& aperture_params = nlohmann::json::object()) {
  auto state = std::make_unique<RunState>(mesh);
  observe(*state, telescope);
  state->data.stars = put_stars(mesh, host);
  run_stage(*make_aperture_stage(aperture_params, "aperture"), *state);  // with its kNN pass
  return state;
}

inline StellarSpectraParams exact_params() {
  StellarSpectraParams p;
  p.method = SpectralMethod::exact;
  return p;
}

// The fused spectral stage and psum: the cube in L_sun / A, as the pipeline would have it.
inline Cube spectra_cube(Stage& spectra, RunState& state) {
  spectra.run(state);
  reduce_partials(state);
  return std::move(*state.cube);
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The median of `t` (the mean of the middle two for an even count).
inline double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
}

// Median wall time of `reps` calls of fn after `warmup` untimed calls.
inline double median_seconds(int warmup, int reps, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    t.push_back(seconds_since(start));
  }
  return median(std::move(t));
}

// A field of /proc/self/status in bytes (VmRSS, VmHWM: reported in kB), or -1.
inline long long proc_status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream fields(line.substr(field.size() + 1));
      long long kb = -1;
      fields >> kb;
      return kb * 1024;
    }
  return -1;
}

// Resets VmHWM to the current RSS (Linux >= 4.0); false where the kernel refuses.
inline bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

// Largest |a - b| over max |b|, and the largest |a - b| / |b| over voxels with |b| >= 1e-3 max |b|
// (relative differences of nearly empty voxels say nothing).
struct Agreement {
  double max_abs_over_peak = 0.0;
  double max_rel_bright = 0.0;
  bool finite = true;
};
// a: a cube's values (float32, data/datacube.h) or doubles; b: the reference.
template <class A, class B>
Agreement compare(const std::vector<A>& a, const std::vector<B>& b) {
  Agreement g;
  double peak = 0.0;
  for (double v : b) peak = std::max(peak, std::abs(v));
  for (std::size_t i = 0; i < a.size(); ++i) {
    g.finite = g.finite && std::isfinite(a[i]);
    const double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    g.max_abs_over_peak = std::max(g.max_abs_over_peak, peak > 0 ? d / peak : d);
    if (std::abs(b[i]) >= 1e-3 * peak && peak > 0)
      g.max_rel_bright = std::max(g.max_rel_bright, d / std::abs(b[i]));
  }
  return g;
}

template <class T>
double total(const std::vector<T>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return s;
}

}  // namespace ifusim::bench
