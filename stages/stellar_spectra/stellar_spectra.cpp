#include "stages/stellar_spectra/stellar_spectra.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "data/sharded_array.h"
#include "data/wavelength.h"
#include "stages/reductions/reductions.h"

namespace ifusim {

namespace {

// The templates' rest wavelengths in the telescope's medium.
std::vector<double> rest_wavelengths(const SspGrid& grid, const std::string& medium) {
  std::vector<double> out;
  for (double w : grid.wavelength_angstrom)
    out.push_back(convert_wavelength(w, grid.wavelength_medium, medium));
  return out;
}

// Pixel edges from pixel centres: midpoints, the outer edges half a spacing beyond.
std::vector<double> edges_from_centres(const std::vector<double>& c) {
  const std::size_t n = c.size();
  std::vector<double> e(n + 1);
  for (std::size_t j = 1; j < n; ++j) e[j] = 0.5 * (c[j - 1] + c[j]);
  e[0] = c[0] - 0.5 * (c[1] - c[0]);
  e[n] = c[n - 1] + 0.5 * (c[n - 1] - c[n - 2]);
  return e;
}

void check_grid(const SspGrid& g) {
  auto ascending = [](const std::vector<double>& v) {
    return std::adjacent_find(v.begin(), v.end(), std::greater_equal<>()) == v.end();
  };
  if (g.n_age() == 0 || g.n_metallicity() == 0 || g.n_wave() < 2)
    throw std::invalid_argument("SSP grid " + g.name +
                                ": needs ages, metallicities and >= 2 wavelengths");
  if (!ascending(g.age_gyr) || !ascending(g.metallicity) || !ascending(g.wavelength_angstrom))
    throw std::invalid_argument("SSP grid " + g.name + ": axes must be strictly ascending");
  if (g.age_gyr.front() <= 0 || g.metallicity.front() <= 0)
    throw std::invalid_argument("SSP grid " + g.name +
                                ": ages and metallicities must be > 0 (log grid)");
  if (g.flux.size() != g.n_age() * g.n_metallicity() * g.n_wave())
    throw std::invalid_argument("SSP grid " + g.name + ": flux size does not match its axes");
}

}  // namespace

SspTables make_ssp_tables(const SspGrid& grid, const std::string& medium) {
  check_grid(grid);
  SspTables t;
  for (double a : grid.age_gyr) t.log_age.push_back(std::log10(a));
  for (double z : grid.metallicity) t.log_z.push_back(std::log10(z));
  t.edges = edges_from_centres(rest_wavelengths(grid, medium));
  const std::size_t n_wave = grid.n_wave(), n_nodes = grid.n_age() * grid.n_metallicity();
  const double step = (t.edges.back() - t.edges.front()) / static_cast<double>(n_wave);
  t.uniform = true;
  for (std::size_t j = 0; j <= n_wave; ++j)
    t.uniform = t.uniform && std::abs(t.edges[j] - (t.edges[0] + j * step)) <= 1e-9 * t.edges[j];
  t.cumulative.assign(n_nodes * (n_wave + 1), 0.0);
  for (std::size_t node = 0; node < n_nodes; ++node) {
    const float* f = grid.flux.data() + node * n_wave;
    double* c = t.cumulative.data() + node * (n_wave + 1);
    for (std::size_t j = 0; j < n_wave; ++j) {
      c[j + 1] = c[j] + static_cast<double>(f[j]) * (t.edges[j + 1] - t.edges[j]);
      t.max_flux_density = std::max(t.max_flux_density, std::abs(static_cast<double>(f[j])));
    }
  }
  return t;
}

StellarSpectraParams StellarSpectraParams::from_json(JsonParams p) {
  StellarSpectraParams out;
  // Only bilinear interpolation in (log age, log Z) is offered; the key documents it.
  p.choice("interpolation", {"bilinear"}, "bilinear");
  out.outside = p.choice("outside_grid", {"clamp", "zero"}, "clamp") == "zero" ? OutsideGrid::zero
                                                                               : OutsideGrid::clamp;
  p.finish();
  return out;
}

namespace {

class StellarSpectraStage final : public Stage {
 public:
  StellarSpectraStage(std::shared_ptr<const SspGrid> grid, StellarSpectraParams params)
      : grid_(std::move(grid)), params_(params) {
    make_ssp_tables(*grid_);  // validates the grid before anything runs
  }
  std::string name() const override { return "stellar_spectra"; }
  std::vector<std::string> needs() const override {
    return {"stars.spaxel_index", "stars.velocity_kms", "stars.initial_mass_msun",
            "stars.age_gyr",      "stars.metallicity",  "spaxels"};
  }
  std::vector<std::string> provides() const override { return {"partial_cube", "kinematics"}; }

