#include "stages/emission_lines/emission_lines.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <utility>

#include "core/config_error.h"
#include "core/constants.h"  // kSolarLuminosityErgPerS, kBoltzmannJPerK, kAtomicMassKg
#include "data/collectives/reductions.h"
#include "data/host_memory.h"
#include "data/wavelength.h"
#include "stages/common/cube_partials.h"
#include "stages/common/device_sums.h"
#include "stages/common/interpolation.h"
#include "stages/common/particle_fields.h"

namespace ifusim {

namespace {

double polynomial(std::initializer_list<double> coefficients, double x) {
  double sum = 0.0, power = 1.0;
  for (const double c : coefficients) {
    sum += c * power;
    power *= x;
  }
  return sum;
}

// Sanders et al. 2016, eq. 7: R(n_e) = a (b + n_e) / (c + n_e) at 10^4 K.
double sanders_ratio(double a, double b, double c, double n_e) {
  return a * (b + n_e) / (c + n_e);
}

}  // namespace

double oii_doublet_ratio(double electron_density_cm3) {
  return sanders_ratio(0.3771, 2468.0, 638.4, electron_density_cm3);
}

double sii_doublet_ratio(double electron_density_cm3) {
  return sanders_ratio(0.4315, 2107.0, 627.1, electron_density_cm3);
}

double calibrated_ratio_to_halpha(const EmissionLineParams& params, int index, double oxygen) {
  const double x = std::clamp(oxygen, kCurtiOxygenMin, kCurtiOxygenMax) - kSolarOxygenAbundance;
  const double hbeta = 1.0 / kHalphaPerHbeta;
  const std::string name = kEmissionLines[index].name;
  // Curti et al. 2020, Table 2.
  const double r2 = std::pow(10.0, polynomial({0.435, -1.362, -5.655, -4.851, -0.478, 0.736}, x));
  const double r3 = std::pow(10.0, polynomial({-0.277, -3.549, -3.593, -0.981}, x));
  const double n2 = std::pow(10.0, polynomial({-0.489, 1.513, -2.554, -5.293, -2.867}, x));
  const double s2 = std::pow(10.0, polynomial({-0.442, -0.360, -6.271, -8.339, -3.559}, x));
  const double oii = oii_doublet_ratio(params.electron_density_cm3);  // 3729 / 3726
  const double sii = sii_doublet_ratio(params.electron_density_cm3);  // 6716 / 6731
  if (name == "halpha") return 1.0;
  if (name == "hbeta") return hbeta;
  if (name == "hgamma") return 0.468 * hbeta;
  if (name == "hdelta") return 0.259 * hbeta;
  if (name == "oii_3726") return hbeta * r2 / (1.0 + oii);
  if (name == "oii_3729") return hbeta * r2 * oii / (1.0 + oii);
  if (name == "oiii_5007") return hbeta * r3;
  if (name == "oiii_4959") return hbeta * r3 / 2.98;
  if (name == "nii_6584") return n2;
  if (name == "nii_6548") return n2 / 3.05;
  if (name == "sii_6716") return s2 * sii / (1.0 + sii);
  if (name == "sii_6731") return s2 / (1.0 + sii);
  if (name == "oi_6300") return std::pow(10.0, params.log_oi_6300_to_halpha);
  throw std::logic_error("emission_lines: no relation for line " + name);
}

double line_ratio_to_hbeta(const LineRatioTable& table, std::size_t entry, double oxygen,
                           double log_u) {
  const std::vector<double>& values = table.ratios.at(entry).second;
  // Clamped at the table's edges (bracket, stages/common/interpolation.h; whether x was outside is
  // not needed).
  int i = 0, j = 0;
  double ti = 0.0, tj = 0.0;
  bool outside = false;
  bracket(table.oxygen_abundance.data(), static_cast<int>(table.oxygen_abundance.size()), oxygen, i,
          ti, outside);
  const std::size_t n_u = std::max<std::size_t>(1, table.log_ionisation_parameter.size());
  if (!table.log_ionisation_parameter.empty())
    bracket(table.log_ionisation_parameter.data(), static_cast<int>(n_u), log_u, j, tj, outside);
  auto at = [&](int a, int b) {
    return values[std::min<std::size_t>(a, table.oxygen_abundance.size() - 1) * n_u +
                  std::min<std::size_t>(b, n_u - 1)];
  };
  return (1.0 - ti) * ((1.0 - tj) * at(i, j) + tj * at(i, j + 1)) +
         ti * ((1.0 - tj) * at(i + 1, j) + tj * at(i + 1, j + 1));
}

LineRatioGrid make_line_ratio_grid(const EmissionLineParams& params, const LineRatioTable* table) {
  LineRatioGrid grid;
  double lo = kCurtiOxygenMin, hi = kCurtiOxygenMax;
  if (table) {
    lo = std::min(lo, table->oxygen_abundance.front());
    hi = std::max(hi, table->oxygen_abundance.back());
  }
  // 0.001 dex or finer: linear interpolation errs by h^2 |f''| / 8, and the calibrations' |f''|
  // stays below 22 in their range, so within 3e-6 dex.
  grid.n_oxygen = std::max(2, static_cast<int>(std::ceil((hi - lo) / 0.001)) + 1);
  grid.oxygen_min = lo;
  grid.oxygen_step = (hi - lo) / (grid.n_oxygen - 1);
  grid.ratio_to_halpha.assign(static_cast<std::size_t>(kNumEmissionLines) * grid.n_oxygen, 0.0);
  for (int l = 0; l < kNumEmissionLines; ++l)
    for (int k = 0; k < grid.n_oxygen; ++k) {
      const double oxygen = lo + k * grid.oxygen_step;
      double ratio = calibrated_ratio_to_halpha(params, l, oxygen);
      if (table)
        for (std::size_t e = 0; e < table->ratios.size(); ++e)
          if (table->ratios[e].first == l)
            ratio = line_ratio_to_hbeta(*table, e, oxygen, params.log_ionisation_parameter) /
                    kHalphaPerHbeta;
      grid.ratio_to_halpha[static_cast<std::size_t>(l) * grid.n_oxygen + k] = ratio;
    }
  return grid;
}

EmissionLineParams EmissionLineParams::from_json(JsonParams p) {
  EmissionLineParams out;
  if (p.has("lines")) {
    const nlohmann::json& lines = p.raw("lines");
    if (!lines.is_array() || lines.empty())
      p.require(false, "lines", "a non-empty array of line names (" + emission_line_names() + ")",
                lines);
    for (const auto& name : lines) {
      const int index = name.is_string() ? emission_line_index(name.get<std::string>()) : -1;
      p.require(index >= 0, "lines", "line names from " + emission_line_names(), name);
      if (std::find(out.lines.begin(), out.lines.end(), index) == out.lines.end())
        out.lines.push_back(index);
    }
    std::sort(out.lines.begin(), out.lines.end());
  } else {
    for (int i = 0; i < kNumEmissionLines; ++i) out.lines.push_back(i);
  }
  out.turbulent_sigma_kms = p.number("turbulent_sigma_kms", out.turbulent_sigma_kms);
  p.require(out.turbulent_sigma_kms >= 0.0 && out.turbulent_sigma_kms <= 1000.0,
            "turbulent_sigma_kms", "a number from 0 to 1000 (km/s)", out.turbulent_sigma_kms);
  out.electron_temperature_k = p.number("electron_temperature_k", out.electron_temperature_k);
  p.require(out.electron_temperature_k >= 100.0 && out.electron_temperature_k <= 1e6,
            "electron_temperature_k", "a number from 100 to 1e6 (K)", out.electron_temperature_k);
  out.electron_density_cm3 = p.number("electron_density_cm3", out.electron_density_cm3);
  p.require(out.electron_density_cm3 > 0.0 && out.electron_density_cm3 <= 1e6,
            "electron_density_cm3", "a number > 0 and <= 1e6 (cm^-3)", out.electron_density_cm3);
  out.log_oi_6300_to_halpha = p.number("log_oi_6300_to_halpha", out.log_oi_6300_to_halpha);
  p.require(out.log_oi_6300_to_halpha >= -5.0 && out.log_oi_6300_to_halpha <= 1.0,
            "log_oi_6300_to_halpha", "a number from -5 to 1", out.log_oi_6300_to_halpha);
  out.line_ratio_file = p.string("line_ratio_file", "");
  out.log_ionisation_parameter = p.number("log_ionisation_parameter", out.log_ionisation_parameter);
  p.require(std::isfinite(out.log_ionisation_parameter), "log_ionisation_parameter",
            "a finite number", out.log_ionisation_parameter);
  p.finish();
  return out;
}

namespace {

// Boltzmann constant over the atomic mass unit, (km/s)^2 per K per amu (CODATA 2018).
constexpr double kBoltzmannOverAmuKm2S2PerK = kBoltzmannJPerK / kAtomicMassKg * 1e-6;
// FWHM / sigma of a Gaussian, 2 sqrt(2 ln 2).
constexpr double kFwhmPerSigma = 2.3548200450309493;
// A plan's assumption where the data is not read yet.
constexpr double kPlanGasVelocityKms = 1000.0;

// A line's window for velocities |v_los| <= v_max: the observed bins its +-8 sigma can reach,
// widened by one bin on each side and cut to the simulated band; none where it misses the band.
LineWindow line_window(int index, const EmissionLineParams& params, const Observation& obs,
                       int n_bins, double v_max_kms) {
  const EmissionLine& line = kEmissionLines[index];
  LineWindow w;
  w.vacuum_angstrom = line.vacuum_angstrom;
  w.sigma_kms =
      std::sqrt(kBoltzmannOverAmuKm2S2PerK * params.electron_temperature_k / line.atomic_mass_amu +
                params.turbulent_sigma_kms * params.turbulent_sigma_kms);
  w.ratio_row = index;
  // The line is deposited broadened as the templates are (in the observed frame), so that the
  // lsf stage, which convolves the whole cube by sqrt(FWHM_instrument^2 - FWHM_templates^2),
  // takes lines and continuum alike to the instrument's resolution. Where the templates are
  // coarser than the instrument the lsf stage cannot sharpen (it leaves those wavelengths), so
  // the line is broadened only to the instrument's FWHM there: min(templates, instrument), and
  // after the lsf stage lines have the instrument's LSF, the continuum max(templates,
  // instrument). An instrument FWHM of 0 (none known) leaves the templates' width.
  const bool to_air = obs.telescope.wavelength_medium == "air";
  const double observed_vacuum = line.vacuum_angstrom * (1.0 + obs.redshift);
  const double template_fwhm_observed =
      obs.template_fwhm_angstrom.at(line.vacuum_angstrom) * (1.0 + obs.redshift);
  const double instrument_fwhm = obs.telescope_lsf_fwhm_angstrom.at(
      to_air ? air_from_vacuum(observed_vacuum) : observed_vacuum);
  const double deposit_fwhm = instrument_fwhm > 0.0
                                  ? std::min(template_fwhm_observed, instrument_fwhm)
                                  : template_fwhm_observed;
  const double deposit_sigma_kms =
      kSpeedOfLightKms * deposit_fwhm / kFwhmPerSigma / observed_vacuum;
  w.profile_sigma_kms = std::hypot(w.sigma_kms, deposit_sigma_kms);
  auto observed = [&](double v) {
    const double vacuum =
        line.vacuum_angstrom * (1.0 + obs.redshift) * (1.0 + v / kSpeedOfLightKms);
    return to_air ? air_from_vacuum(vacuum) : vacuum;
  };
  const double lo = observed(-v_max_kms), hi = observed(v_max_kms);
  const double reach = kLineTruncationSigmas * hi * w.profile_sigma_kms / kSpeedOfLightKms;
  const WaveGrid grid = obs.simulated_grid();
  const double k0 = std::floor(grid.edge_position(lo - reach)) - 1.0;
  const double k1 = std::floor(grid.edge_position(hi + reach)) + 1.0;
  const double first = std::max(0.0, k0), last = std::min(n_bins - 1.0, k1);
  if (last >= first) {
    w.first_bin = static_cast<int>(first);
    w.n_bins = static_cast<int>(last - first) + 1;
  }
  return w;
}

// The line sums' total: each line's window added into the cube at its bins, and its luminosity
// per spaxel as a map.
struct LineTotal {
  std::vector<LineWindow> windows;  // ratio_row is the line's index in kEmissionLines
  int row_columns = 0;
  CubeShape shape;
  WaveGrid grid;  // the simulated bins

