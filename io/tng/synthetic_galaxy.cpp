#include "io/tng/synthetic_galaxy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <stdexcept>
#include <utility>

#include "core/config_error.h"
#include "io/tng/counter_rng.h"
#include "io/tng/tng_convert.h"
#include "io/tng/tng_fields.h"

namespace ifusim::tng {
namespace {

constexpr double kPi = std::numbers::pi;
constexpr double kSolarMetallicity = 0.0127;                  // TNG's Z_sun
constexpr double kEarliestFormationScaleFactor = 1.0 / 21.0;  // z = 20
constexpr double kMinStellarAgeGyr = 0.01;

// Scale factor at cosmic time t: the inverse of Cosmology::cosmic_time_gyr (flat LCDM).
double scale_factor_at(const Cosmology& c, double t_gyr) {
  const double ol = c.omega_lambda, om = c.omega_matter;
  const double x = 1.5 * std::sqrt(ol) * t_gyr / c.hubble_time_gyr();
  return std::pow(std::sinh(x) / std::sqrt(ol / om), 2.0 / 3.0);
}

// Solar mass fractions of C, N, O, Ne, Mg, Si, Fe relative to the total metal mass fraction
// Z = 0.0134, from Asplund et al. (2009, ARA&A 47, 481) photospheric log eps and X = 0.7381.
std::array<double, 7> solar_metal_pattern() {
  const double log_eps[7] = {8.43, 7.83, 8.69, 7.93, 7.60, 7.51, 7.50};
  const double amu[7] = {12.011, 14.007, 15.999, 20.180, 24.305, 28.086, 55.845};
  std::array<double, 7> f{};
  for (int i = 0; i < 7; ++i) f[i] = 0.7381 * std::pow(10.0, log_eps[i] - 12.0) * amu[i] / 0.0134;
  return f;
}

// Everything derived once from a spec.
struct GalaxyModel {
  const SyntheticGalaxySpec& g;
  double a, h, t_snap_gyr, t_earliest_gyr;
  double length_to_ckpc_h, velocity_to_tng, mass_to_code;
  double star_mass_unit_msun = 0, gas_mass_unit_msun = 0;
  std::array<double, 9> rotation{};  // disc frame -> box frame, row-major
  CounterRng star_rng, gas_rng;
  std::array<double, 7> metal_pattern = solar_metal_pattern();

  explicit GalaxyModel(const SyntheticGalaxySpec& spec)
      : g(spec),
        a(spec.scale_factor()),
        h(spec.cosmology.hubble_param),
        t_snap_gyr(spec.cosmology.cosmic_time_gyr(a)),
        t_earliest_gyr(spec.cosmology.cosmic_time_gyr(kEarliestFormationScaleFactor)),
        length_to_ckpc_h(h / a),
        velocity_to_tng(1.0 / std::sqrt(a)),
        mass_to_code(h / 1e10),
        star_rng{mix64(spec.seed ^ 0x5354415253ULL)},  // "STARS"
        gas_rng{mix64(spec.seed ^ 0x474153ULL)} {      // "GAS"
    const double inc = spec.inclination_deg * kPi / 180.0;
    const double pa = spec.position_angle_deg * kPi / 180.0;
    // R = Rz(pa) * Rx(inc)
    const double ci = std::cos(inc), si = std::sin(inc), cp = std::cos(pa), sp = std::sin(pa);
    rotation = {cp, -sp * ci, sp * si, sp, cp * ci, -cp * si, 0.0, si, ci};
    gas_mass_unit_msun = spec.n_gas ? spec.gas_mass_msun / static_cast<double>(spec.n_gas) : 0.0;
    // Stellar mass unit: the total current mass of the non-wind stars should be
    // stellar_mass_msun, the expected remaining-mass fraction estimated from the first (up to)
    // 65536 particles of this same galaxy, so it depends on the spec alone.
    star_mass_unit_msun = 1.0;
    const std::size_t n_est = std::min<std::size_t>(spec.n_stars, 65536);
    double sum = 0;
    std::size_t count = 0;
    for (std::size_t i = 0; i < n_est; ++i) {
      const StarSample s = star(i);
      if (s.wind) continue;
      sum += s.mass_msun;
      ++count;
    }
    const double mean = count ? sum / static_cast<double>(count) : 1.0;
    const double n_non_wind = static_cast<double>(spec.n_stars) * (1.0 - spec.wind_fraction);
    star_mass_unit_msun =
        spec.n_stars ? spec.stellar_mass_msun / (std::max(n_non_wind, 1.0) * mean) : 0.0;
  }