  void run(RunState& state) const override {
    const Mesh& mesh = state.mesh;
    const Stars& stars = state.data.stars;
    const Observation& obs = state.observation;
    const SspTables tables_ = make_ssp_tables(*grid_, obs.telescope.wavelength_medium);
    const WaveBins bins{obs.axes.wave_start_angstrom, obs.axes.wave_step_angstrom,
                        state.spaxels.n_wave};
    if (bins.n <= 0 || !(bins.step_angstrom > 0))
      throw std::logic_error("stellar_spectra: the observation has no wavelength grid");
    // Templates that do not reach the band's ends (after the shift) leave those bins dark.
    const double reach_lo = tables_.edges.front() * (1.0 + obs.redshift);
    const double reach_hi = tables_.edges.back() * (1.0 + obs.redshift);
    const double band_hi = bins.start_angstrom + bins.n * bins.step_angstrom;
    if (reach_lo > bins.start_angstrom || reach_hi < band_hi)
      spdlog::warn(
          "stellar_spectra: the templates ({:.1f}-{:.1f} A at rest) cover {:.1f}-{:.1f} A at "
          "z = {}, not all of the telescope's {:.1f}-{:.1f} A: the rest of the cube stays dark",
          tables_.edges.front(), tables_.edges.back(), reach_lo, reach_hi, obs.redshift,
          bins.start_angstrom, band_hi);

    // The templates, replicated on every device.
    const auto rep = Sharding::replicated();
    const auto log_age = device_put(mesh, tables_.log_age, 1, rep);
    const auto log_z = device_put(mesh, tables_.log_z, 1, rep);
    const auto edges = device_put(mesh, tables_.edges, 1, rep);
    const auto cumulative = device_put(mesh, tables_.cumulative, 1, rep);

    // A bound on any voxel's total that does not depend on the split: every star adds at most
    // m * max|f| / D_min to a voxel, D_min from the largest approaching speed.
    const double m_max = global_max_abs(mesh, stars.initial_mass_msun);
    const double v_max = global_max_abs(mesh, stars.velocity_kms, 2);
    const double d_min = (1.0 + obs.redshift) * std::max(1e-3, 1.0 - v_max / kSpeedOfLightKms);
    const double n = static_cast<double>(stars.count());
    const double bound = n * m_max * tables_.max_flux_density / d_min;

    PartialCube partial;
    partial.shape = {state.spaxels.nx, state.spaxels.ny, bins.n};
    partial.scale = FixedPointScale::for_bound(bound);
    partial.sums =
        ShardedArray<std::int64_t>(mesh, partial.shape.n_voxels(), 1, Sharding::partial());

    const double mc_max = global_max_abs(mesh, stars.mass_msun);
    PartialCube moments;
    moments.shape = {state.spaxels.nx, state.spaxels.ny, 3};
    moments.scale = FixedPointScale::for_bound(n * mc_max * std::max(1.0, v_max * v_max));
    moments.sums =
        ShardedArray<std::int64_t>(mesh, moments.shape.n_voxels(), 1, Sharding::partial());

    shard_map(mesh, [&](const Device& d) {
      partial.sums.shard(d).buffer.zero();
      moments.sums.shard(d).buffer.zero();
      SspView ssp;
      ssp.n_age = static_cast<int>(tables_.log_age.size());
      ssp.n_z = static_cast<int>(tables_.log_z.size());
      ssp.n_wave = static_cast<int>(tables_.edges.size() - 1);
      ssp.log_age = log_age.local(d).data;
      ssp.log_z = log_z.local(d).data;
      ssp.edges = edges.local(d).data;
      ssp.cumulative = cumulative.local(d).data;
      ssp.uniform = tables_.uniform;
      ssp.edge0 = tables_.edges.front();
      ssp.step = (tables_.edges.back() - tables_.edges.front()) / ssp.n_wave;
      ssp.outside = params_.outside;
      const StarViews views{stars.velocity_kms.local(d, 2).data,
                            stars.initial_mass_msun.local(d).data,
                            stars.age_gyr.local(d).data,
                            stars.metallicity.local(d).data,
                            stars.spaxel_index.local(d).data,
                            stars.dust_av.empty() ? nullptr : stars.dust_av.local(d).data,
                            stars.spaxel_index.local(d).size};
      IFUSIM_DISPATCH(d, accumulate_stellar_spectra, d, ssp, bins, obs.redshift, state.dust_curve,
                      views, partial.scale.counts_per_unit, partial.sums.local(d));
      IFUSIM_DISPATCH(d, accumulate_kinematics, d, views, stars.mass_msun.local(d),
                      moments.scale.counts_per_unit, moments.sums.local(d));
    });
    state.partial = std::move(partial);
    state.kinematics = std::move(moments);
  }