  void operator()(RunState& state, std::vector<double> total) const {
    const std::size_t n_spaxels = shape.n_spaxels();
    const auto n_wave = static_cast<std::size_t>(shape.n_wave);
    // Where the stars' cube is there already, the lines go into it (a cube of their own beside it
    // was 2.7 GB more at the reduction's peak on MUSE-WFM): a spaxel's lines are summed into a
    // spectrum of their own first, in double, and that spectrum added to the cube's float values,
    // each voxel's sum rounded once (data/datacube.h). Without a cube the lines make one.
    float* cube = cube_for(state, shape, "Lsun/Angstrom").data.data();
    std::vector<SkyMap> maps(windows.size());
    for (std::size_t l = 0; l < windows.size(); ++l) {
      const EmissionLine& line = kEmissionLines[windows[l].ratio_row];
      if (windows[l].n_bins == 0) continue;  // outside the band: no light, no map
      maps[l] = {"Lsun",
                 std::string(line.label) +
                     " light per spaxel, luminosity or (after the flux stage) flux (intrinsic: "
                     "before the PSF; dimmed by dust where a dust stage ran)",
                 std::vector<double>(n_spaxels, 0.0)};
    }
#pragma omp parallel
    {
      std::vector<double> lines(n_wave);
#pragma omp for schedule(static)
      for (long long si = 0; si < static_cast<long long>(n_spaxels); ++si) {
        const auto s = static_cast<std::size_t>(si);
        std::fill(lines.begin(), lines.end(), 0.0);
        for (std::size_t l = 0; l < windows.size(); ++l) {
          const LineWindow& w = windows[l];
          if (w.n_bins == 0) continue;
          const double* row = total.data() + s * row_columns + w.offset;
          double* bins = lines.data() + w.first_bin;
          double sum = 0.0;
          for (int k = 0; k < w.n_bins; ++k) {
            bins[k] += row[k];
            sum += grid.is_log() ? row[k] * grid.width(w.first_bin + k) : row[k];
          }
          maps[l].values[s] = grid.is_log() ? sum : sum * grid.step_angstrom;
        }
        float* spectrum = cube + s * n_wave;
        for (std::size_t k = 0; k < n_wave; ++k)
          spectrum[k] = static_cast<float>(static_cast<double>(spectrum[k]) + lines[k]);
      }
    }
    for (std::size_t l = 0; l < windows.size(); ++l)
      if (windows[l].n_bins > 0)
        state.maps["flux_" + std::string(kEmissionLines[windows[l].ratio_row].name)] =
            std::move(maps[l]);
  }
};

class EmissionLinesStage final : public Stage {
 public:
  EmissionLinesStage(EmissionLineParams params, std::shared_ptr<const LineRatioTable> table)
      : params_(std::move(params)), table_(std::move(table)) {
    // H-alpha weighs the gas kinematics, so it is always deposited (its map and light too).
    const int halpha = emission_line_index("halpha");
    if (std::find(params_.lines.begin(), params_.lines.end(), halpha) == params_.lines.end()) {
      params_.lines.push_back(halpha);
      std::sort(params_.lines.begin(), params_.lines.end());
    }
  }
  std::string name() const override { return "emission_lines"; }
  std::vector<std::string> needs() const override {
    return {"spaxels",         "gas.position_kpc",    "gas.velocity_kms",
            "gas.metallicity", "gas.sfr_msun_per_yr", fields::gas_spaxel_index.full_name()};
  }
  std::vector<Provided> provides() const override {
    return {{"partial_cube", "Lsun/Angstrom", "the gas's emission lines, added to the cube"},
            {"gas_kinematics", "km/s",
             "velocity_gas_kms, dispersion_gas_kms: H-alpha-weighted moments of the gas"},
            {"line_maps", "erg/s/cm^2 (after flux)", "flux_<line>: every line's flux per spaxel"}};
  }