  double circular_velocity_kms(double r_kpc) const {
    return g.v_flat_kms * (2.0 / kPi) * std::atan(r_kpc / g.rotation_turnover_kpc);
  }

  struct StarSample {
    std::array<double, 3> pos_kpc, vel_kms;  // disc frame, relative to the centre
    double mass_msun, initial_mass_msun, metallicity, formation_a;
    bool wind;
  };

  // sech^2 vertical profile: CDF (1 + tanh(z / h)) / 2, inverted.
  static double sech2_height(double h, double u) {
    return h * std::atanh(std::clamp(2.0 * u - 1.0, -0.999999, 0.999999));
  }

  StarSample star(std::uint64_t i) const {
    const CounterRng& rng = star_rng;
    auto u = [&](std::uint64_t d) { return rng.uniform(i, d); };
    StarSample s{};
    s.wind = u(0) < g.wind_fraction;
    const bool bulge = !s.wind && u(1) < g.bulge_fraction;
    const auto n01 = rng.normals(i, 6), n23 = rng.normals(i, 8);
    double age_shape = 1;
    if (bulge) {
      // Hernquist (1990): M(<r)/M = r^2 / (r + a)^2, inverted; truncated at 98% of the mass.
      const double q = std::sqrt(0.98 * u(2));
      const double r = g.bulge_scale_radius_kpc * q / (1.0 - q);
      const double cos_t = 2.0 * u(3) - 1.0, sin_t = std::sqrt(1.0 - cos_t * cos_t);
      const double phi = 2.0 * kPi * u(4);
      s.pos_kpc = {r * sin_t * std::cos(phi), r * sin_t * std::sin(phi), r * cos_t};
      s.vel_kms = {g.bulge_dispersion_kms * n01[0], g.bulge_dispersion_kms * n01[1],
                   g.bulge_dispersion_kms * n23[0]};
      age_shape = 6.0;  // mean age 6/7 of the available time: an old bulge
    } else {
      // Exponential surface density: R ~ Gamma(2, R_d) = -R_d ln(u1 u2).
      const double rd = s.wind ? g.gas_scale_length_kpc : g.disc_scale_length_kpc;
      const double r = -rd * std::log(u(2) * u(3));
      const double phi = 2.0 * kPi * u(4);
      const double z = sech2_height(g.disc_scale_height_kpc * (s.wind ? 3.0 : 1.0), u(5));
      const double vc = circular_velocity_kms(r);
      double v_r, v_phi, v_z;
      if (s.wind) {  // launched vertically out of the disc
        v_r = g.gas_dispersion_kms * n01[0];
        v_phi = vc + g.gas_dispersion_kms * n01[1];
        v_z = std::copysign(g.wind_speed_kms * (0.3 + 0.7 * u(12)), z);
      } else {  // dispersion falling with radius, sigma_phi = 0.7 sigma_R, sigma_z = 0.6 sigma_R
        const double sigma_r = g.disc_dispersion_kms * std::exp(-r / (2.0 * rd));
        v_r = sigma_r * n01[0];
        v_phi = vc + 0.7 * sigma_r * n01[1];
        v_z = 0.6 * sigma_r * n23[0];
      }
      const double c = std::cos(phi), sn = std::sin(phi);
      s.pos_kpc = {r * c, r * sn, z};
      s.vel_kms = {v_r * c - v_phi * sn, v_r * sn + v_phi * c, v_z};
      // Age pdf ~ age^(k-1) on [0, T]: k falls from 3.5 at the centre to 0.5 far out, so the
      // mean age drops from 0.78 T to 0.33 T (inside-out growth).
      age_shape = 0.5 + 3.0 * std::exp(-r / (2.0 * g.disc_scale_length_kpc));
    }
    const double r3 = std::sqrt(s.pos_kpc[0] * s.pos_kpc[0] + s.pos_kpc[1] * s.pos_kpc[1] +
                                s.pos_kpc[2] * s.pos_kpc[2]);
    const double log_z =
        g.central_metallicity_dex + g.metallicity_gradient_dex_per_kpc * r3 + 0.15 * n23[1];
    s.metallicity = std::clamp(kSolarMetallicity * std::pow(10.0, log_z), 1e-5, 0.1);
    const double mass_scatter = 0.75 + 0.5 * u(14);
    if (s.wind) {
      // Wind cells store minus the scale factor of their launch (<= 0), within the last 50 Myr.
      s.formation_a = -scale_factor_at(g.cosmology, t_snap_gyr - 0.05 * u(13));
      s.initial_mass_msun = s.mass_msun = mass_scatter * star_mass_unit_msun;
    } else {
      const double span = t_snap_gyr - t_earliest_gyr;
      const double age = std::max(span * std::pow(u(13), 1.0 / age_shape), kMinStellarAgeGyr);
      s.formation_a = scale_factor_at(g.cosmology, t_snap_gyr - age);
      // Mass returned to the ISM by a Chabrier population (Leitner & Kravtsov 2011, eq. 2):
      // f_ml(t) = 0.046 ln(t / 0.276 Myr + 1).
      const double returned = 0.046 * std::log(age / 2.76e-4 + 1.0);
      s.initial_mass_msun = mass_scatter * star_mass_unit_msun;
      s.mass_msun = s.initial_mass_msun * (1.0 - returned);
    }
    return s;
  }