 private:
  std::shared_ptr<const SspGrid> grid_;
  StellarSpectraParams params_;
};

}  // namespace

std::unique_ptr<Stage> make_stellar_spectra_stage(std::shared_ptr<const SspGrid> grid,
                                                  StellarSpectraParams params) {
  return std::make_unique<StellarSpectraStage>(std::move(grid), params);
}

std::vector<double> reference_stellar_cube(
    const SspGrid& grid, OutsideGrid outside, const std::string& medium, double redshift,
    const WaveBins& bins, std::size_t n_spaxels, const std::vector<float>& velocity_los_kms,
    const std::vector<float>& initial_mass_msun, const std::vector<float>& age_gyr,
    const std::vector<float>& metallicity, const std::vector<std::int32_t>& spaxel_index) {
  check_grid(grid);
  const std::size_t n_wave = grid.n_wave(), n_z = grid.n_metallicity();
  const std::vector<double> rest_edges = edges_from_centres(rest_wavelengths(grid, medium));
  std::vector<double> cube(n_spaxels * static_cast<std::size_t>(bins.n), 0.0);
  // Linear interpolation weight of x in an ascending axis (in log10), clamped at the ends.
  auto locate = [](const std::vector<double>& axis, double x, std::size_t& lo, double& t,
                   bool& out) {
    std::vector<double> logs;
    for (double a : axis) logs.push_back(std::log10(a));
    const double lx = std::log10(std::max(x, 1e-12));
    if (lx < logs.front() || lx > logs.back()) out = true;
    if (axis.size() == 1 || lx <= logs.front()) {
      lo = 0;
      t = 0;
      return;
    }
    if (lx >= logs.back()) {
      lo = axis.size() - 2;
      t = 1;
      return;
    }
    lo = 0;
    while (logs[lo + 1] <= lx) ++lo;
    t = (lx - logs[lo]) / (logs[lo + 1] - logs[lo]);
  };
  std::vector<double> spectrum(n_wave);
  for (std::size_t i = 0; i < spaxel_index.size(); ++i) {
    if (spaxel_index[i] < 0) continue;
    std::size_t ia = 0, iz = 0;
    double ta = 0, tz = 0;
    bool out = false;
    locate(grid.age_gyr, age_gyr[i], ia, ta, out);
    locate(grid.metallicity, metallicity[i], iz, tz, out);
    if (out && outside == OutsideGrid::zero) continue;
    const std::size_t ia1 = std::min(ia + 1, grid.n_age() - 1), iz1 = std::min(iz + 1, n_z - 1);
    // 1. The star's rest-frame spectrum: bilinear in (log age, log Z), times initial mass.
    for (std::size_t j = 0; j < n_wave; ++j)
      spectrum[j] = initial_mass_msun[i] * ((1 - ta) * (1 - tz) * grid.spectrum(ia, iz)[j] +
                                            (1 - ta) * tz * grid.spectrum(ia, iz1)[j] +
                                            ta * (1 - tz) * grid.spectrum(ia1, iz)[j] +
                                            ta * tz * grid.spectrum(ia1, iz1)[j]);
    // 2. Shift every pixel edge; 3. share each pixel's energy among the bins it overlaps.
    const double doppler = (1 + redshift) * (1 + velocity_los_kms[i] / kSpeedOfLightKms);
    double* out_spectrum = cube.data() + static_cast<std::size_t>(spaxel_index[i]) * bins.n;
    for (std::size_t j = 0; j < n_wave; ++j) {
      const double a = rest_edges[j] * doppler, b = rest_edges[j + 1] * doppler;
      const double energy = spectrum[j] * (rest_edges[j + 1] - rest_edges[j]);
      // Only the bins [a, b] can reach (a margin of one bin on each side).
      const double first_edge = bins.start_angstrom - 0.5 * bins.step_angstrom;
      const int k_begin =
          std::max(0, static_cast<int>(std::floor((a - first_edge) / bins.step_angstrom)) - 1);
      const int k_end =
          std::min(bins.n, static_cast<int>(std::floor((b - first_edge) / bins.step_angstrom)) + 2);
      for (int k = k_begin; k < k_end; ++k) {
        const double lo = bins.start_angstrom + (k - 0.5) * bins.step_angstrom;
        const double hi = lo + bins.step_angstrom;
        const double overlap = std::min(b, hi) - std::max(a, lo);
        if (overlap > 0) out_spectrum[k] += energy * overlap / (b - a) / bins.step_angstrom;
      }
    }
  }
  return cube;
}

}  // namespace ifusim