  std::vector<MemoryItem> memory_estimate(const PlanContext& c) const override {
    int columns = 0;
    for (const int l : params_.lines)
      columns += line_window(l, params_, c.observation, c.n_wave, kPlanGasVelocityKms).n_bins;
    const std::size_t bytes = c.n_spaxels * static_cast<std::size_t>(columns) * 8;
    return {{"emission-line windows, " + std::to_string(columns) +
                 " bins a spaxel (int64, assuming |v_los| <= " +
                 std::to_string(static_cast<int>(kPlanGasVelocityKms)) + " km/s)",
             bytes + 3 * c.n_spaxels * 8, true, "stages.emission_lines.lines"},
            {"emission-line windows, reduced (host)", bytes, false, ""}};
  }

  // The line windows and the fixed-point scales bound what every cell can add, so they need the
  // whole gas first: a pass over it (its count, largest SFR and |v_los|), which a streamed run
  // makes on the gas's own block before the stars' blocks.
  Pass pass(const StreamedInput&) const override { return Pass::gas; }
  void observe(RunState& block) override {
    const Gas& gas = block.data.gas;
    if (gas.count() == 0) return;
    require_fields(gas);
    n_gas_ += gas.count();
    v_max_kms_ = std::max<double>(v_max_kms_, global_max_abs(block.mesh, gas.velocity_kms, 2));
    max_sfr_ = std::max<double>(max_sfr_, global_max_abs(block.mesh, gas.sfr_msun_per_yr));
  }
  void end_pass(RunState& state) override {
    const Mesh& mesh = state.mesh;
    const Observation& obs = state.observation;
    const auto n = static_cast<std::size_t>(
        sum_over_processes(mesh, static_cast<std::int64_t>(std::exchange(n_gas_, 0))));
    const double v_max = max_over_processes(mesh, std::exchange(v_max_kms_, 0.0));
    const double max_sfr = max_over_processes(mesh, std::exchange(max_sfr_, 0.0));
    const int n_wave = state.spaxels.n_wave;
    if (n_wave <= 0 || !(obs.simulated_grid().width(0) > 0))
      throw std::logic_error("emission_lines: the observation has no wavelength grid");
    if (!(v_max < 0.5 * kSpeedOfLightKms))
      throw std::runtime_error("emission_lines: the gas's largest |v_los| is " +
                               std::to_string(v_max) +
                               " km/s; expected finite velocities below c / 2");
    Setup s;
    LineDeposit& deposit = s.deposit;
    LineTotal& total = s.total;
    std::string outside_band;
    for (const int l : params_.lines) {
      LineWindow w = line_window(l, params_, obs, n_wave, v_max);
      w.offset = total.row_columns;
      total.row_columns += w.n_bins;
      if (kEmissionLines[l].name == std::string("halpha")) deposit.halpha_line = deposit.n_lines;
      deposit.lines[deposit.n_lines++] = w;
      total.windows.push_back(w);
      if (w.n_bins == 0)
        outside_band += (outside_band.empty() ? "" : ", ") + std::string(kEmissionLines[l].label);
    }
    if (!outside_band.empty())
      spdlog::warn(
          "emission_lines: {} fall outside the simulated band ({:.1f}-{:.1f} A) at z = {}: no "
          "light and no map for them",
          outside_band, obs.simulated_wave_start_angstrom(),
          obs.simulated_grid().centre(n_wave - 1), obs.redshift);
    total.shape = {state.spaxels.nx, state.spaxels.ny, n_wave};
    total.grid = obs.simulated_grid();

    const LineRatioGrid grid = make_line_ratio_grid(params_, table_.get());
    s.ratios = device_put(mesh, grid.ratio_to_halpha, 1, Sharding::replicated());
    double max_ratio = 0.0;
    for (const double r : grid.ratio_to_halpha) max_ratio = std::max(max_ratio, r);
    deposit.oxygen_min = grid.oxygen_min;
    deposit.oxygen_step = grid.oxygen_step;
    deposit.n_oxygen = grid.n_oxygen;
    deposit.one_plus_z = 1.0 + obs.redshift;
    deposit.to_air = obs.telescope.wavelength_medium == "air";
    deposit.grid = obs.simulated_grid();
    std::vector<double> edges(static_cast<std::size_t>(n_wave) + 1);
    for (int k = 0; k <= n_wave; ++k) edges[static_cast<std::size_t>(k)] = deposit.grid.edge(k);
    s.bin_edges = device_put(mesh, edges, 1, Sharding::replicated());
    deposit.halpha_lsun_per_sfr = kHalphaErgPerSPerMsunPerYr / kSolarLuminosityErgPerS;
    deposit.row_columns = total.row_columns;

    // Split-independent bounds: a voxel sums at most every cell's whole line over one bin, a
    // moment every cell's H-alpha times (v_max^2 + sigma^2).
    if (n == 0)
      spdlog::warn("emission_lines: the galaxy has no gas: the cube gets no emission lines");
    else if (!(max_sfr > 0.0))
      spdlog::warn(
          "emission_lines: none of the {} gas cells forms stars (StarFormationRate = 0): the cube "
          "gets no emission lines",
          n);
    const double max_halpha = static_cast<double>(n) * max_sfr * deposit.halpha_lsun_per_sfr;
    s.line_scale = FixedPointScale::for_bound(
        max_halpha * max_ratio / deposit.grid.width(0),  // the narrowest bin
        "emission_lines: the line sums (gas.sfr_msun_per_yr)");
    double sigma_max = 0.0;
    for (const auto& w : total.windows) sigma_max = std::max(sigma_max, w.sigma_kms);
    s.moment_scale = FixedPointScale::for_bound(
        max_halpha * std::max(1.0, v_max * v_max + sigma_max * sigma_max),
        "emission_lines: the gas kinematic moments (gas.sfr_msun_per_yr, gas.velocity_kms)");
    deposit.counts_per_unit = s.line_scale.counts_per_unit;
    deposit.moment_counts_per_unit = s.moment_scale.counts_per_unit;
    spdlog::info(
        "emission_lines: {} lines in the band from {} gas cells, {} bins a spaxel, largest "
        "|v_los| {:.1f} km/s",
        std::count_if(total.windows.begin(), total.windows.end(),
                      [](const LineWindow& w) { return w.n_bins > 0; }),
        n, total.row_columns, v_max);
    setup_.emplace(std::move(s));
  }