  // Disc frame (kpc, km/s, relative to the centre) -> TNG box values.
  void to_box(const std::array<double, 3>& pos_kpc, const std::array<double, 3>& vel_kms,
              double* coords_out, float* vel_out) const {
    for (int k = 0; k < 3; ++k) {
      const double p = rotation[3 * k] * pos_kpc[0] + rotation[3 * k + 1] * pos_kpc[1] +
                       rotation[3 * k + 2] * pos_kpc[2];
      const double v = rotation[3 * k] * vel_kms[0] + rotation[3 * k + 1] * vel_kms[1] +
                       rotation[3 * k + 2] * vel_kms[2];
      double x = std::fmod(g.center_ckpc_h[k] + p * length_to_ckpc_h, g.box_size_ckpc_h);
      if (x < 0) x += g.box_size_ckpc_h;
      if (x >= g.box_size_ckpc_h) x = 0.0;  // -tiny + box rounds to box
      coords_out[k] = x;
      vel_out[k] = static_cast<float>((v + g.bulk_velocity_kms[k]) * velocity_to_tng);
    }
  }
};

void check(bool ok, const std::string& key, const std::string& expected) {
  if (!ok) throw ConfigError("synthetic galaxy: " + key + ": expected " + expected);
}

void generate_star_rows_with(const GalaxyModel& m, std::size_t begin, std::size_t end,
                             TngStarRows& out) {
  const std::size_t n = end - begin;
  out.coordinates.resize(3 * n);
  out.velocities.resize(3 * n);
  out.masses.resize(n);
  out.initial_masses.resize(n);
  out.metallicity.resize(n);
  out.formation_time.resize(n);
  out.particle_ids.resize(n);
  const std::int64_t count = static_cast<std::int64_t>(n);
#pragma omp parallel for schedule(static)
  for (std::int64_t j = 0; j < count; ++j) {
    const std::size_t i = begin + static_cast<std::size_t>(j);
    const auto s = m.star(i);
    m.to_box(s.pos_kpc, s.vel_kms, &out.coordinates[3 * j], &out.velocities[3 * j]);
    out.masses[j] = static_cast<float>(s.mass_msun * m.mass_to_code);
    out.initial_masses[j] = static_cast<float>(s.initial_mass_msun * m.mass_to_code);
    out.metallicity[j] = static_cast<float>(s.metallicity);
    out.formation_time[j] = static_cast<float>(s.formation_a);
    out.particle_ids[j] = m.g.first_particle_id + i;
  }
}

void generate_gas_rows_with(const GalaxyModel& m, std::size_t begin, std::size_t end,
                            TngGasRows& out) {
  const SyntheticGalaxySpec& g = m.g;
  const std::size_t n = end - begin;
  out.coordinates.resize(3 * n);
  out.velocities.resize(3 * n);
  out.masses.resize(n);
  out.density.resize(n);
  out.internal_energy.resize(n);
  out.electron_abundance.resize(n);
  out.metallicity.resize(n);
  out.metals.resize(TngGasRows::kMetals * n);
  out.star_formation_rate.resize(n);
  out.particle_ids.resize(n);
  const double rg = g.gas_scale_length_kpc, hg = g.gas_scale_height_kpc;
  const double sigma0_msun_kpc2 = g.gas_mass_msun / (2.0 * kPi * rg * rg);
  const double msun_kpc3_to_g_cm3 = kMsunG / (kKpcCm * kKpcCm * kKpcCm);
  const double rho_to_code = m.a * m.a * m.a / (m.h * m.h) / 1e10;
  const std::int64_t count = static_cast<std::int64_t>(n);
#pragma omp parallel for schedule(static)
  for (std::int64_t j = 0; j < count; ++j) {
    const std::uint64_t i = begin + static_cast<std::size_t>(j);
    const CounterRng& rng = m.gas_rng;
    auto u = [&](std::uint64_t d) { return rng.uniform(i, d); };
    const auto n01 = rng.normals(i, 6), n23 = rng.normals(i, 8), n45 = rng.normals(i, 10);
    const double r = -rg * std::log(u(2) * u(3));
    const double phi = 2.0 * kPi * u(4);
    const double z = GalaxyModel::sech2_height(hg, u(5));
    const double vc = m.circular_velocity_kms(r);
    const double v_r = g.gas_dispersion_kms * n01[0];
    const double v_phi = vc + g.gas_dispersion_kms * n01[1];
    const double c = std::cos(phi), sn = std::sin(phi);
    m.to_box({r * c, r * sn, z},
             {v_r * c - v_phi * sn, v_r * sn + v_phi * c, g.gas_dispersion_kms * n23[0]},
             &out.coordinates[3 * j], &out.velocities[3 * j]);
    const double mass_msun = m.gas_mass_unit_msun * (0.9 + 0.2 * u(14));
    // Midplane density of the exponential, sech^2 disc, with 0.3 dex log-normal clumping.
    const double sech = 1.0 / std::cosh(z / hg);
    const double rho_msun_kpc3 = sigma0_msun_kpc2 * std::exp(-r / rg) * sech * sech / (2.0 * hg) *
                                 std::pow(10.0, 0.3 * n23[1]);
    const double n_h_cm3 =
        kHydrogenMassFraction * rho_msun_kpc3 * msun_kpc3_to_g_cm3 / kProtonMassG;
    // Star-forming gas (n_H > 0.1 cm^-3, Springel & Hernquist 2003) sits on an effective
    // equation of state that warms with density; diffuse gas is warmer the thinner it is.
    const double log_n = std::log10(n_h_cm3 / 0.1);
    const double log_t = log_n > 0 ? std::min(4.0 + 0.5 * log_n + 0.1 * n45[0], 6.0)
                                   : std::min(4.0 - 0.5 * log_n + 0.25 * std::abs(n45[0]), 7.0);
    // Ionised above ~1.3e4 K (n_e/n_H = 1.16 when H and He are fully ionised).
    const double x_e = 1.16 / (1.0 + std::exp(-(log_t - 4.1) / 0.05)) + 1e-4;
    // u = k T / ((gamma - 1) mu m_p): TNG's temperature formula (tng_convert.h) inverted.
    const double u_cgs = kBoltzmannErgPerK * std::pow(10.0, log_t) /
                         ((kAdiabaticIndex - 1.0) * mean_molecular_weight(x_e) * kProtonMassG);
    // SFR = m / t_*, t_* = t_0 (n / n_th)^(-1/2), t_0 = 2.27 Gyr (Springel & Hernquist 2003, with
    // the Illustris/TNG value of t_0).
    const double sfr = log_n > 0 ? mass_msun / (2.27e9 * std::sqrt(0.1 / n_h_cm3)) : 0.0;
    const double rr = std::sqrt(r * r + z * z);
    const double metallicity =
        std::clamp(kSolarMetallicity *
                       std::pow(10.0, g.central_metallicity_dex +
                                          g.metallicity_gradient_dex_per_kpc * rr + 0.1 * n45[1]),
                   1e-5, 0.1);
    out.masses[j] = static_cast<float>(mass_msun * m.mass_to_code);
    out.density[j] = static_cast<float>(rho_msun_kpc3 * rho_to_code);
    out.internal_energy[j] = static_cast<float>(u_cgs / 1e10);
    out.electron_abundance[j] = static_cast<float>(x_e);
    out.metallicity[j] = static_cast<float>(metallicity);
    out.star_formation_rate[j] = static_cast<float>(sfr);
    float* metals = &out.metals[TngGasRows::kMetals * j];
    metals[0] = static_cast<float>(kHydrogenMassFraction * (1.0 - metallicity));
    metals[1] = static_cast<float>((1.0 - kHydrogenMassFraction) * (1.0 - metallicity));
    double tracked = 0;
    for (int k = 0; k < 7; ++k) {
      metals[2 + k] = static_cast<float>(metallicity * m.metal_pattern[k]);
      tracked += m.metal_pattern[k];
    }
    metals[9] = static_cast<float>(metallicity * (1.0 - tracked));
    out.particle_ids[j] = g.first_particle_id + g.n_stars + i;
  }
}

// What the files record about a synthetic galaxy besides its particles.
TngGalaxyRecord record_of(const SyntheticGalaxySpec& spec) {
  TngGalaxyRecord r;
  r.simulation_name = spec.simulation_name;
  r.snapshot = spec.snapshot;
  r.subhalo_id = spec.subhalo_id;
  r.redshift = spec.redshift;
  r.cosmology = spec.cosmology;
  r.omega_baryon = spec.omega_baryon;
  r.box_size_ckpc_h = spec.box_size_ckpc_h;
  r.center_ckpc_h = spec.center_ckpc_h;
  r.n_stars = spec.n_stars;
  r.n_gas = spec.n_gas;
  return r;
}

}  // namespace

// The generator's state: its own copy of the spec, the model derived from it, and its record.
struct SyntheticGalaxyGenerator::Model {
  SyntheticGalaxySpec spec;
  GalaxyModel galaxy;
  TngGalaxyRecord record;
  explicit Model(SyntheticGalaxySpec s)
      : spec(std::move(s)), galaxy(spec), record(record_of(spec)) {}
};

SyntheticGalaxyGenerator::SyntheticGalaxyGenerator(SyntheticGalaxySpec spec) {
  spec.validate();
  model_ = std::make_unique<const Model>(std::move(spec));
}
SyntheticGalaxyGenerator::~SyntheticGalaxyGenerator() = default;

const SyntheticGalaxySpec& SyntheticGalaxyGenerator::spec() const {
  return model_->spec;
}
const TngGalaxyRecord& SyntheticGalaxyGenerator::record() const {
  return model_->record;
}
std::size_t SyntheticGalaxyGenerator::block_rows() const {
  return model_->spec.block_rows;
}

void SyntheticGalaxyGenerator::star_rows(std::size_t begin, std::size_t end,
                                         TngStarRows& out) const {
  if (begin > end || end > model_->spec.n_stars)
    throw std::out_of_range("generate_star_rows: rows outside [0, n_stars)");
  generate_star_rows_with(model_->galaxy, begin, end, out);
}

void SyntheticGalaxyGenerator::gas_rows(std::size_t begin, std::size_t end, TngGasRows& out) const {
  if (begin > end || end > model_->spec.n_gas)
    throw std::out_of_range("generate_gas_rows: rows outside [0, n_gas)");
  generate_gas_rows_with(model_->galaxy, begin, end, out);
}

void SyntheticGalaxySpec::validate(const std::string& key_prefix) const {
  const auto check = [&](bool ok, const std::string& key, const std::string& expected) {
    if (!ok) throw ConfigError(key_prefix + key + ": expected " + expected);
  };
  check(n_stars + n_gas > 0, "n_stars + n_gas", "at least one particle");
  check(n_stars < (std::size_t{1} << 40) && n_gas < (std::size_t{1} << 40), "n_stars, n_gas",
        "fewer than 2^40 particles");
  check(wind_fraction >= 0 && wind_fraction < 1, "wind_fraction", "a value in [0, 1)");
  check(bulge_fraction >= 0 && bulge_fraction <= 1, "bulge_fraction", "a value in [0, 1]");
  check(stellar_mass_msun > 0 && std::isfinite(stellar_mass_msun), "stellar_mass_msun",
        "a positive mass");
  check(gas_mass_msun > 0 && std::isfinite(gas_mass_msun), "gas_mass_msun", "a positive mass");
  for (auto [v, key] : {std::pair{disc_scale_length_kpc, "disc_scale_length_kpc"},
                        {disc_scale_height_kpc, "disc_scale_height_kpc"},
                        {bulge_scale_radius_kpc, "bulge_scale_radius_kpc"},
                        {gas_scale_length_kpc, "gas_scale_length_kpc"},
                        {gas_scale_height_kpc, "gas_scale_height_kpc"},
                        {rotation_turnover_kpc, "rotation_turnover_kpc"}})
    check(v > 0 && std::isfinite(v), key, "a positive length in kpc");
  for (auto [v, key] : {std::pair{v_flat_kms, "v_flat_kms"},
                        {disc_dispersion_kms, "disc_dispersion_kms"},
                        {bulge_dispersion_kms, "bulge_dispersion_kms"},
                        {gas_dispersion_kms, "gas_dispersion_kms"},
                        {wind_speed_kms, "wind_speed_kms"}})
    check(v >= 0 && std::isfinite(v), key, "a non-negative speed in km/s");
  check(std::isfinite(central_metallicity_dex) && central_metallicity_dex < 1.0,
        "central_metallicity_dex", "a finite [Z/H] below 1 dex");
  check(std::isfinite(metallicity_gradient_dex_per_kpc), "metallicity_gradient_dex_per_kpc",
        "a finite gradient");
  check(redshift >= 0 && redshift <= 15, "redshift", "a value in [0, 15]");
  check(cosmology.hubble_param > 0 && cosmology.omega_matter > 0 && cosmology.omega_lambda > 0,
        "cosmology", "positive h, Omega0 and OmegaLambda");
  check(omega_baryon >= 0 && omega_baryon <= cosmology.omega_matter, "omega_baryon",
        "a value in [0, Omega0]");
  check(box_size_ckpc_h > 0 && std::isfinite(box_size_ckpc_h), "box_size_ckpc_h",
        "a positive box size");
  for (int k = 0; k < 3; ++k) {
    check(center_ckpc_h[k] >= 0 && center_ckpc_h[k] < box_size_ckpc_h,
          "center_ckpc_h[" + std::to_string(k) + "]", "a position inside [0, box size)");
    check(std::isfinite(bulk_velocity_kms[k]), "bulk_velocity_kms", "finite velocities");
  }
  // The galaxy must be small against the box, or the periodic wrap would make it ambiguous.
  const double extent_ckpc_h =
      20.0 * std::max({disc_scale_length_kpc, gas_scale_length_kpc, bulge_scale_radius_kpc * 5}) *
      cosmology.hubble_param * (1.0 + redshift);
  check(extent_ckpc_h < 0.5 * box_size_ckpc_h, "box_size_ckpc_h",
        "a box larger than twice 20 disc scale lengths (" + std::to_string(2 * extent_ckpc_h) +
            " ckpc/h)");
  check(first_particle_id >= 1 &&
            first_particle_id < std::numeric_limits<std::uint64_t>::max() - n_stars - n_gas,
        "first_particle_id", "an ID >= 1 leaving room for all particles");
  check(block_rows >= 1, "block_rows", "at least 1 row per block");
  check(snapshot >= 0 && snapshot <= 999, "snapshot", "a snapshot number in [0, 999]");
  check(subhalo_id >= 0 && subhalo_id <= std::numeric_limits<std::int32_t>::max(), "subhalo_id",
        "a non-negative int32");
}

void SyntheticSnapshotSpec::validate() const {
  // Every part with particles: a valid galaxy, and ParticleIDs ranges that do not overlap. The
  // layout (groups, chunks, one epoch and box) is the writer's to check (tng_writer.h).
  std::vector<std::pair<const SyntheticGalaxySpec*, std::string>> parts;
  for (std::size_t s = 0; s < subhalos.size(); ++s)
    parts.emplace_back(&subhalos[s], "subhalos[" + std::to_string(s) + "]");
  for (std::size_t g = 0; g < group_fuzz.size(); ++g)
    if (group_fuzz[g].n_stars + group_fuzz[g].n_gas > 0)
      parts.emplace_back(&group_fuzz[g], "group_fuzz[" + std::to_string(g) + "]");
  if (unassociated.n_stars + unassociated.n_gas > 0)
    parts.emplace_back(&unassociated, "unassociated");
  for (const auto& [g, key] : parts) {
    try {
      g->validate();
    } catch (const ConfigError& e) {
      throw ConfigError(key + ": " + e.what());
    }
  }
  auto by_id = parts;
  std::sort(by_id.begin(), by_id.end(), [](const auto& x, const auto& y) {
    return x.first->first_particle_id < y.first->first_particle_id;
  });
  for (std::size_t i = 1; i < by_id.size(); ++i) {
    const auto* lo = by_id[i - 1].first;
    check(lo->first_particle_id + lo->n_stars + lo->n_gas <= by_id[i].first->first_particle_id,
          by_id[i].second + ".first_particle_id",
          "a ParticleIDs range not overlapping " + by_id[i - 1].second + "'s");
  }
}

void generate_star_rows(const SyntheticGalaxySpec& galaxy, std::size_t begin, std::size_t end,
                        TngStarRows& out) {
  SyntheticGalaxyGenerator(galaxy).star_rows(begin, end, out);
}

void generate_gas_rows(const SyntheticGalaxySpec& galaxy, std::size_t begin, std::size_t end,
                       TngGasRows& out) {
  SyntheticGalaxyGenerator(galaxy).gas_rows(begin, end, out);
}

SyntheticSnapshotSpec make_snapshot_spec(const SyntheticGalaxySpec& central, int n_subhalos,
                                         int n_groups, int n_chunks, double fuzz_fraction) {
  check(n_subhalos >= 1, "subhalos", "at least one subhalo");
  check(n_groups >= 1 && n_groups <= n_subhalos, "groups", "between 1 and the number of subhalos");
  check(fuzz_fraction >= 0 && fuzz_fraction <= 1, "fuzz_fraction", "a value in [0, 1]");
  SyntheticSnapshotSpec spec;
  spec.snapshot = central.snapshot;
  spec.n_chunks = n_chunks;
  spec.simulation_name = central.simulation_name;
  // Subhalos dealt to groups in order: the first n_subhalos % n_groups groups get one more.
  for (int grp = 0; grp < n_groups; ++grp) {
    const int n_in = n_subhalos / n_groups + (grp < n_subhalos % n_groups ? 1 : 0);
    for (int k = 0; k < n_in; ++k) spec.group_of_subhalo.push_back(grp);
  }
  std::uint64_t next_id = central.first_particle_id;
  const double a = central.scale_factor(), h = central.cosmology.hubble_param;
  const auto place = [&](SyntheticGalaxySpec& g, const std::array<double, 3>& from, double kpc,
                         const std::array<double, 3>& dir) {
    for (int k = 0; k < 3; ++k) {
      double x = std::fmod(from[k] + kpc * dir[k] * h / a, central.box_size_ckpc_h);
      if (x < 0) x += central.box_size_ckpc_h;
      g.center_ckpc_h[k] = x >= central.box_size_ckpc_h ? 0.0 : x;
    }
  };
  std::array<double, 3> group_center = central.center_ckpc_h;
  for (int s = 0; s < n_subhalos; ++s) {
    SyntheticGalaxySpec g = central;
    g.subhalo_id = s;
    if (s > 0) {
      // A smaller companion: masses, counts and sizes scaled down, its own random numbers.
      const double f = 1.0 / (4.0 * s);
      g.seed = mix64(central.seed + static_cast<std::uint64_t>(s));
      g.n_stars = std::max<std::size_t>(10, static_cast<std::size_t>(central.n_stars * f));
      g.n_gas = central.n_gas
                    ? std::max<std::size_t>(10, static_cast<std::size_t>(central.n_gas * f))
                    : 0;
      g.stellar_mass_msun *= f;
      g.gas_mass_msun *= f;
      const double shrink = std::sqrt(f);
      g.disc_scale_length_kpc *= shrink;
      g.gas_scale_length_kpc *= shrink;
      g.bulge_scale_radius_kpc *= shrink;
      g.v_flat_kms *= std::pow(f, 0.25);  // Tully-Fisher-like, M ~ v^4
      g.inclination_deg = central.inclination_deg + 37.0 * s;
      g.position_angle_deg = central.position_angle_deg + 71.0 * s;
      // Satellites sit 60-200 kpc from their group's central; the centrals of later groups
      // 1-2 Mpc beyond the previous group's.
      const bool new_group = spec.group_of_subhalo[s] != spec.group_of_subhalo[s - 1];
      const double dist_kpc = new_group ? 1000.0 + 500.0 * s : 60.0 + 35.0 * s;
      const double theta = 2.399963 * s;  // golden angle: directions do not repeat
      const std::array<double, 3> dir = {std::cos(theta) * 0.8, std::sin(theta) * 0.8, 0.6};
      place(g, group_center, dist_kpc, dir);
      if (new_group) group_center = g.center_ckpc_h;
      for (int k = 0; k < 3; ++k)
        g.bulk_velocity_kms[k] = central.bulk_velocity_kms[k] + 150.0 * dir[(k + 1) % 3];
    }
    g.first_particle_id = next_id;
    next_id += g.n_stars + g.n_gas;
    spec.subhalos.push_back(g);
  }
  if (fuzz_fraction > 0) {
    // A diffuse, hot spheroid of stars and gas around each group's central: its fuzz.
    const auto diffuse = [&](const SyntheticGalaxySpec& host, std::uint64_t salt, double radius) {
      SyntheticGalaxySpec g = host;
      g.seed = mix64(central.seed ^ salt);
      g.n_stars = host.n_stars ? std::max<std::size_t>(
                                     10, static_cast<std::size_t>(host.n_stars * fuzz_fraction))
                               : 0;
      g.n_gas = host.n_gas ? std::max<std::size_t>(
                                 10, static_cast<std::size_t>(host.n_gas * fuzz_fraction))
                           : 0;
      g.stellar_mass_msun = host.stellar_mass_msun * fuzz_fraction;
      g.gas_mass_msun = host.gas_mass_msun * fuzz_fraction;
      g.bulge_fraction = 1.0;
      g.wind_fraction = 0.0;
      g.bulge_scale_radius_kpc = radius;
      g.bulge_dispersion_kms = 150.0;
      g.gas_scale_length_kpc = radius;
      g.gas_scale_height_kpc = radius;
      g.first_particle_id = next_id;
      next_id += g.n_stars + g.n_gas;
      return g;
    };
    for (int grp = 0; grp < n_groups; ++grp) {
      const auto it = std::find(spec.group_of_subhalo.begin(), spec.group_of_subhalo.end(), grp);
      const auto& host = spec.subhalos[it - spec.group_of_subhalo.begin()];
      spec.group_fuzz.push_back(
          diffuse(host, 0x46555A5AULL + grp, 10.0 * host.bulge_scale_radius_kpc));
    }
    spec.unassociated = diffuse(central, 0x4F55544552ULL, 50.0);  // "OUTER"
    place(spec.unassociated, central.center_ckpc_h, 2000.0, {0.0, -0.6, 0.8});
  }
  return spec;
}

}  // namespace ifusim::tng