  // Reverse mode (docs/gradients.md, "Gas: the emission lines"): each cell's dL/d sfr, dL/d Z
  // (or dL/d its GFM_Metals' H and O where O/H came from them) and dL/d v_los, gathered from
  // `reduced` = dL/d(reduced cube) over the bins and spaxels its lines were deposited into
  // (GatherCellLineGradients, kernels.inl). The cotangent is first cut to the lines' windows (the
  // line sums' layout: about 120 columns a spaxel for MUSE instead of 3721), which a GPU gets a
  // copy of. With a dust stage, also dL/d gas.dust_av (the screen in front of each cell), for the
  // dust stage's adjoint; the birth clouds and the footprints are constants here.
  bool particle_adjoint(RunState& state, const CubeCotangent& reduced,
                        ParticleGradients& gradients) override {
    if (!setup_ || !run_deposit_)
      throw std::logic_error("emission_lines: particle_adjoint before the stage's forward run");
    const CubeShape& shape = setup_->total.shape;
    reduced.require_shape(shape, "emission_lines");
    const auto start = std::chrono::steady_clock::now();
    const Mesh& mesh = state.mesh;
    const Gas& gas = state.data.gas;
    const std::size_t n = gas.count();
    if (n == 0) return true;  // no gas: nothing to differentiate
    require_fields(gas);
    const bool metals = gas.metals.rows() == n;
    auto field = [&](const std::string& name, std::size_t components) -> std::vector<double>& {
      return gradients.add_to(name, n * components, "emission_lines");
    };
    // Keyed by the fields the stage read; the velocity as the stage saw it (its z, the line of
    // sight), 3 components: orient's adjoint, where it ran, turns it back to the input's frame.
    std::vector<double>& sfr = field("gas.sfr_msun_per_yr", 1);
    std::vector<double>& metallicity = field("gas.metallicity", 1);  // 0 where GFM_Metals rule
    std::vector<double>& velocity = field("gas.velocity_kms", 3);
    std::vector<double>* metal_fractions =
        metals ? &field("gas.metals", static_cast<std::size_t>(gas.metals.components())) : nullptr;
    const std::size_t metals_stride = metals ? gas.metals.components() : 0;
    // With a dust stage: dL/d gas.dust_av, the screen in front of each cell, which the dust
    // stage's adjoint carries on to the gas that makes the screens.
    std::vector<double>* dust_av = gas.derived.find(fields::gas_dust_av)
                                       ? &field(fields::gas_dust_av.full_name(), 1)
                                       : nullptr;

    // The cotangent at the lines' windows, spaxel by spaxel in the line sums' layout.
    const LineTotal& total = setup_->total;
    const std::size_t n_spaxels = shape.n_spaxels(),
                      n_wave = static_cast<std::size_t>(shape.n_wave);
    const auto row_columns = static_cast<std::size_t>(total.row_columns);
    std::vector<double> g_windows = large_vector<double>(n_spaxels * row_columns, 0.0);
#pragma omp parallel for schedule(static)
    for (long long si = 0; si < static_cast<long long>(n_spaxels); ++si) {
      const auto s = static_cast<std::size_t>(si);
      for (const LineWindow& w : total.windows)
        std::copy_n(reduced.values().data() + s * n_wave + w.first_bin, w.n_bins,
                    g_windows.data() + s * row_columns + w.offset);
    }
    // cpu devices add straight into the host arrays (each its own cells); a GPU into its own
    // sums (sfr, Z, v_los, X_H, X_O), downloaded and added at the end.
    bool any_cuda = false;
    for (std::size_t d = 0; d < mesh.size(); ++d) any_cuda = any_cuda || mesh.device(d).is_cuda();
    constexpr int kSums = 6;
    ShardedArray<double> sums, g_on;
    if (any_cuda) {
      sums = ShardedArray<double>(mesh, n, kSums, Sharding::sharded());
      for (auto& shard : sums.shards()) shard.buffer.zero();
      g_on = device_put(mesh, g_windows, 1, Sharding::replicated());
    }
    shard_map(mesh, [&](const Device& d) {
      LineDeposit on_device = *run_deposit_;
      on_device.ratio_to_halpha = setup_->ratios.local(d).data;
      on_device.bin_edges = setup_->bin_edges.local(d).data;
      CellLineGradientViews out{};
      if (d.is_cuda()) {
        out = {sums.local(d, 0).data,
               sums.local(d, 1).data,
               sums.local(d, 2).data,
               1,
               metals ? sums.local(d, 3).data : nullptr,
               metals ? sums.local(d, 4).data : nullptr,
               1,
               dust_av ? sums.local(d, 5).data : nullptr};
      } else {
        const std::size_t first = gas.sfr_msun_per_yr.shard(d).range.begin;
        out = {sfr.data() + first,
               metallicity.data() + first,
               velocity.data() + 3 * first + 2,
               3,
               metals ? metal_fractions->data() + first * metals_stride : nullptr,
               metals ? metal_fractions->data() + first * metals_stride + 4 : nullptr,
               metals_stride,
               dust_av ? dust_av->data() + first : nullptr};
      }
      const double* g = d.is_cuda() ? g_on.local(d).data : g_windows.data();
      IFUSIM_DISPATCH(d, gather_emission_line_gradients, d, on_device, gas_views(state, d), g, out);
    });
    if (any_cuda)
      add_device_sums(sums, {{sfr.data(), 1},
                             {metallicity.data(), 1},
                             {velocity.data() + 2, 3},
                             {metals ? metal_fractions->data() : nullptr, metals_stride},
                             {metals ? metal_fractions->data() + 4 : nullptr, metals_stride},
                             {dust_av ? dust_av->data() : nullptr, 1}});
    spdlog::info("emission_lines: gradients of {} gas cells in {:.3f} s", n,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return true;
  }

  void run(RunState& state) override {
    if (!setup_) throw std::logic_error("emission_lines: run before its pass over the gas");
    const Mesh& mesh = state.mesh;
    Gas& gas = state.data.gas;
    const std::size_t n = gas.count();
    const std::size_t n_spaxels = setup_->total.shape.n_spaxels();
    // The first block declares the partials; later ones (a streamed run) add to them.
    PartialArray* sums = sums_.get(state);
    PartialArray* moments = moments_.get(state);
    if (!sums) {
      sums = &sums_.declare(
          state, std::make_unique<PartialArray>(
                     ShardedArray<std::int64_t>(
                         mesh, n_spaxels * static_cast<std::size_t>(setup_->total.row_columns), 1,
                         Sharding::partial()),
                     setup_->line_scale, setup_->total));
      moments = &moments_.declare(
          state, std::make_unique<PartialArray>(
                     ShardedArray<std::int64_t>(mesh, 3 * n_spaxels, 1, Sharding::partial()),
                     setup_->moment_scale, [](RunState& s, std::vector<double> sums_total) {
                       velocity_moment_maps(
                           sums_total, "gas", "H-alpha-weighted",
                           "the star-forming gas (each cell's line width included)", s.maps);
                     }));
    }
    if (n == 0) return;
    require_fields(gas);
    const bool metals = gas.metals.rows() == n;
    LineDeposit deposit = setup_->deposit;
    const auto* dust = state.products.find<DustAttenuation>("dust_attenuation");
    for (int l = 0; l < deposit.n_lines; ++l)
      deposit.lines[l].attenuation_ratio = attenuation_ratio(
          dust ? dust->curve_for_lines() : DustCurve{}, deposit.lines[l].vacuum_angstrom);
    deposit.birth_cloud_av_mag = dust ? dust->line_extra_av_mag : 0.0;
    const ShardedArray<float>* dust_av = gas.derived.find(fields::gas_dust_av);
    // What the deposit applied (the dust's curve and birth clouds), for the adjoint.
    run_deposit_ = deposit;
    shard_map(mesh, [&](const Device& d) {
      LineDeposit on_device = deposit;
      on_device.ratio_to_halpha = setup_->ratios.local(d).data;
      on_device.bin_edges = setup_->bin_edges.local(d).data;
      IFUSIM_DISPATCH(d, accumulate_emission_lines, d, on_device, gas_views(state, d),
                      sums->sums().local(d), moments->sums().local(d));
    });
    spdlog::info("emission_lines: {} gas cells deposited (O/H from {}){}", n,
                 metals ? "GFM_Metals" : "the metallicity",
                 dust_av ? ", dust screen and birth clouds applied" : "");
  }

 private:
  static void require_fields(const Gas& gas) {
    const std::size_t n = gas.count();
    auto require_field = [&](std::size_t rows, const std::string& field, const std::string& tng) {
      if (rows != n)
        throw std::runtime_error("emission_lines: the gas has no " + field + " (the input's " +
                                 tng + "), which the lines need");
    };
    require_field(gas.sfr_msun_per_yr.rows(), "sfr_msun_per_yr", "PartType0/StarFormationRate");
    require_field(gas.velocity_kms.rows(), "velocity_kms", "PartType0/Velocities");
    require_field(gas.metallicity.rows(), "metallicity", "PartType0/GFM_Metallicity");
  }

  // The gas on device d as the kernels read it (the line of sight: velocity's z).
  static GasLineViews gas_views(const RunState& state, const Device& d) {
    const Gas& gas = state.data.gas;
    const bool metals = gas.metals.rows() == gas.count();
    const ShardedArray<float>* dust_av = gas.derived.find(fields::gas_dust_av);
    return {gas.velocity_kms.local(d, 2).data,
            gas.sfr_msun_per_yr.local(d).data,
            gas.metallicity.local(d).data,
            metals ? gas.metals.local(d, 0).data : nullptr,
            metals ? gas.metals.local(d, 4).data : nullptr,
            dust_av ? dust_av->local(d).data : nullptr,
            gas_footprint(gas, state.products.get<SpaxelGrid>("spaxels"), d),
            gas.sfr_msun_per_yr.local(d).size};
  }

  // What the pass over the gas gives: the windows, the deposit's constants, the scales.
  struct Setup {
    LineDeposit deposit;
    LineTotal total;
    ShardedArray<double> ratios;     // LineRatioGrid::ratio_to_halpha, on every device
    ShardedArray<double> bin_edges;  // LineDeposit::bin_edges, on every device
    FixedPointScale line_scale, moment_scale;
  };
  EmissionLineParams params_;
  std::shared_ptr<const LineRatioTable> table_;
  std::size_t n_gas_ = 0;  // the pass so far
  double v_max_kms_ = 0.0, max_sfr_ = 0.0;
  std::optional<Setup> setup_;
  std::optional<LineDeposit> run_deposit_;  // as the last block's deposit applied it
  // Declared by the first block, reduced by the reduction.
  PartialHandle<PartialArray> sums_;     // the line windows
  PartialHandle<PartialArray> moments_;  // the gas's velocity moments
};

}  // namespace

std::unique_ptr<Stage> make_emission_lines_stage(const nlohmann::json& params,
                                                 const std::string& path,
                                                 const StageResources& resources) {
  EmissionLineParams p = EmissionLineParams::from_json(JsonParams(params, path));
  std::shared_ptr<const LineRatioTable> table;
  if (!p.line_ratio_file.empty()) {
    const std::string key = JsonParams(params, path).key_path("line_ratio_file");
    if (!resources.load_line_ratio_table)
      throw ConfigError(key + ": emission_lines was made without a loader of line-ratio tables");
    table = resources.load_line_ratio_table(p.line_ratio_file, key);
  }
  return std::make_unique<EmissionLinesStage>(std::move(p), std::move(table));
}

StageEntry emission_lines_stage() {
  return {.name = "emission_lines",
          .summary =
              "nebular lines of the star-forming gas (Kennicutt H-alpha, Case B, Curti 2020 "
              "metal lines)",
          .kind = StageKind::particle,
          .make =
              [](const nlohmann::json& params, const std::string& path,
                 const StageResources& resources) {
                return make_emission_lines_stage(params, path, resources);
              },
          .quicklooks = {{"halpha_flux.png", {{"flux_halpha", "H-alpha flux"}}, false, true},
                         {"gas_velocity.png",
                          {{"velocity_gas_kms", "Gas line-of-sight velocity (H-alpha-weighted)"}},
                          true,
                          false}},
          .examples = {{{"lines", {"halpha", "hbeta"}}}}};
}

}  // namespace ifusim
