#include "io/tng/synthetic_galaxy.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <numbers>
#include <stdexcept>
#include <utility>

#include "core/config_error.h"
#include "io/hdf5.h"
#include "io/tng/tng_convert.h"
#include "io/tng/tng_fields.h"

namespace ifusim::tng {
namespace {

constexpr double kPi = std::numbers::pi;
constexpr double kSolarMetallicity = 0.0127;                  // TNG's Z_sun
constexpr double kEarliestFormationScaleFactor = 1.0 / 21.0;  // z = 20
constexpr double kMinStellarAgeGyr = 0.01;
constexpr UnitAttributes kDimensionless{0.0, 0.0, 0.0};  // ParticleIDs (not in the field table)

// splitmix64's finaliser (Steele, Lea & Flood 2014): a bijective 64-bit mixer. Hashing
// (key, particle index, draw) gives every particle its own random numbers, so any block of
// particles can be generated on its own (a counter-based generator, cf. Salmon et al. 2011).
inline std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct CounterRng {
  std::uint64_t key;
  // Uniform in the open interval (0, 1).
  double uniform(std::uint64_t index, std::uint64_t draw) const {
    const std::uint64_t h = mix64(mix64(key ^ mix64(index)) + draw * 0xd6e8feb86659fd93ULL);
    return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
  }
  // Two standard normals (Box & Muller 1958).
  std::array<double, 2> normals(std::uint64_t index, std::uint64_t draw) const {
    const double r = std::sqrt(-2.0 * std::log(uniform(index, draw)));
    const double t = 2.0 * kPi * uniform(index, draw + 1);
    return {r * std::cos(t), r * std::sin(t)};
  }
};

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

// The field table's (the data specification's) unit attributes of a dataset.
UnitAttributes units_of(Species species, const char* dataset) {
  return field_rule(species, dataset).tng_units;
}

// --- HDF5 output ------------------------------------------------------------------------------

template <class T>
void create_field(const h5::Location& g, const std::string& name, hsize_t n, hsize_t components,
                  UnitAttributes u) {
  if (components == 1)
    g.create<T>(name, {n});
  else
    g.create<T>(name, {n, components});
  g.set_attribute<double>("a_scaling", u.a_scaling, name);
  g.set_attribute<double>("h_scaling", u.h_scaling, name);
  g.set_attribute<double>("to_cgs", u.to_cgs, name);
}

void create_star_fields(const h5::Location& g, hsize_t n) {
  const auto u = [](const char* dataset) { return units_of(Species::stars, dataset); };
  create_field<double>(g, "Coordinates", n, 3, u("Coordinates"));
  create_field<float>(g, "GFM_InitialMass", n, 1, u("GFM_InitialMass"));
  create_field<float>(g, "GFM_Metallicity", n, 1, u("GFM_Metallicity"));
  create_field<float>(g, "GFM_StellarFormationTime", n, 1, u("GFM_StellarFormationTime"));
  create_field<float>(g, "Masses", n, 1, u("Masses"));
  create_field<std::uint64_t>(g, "ParticleIDs", n, 1, kDimensionless);
  create_field<float>(g, "Velocities", n, 3, u("Velocities"));
}

void create_gas_fields(const h5::Location& g, hsize_t n) {
  const auto u = [](const char* dataset) { return units_of(Species::gas, dataset); };
  create_field<double>(g, "Coordinates", n, 3, u("Coordinates"));
  create_field<float>(g, "Density", n, 1, u("Density"));
  create_field<float>(g, "ElectronAbundance", n, 1, u("ElectronAbundance"));
  create_field<float>(g, "GFM_Metallicity", n, 1, u("GFM_Metallicity"));
  create_field<float>(g, "GFM_Metals", n, TngGasRows::kMetals, u("GFM_Metals"));
  create_field<float>(g, "InternalEnergy", n, 1, u("InternalEnergy"));
  create_field<float>(g, "Masses", n, 1, u("Masses"));
  create_field<std::uint64_t>(g, "ParticleIDs", n, 1, kDimensionless);
  create_field<float>(g, "StarFormationRate", n, 1, u("StarFormationRate"));
  create_field<float>(g, "Velocities", n, 3, u("Velocities"));
}

void write_star_block(const h5::Location& g, hsize_t row, const TngStarRows& r) {
  const hsize_t n = r.size();
  g.write_rows<double>("Coordinates", row, r.coordinates.data(), n);
  g.write_rows<float>("GFM_InitialMass", row, r.initial_masses.data(), n);
  g.write_rows<float>("GFM_Metallicity", row, r.metallicity.data(), n);
  g.write_rows<float>("GFM_StellarFormationTime", row, r.formation_time.data(), n);
  g.write_rows<float>("Masses", row, r.masses.data(), n);
  g.write_rows<std::uint64_t>("ParticleIDs", row, r.particle_ids.data(), n);
  g.write_rows<float>("Velocities", row, r.velocities.data(), n);
}

void write_gas_block(const h5::Location& g, hsize_t row, const TngGasRows& r) {
  const hsize_t n = r.size();
  g.write_rows<double>("Coordinates", row, r.coordinates.data(), n);
  g.write_rows<float>("Density", row, r.density.data(), n);
  g.write_rows<float>("ElectronAbundance", row, r.electron_abundance.data(), n);
  g.write_rows<float>("GFM_Metallicity", row, r.metallicity.data(), n);
  g.write_rows<float>("GFM_Metals", row, r.metals.data(), n);
  g.write_rows<float>("InternalEnergy", row, r.internal_energy.data(), n);
  g.write_rows<float>("Masses", row, r.masses.data(), n);
  g.write_rows<std::uint64_t>("ParticleIDs", row, r.particle_ids.data(), n);
  g.write_rows<float>("StarFormationRate", row, r.star_formation_rate.data(), n);
  g.write_rows<float>("Velocities", row, r.velocities.data(), n);
}

struct HeaderInfo {
  const SyntheticGalaxySpec* galaxy;  // cosmology, redshift, box
  int snapshot;
  std::string simulation_name;
  int num_files;
  std::array<std::uint64_t, 6> this_file{}, total{};
};

void write_snapshot_header(const h5::Location& root, const HeaderInfo& info) {
  const SyntheticGalaxySpec& g = *info.galaxy;
  const h5::Location h = root.create_group("Header");
  h.set_attribute<double>("BoxSize", g.box_size_ckpc_h);
  h.set_attribute<std::int32_t>("Flag_Cooling", 1);
  h.set_attribute<std::int32_t>("Flag_DoublePrecision", 0);
  h.set_attribute<std::int32_t>("Flag_Feedback", 1);
  h.set_attribute<std::int32_t>("Flag_Metals", 10);
  h.set_attribute<std::int32_t>("Flag_Sfr", 1);
  h.set_attribute<std::int32_t>("Flag_StellarAge", 1);
  h.set_attribute<double>("HubbleParam", g.cosmology.hubble_param);
  h.set_attribute_array<double>("MassTable", {0, 0, 0, 0, 0, 0});
  h.set_attribute<std::int32_t>("NumFilesPerSnapshot", info.num_files);
  std::vector<std::int32_t> this_file(6);
  std::vector<std::uint32_t> total_low(6), total_high(6);
  for (int t = 0; t < 6; ++t) {
    if (info.this_file[t] > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max()))
      throw ConfigError("synthetic snapshot: more than 2^31-1 particles of type " +
                        std::to_string(t) + " in one file (TNG's NumPart_ThisFile is int32)");
    this_file[t] = static_cast<std::int32_t>(info.this_file[t]);
    total_low[t] = static_cast<std::uint32_t>(info.total[t] & 0xffffffffULL);
    total_high[t] = static_cast<std::uint32_t>(info.total[t] >> 32);
  }
  h.set_attribute_array<std::int32_t>("NumPart_ThisFile", this_file);
  h.set_attribute_array<std::uint32_t>("NumPart_Total", total_low);
  h.set_attribute_array<std::uint32_t>("NumPart_Total_HighWord", total_high);
  h.set_attribute<double>("Omega0", g.cosmology.omega_matter);
  h.set_attribute<double>("OmegaBaryon", g.omega_baryon);
  h.set_attribute<double>("OmegaLambda", g.cosmology.omega_lambda);
  h.set_attribute<double>("Redshift", g.redshift);
  h.set_string_attribute("RunLabel", "IllustrisTNG-format synthetic galaxy (ifusim make-galaxy)");
  h.set_string_attribute("SimulationName", info.simulation_name);
  h.set_attribute<std::int32_t>("SnapshotNumber", info.snapshot);
  h.set_attribute<double>("Time", g.scale_factor());
  h.set_attribute<double>("UnitLength_in_cm", 3.085678e21);
  h.set_attribute<double>("UnitMass_in_g", 1.989e43);
  h.set_attribute<double>("UnitVelocity_in_cm_per_s", 1e5);
}

std::string temp_suffix() {
  return ".tmp-ifusim-" + std::to_string(::getpid());
}

std::string three_digits(int n) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%03d", n);
  return buf;
}

// Catalog sums of one segment of the particle arrays (a subhalo, a group's fuzz, or the
// unassociated particles), accumulated serially in particle order so that they do not depend on
// the block size. Radius histograms live only while the segment is being written: memory stays
// bounded by the segments that straddle the write position.
struct SegmentStats {
  std::array<std::uint64_t, 6> expected{}, count{};
  std::array<double, 6> mass_msun{}, half_mass_kpc{};
  double sfr_msun_yr = 0, half_mass_all_kpc = 0;
  std::array<double, 3> mass_pos{}, mass_vel{};  // sum m * (x - centre) [kpc], m * v [km/s]
  std::array<std::vector<double>, 6> hist;
  std::vector<double> hist_all;

  double mass_all_msun() const {
    double m = 0;
    for (double x : mass_msun) m += x;
    return m;
  }
  void add(int type, double m, const std::array<double, 3>& d_kpc,
           const std::array<double, 3>& v_kms) {
    if (hist[type].empty()) hist[type].assign(kRadiusBins, 0.0);
    if (hist_all.empty()) hist_all.assign(kRadiusBins, 0.0);
    ++count[type];
    mass_msun[type] += m;
    for (int k = 0; k < 3; ++k) {
      mass_pos[k] += m * d_kpc[k];
      mass_vel[k] += m * v_kms[k];
    }
    const int bin =
        radius_bin(std::sqrt(d_kpc[0] * d_kpc[0] + d_kpc[1] * d_kpc[1] + d_kpc[2] * d_kpc[2]));
    hist[type][bin] += m;
    hist_all[bin] += m;
    if (count[type] == expected[type]) {
      half_mass_kpc[type] = half_mass_radius_kpc(hist[type]);
      std::vector<double>().swap(hist[type]);
    }
    if (count == expected) {
      half_mass_all_kpc = half_mass_radius_kpc(hist_all);
      std::vector<double>().swap(hist_all);
    }
  }
};

// Box frame physical offsets of TNG rows from the galaxy centre (periodic).
std::array<double, 3> physical_offset_kpc(const GalaxyModel& m, const double* coords) {
  std::array<double, 3> d{};
  const double box = m.g.box_size_ckpc_h;
  for (int k = 0; k < 3; ++k) {
    double x = coords[k] - m.g.center_ckpc_h[k];
    x -= box * std::round(x / box);
    d[k] = x / m.length_to_ckpc_h;
  }
  return d;
}

std::array<double, 3> physical_velocity_kms(const GalaxyModel& m, const float* v) {
  return {v[0] / m.velocity_to_tng, v[1] / m.velocity_to_tng, v[2] / m.velocity_to_tng};
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

// Writes the particles [begin, end) of a galaxy's type at `row` of an open particle group, in
// blocks; accumulates stats when given.
void write_stars(const GalaxyModel& m, const h5::Location& group, std::size_t begin,
                 std::size_t end, hsize_t row, SegmentStats* stats) {
  TngStarRows rows;
  for (std::size_t b = begin; b < end; b += m.g.block_rows) {
    const std::size_t e = std::min(end, b + m.g.block_rows);
    generate_star_rows_with(m, b, e, rows);
    write_star_block(group, row + (b - begin), rows);
    if (stats)
      for (std::size_t j = 0; j < rows.size(); ++j)
        stats->add(4, rows.masses[j] * 1e10 / m.h, physical_offset_kpc(m, &rows.coordinates[3 * j]),
                   physical_velocity_kms(m, &rows.velocities[3 * j]));
  }
}

void write_gas(const GalaxyModel& m, const h5::Location& group, std::size_t begin, std::size_t end,
               hsize_t row, SegmentStats* stats) {
  TngGasRows rows;
  for (std::size_t b = begin; b < end; b += m.g.block_rows) {
    const std::size_t e = std::min(end, b + m.g.block_rows);
    generate_gas_rows_with(m, b, e, rows);
    write_gas_block(group, row + (b - begin), rows);
    if (stats)
      for (std::size_t j = 0; j < rows.size(); ++j) {
        stats->add(0, rows.masses[j] * 1e10 / m.h, physical_offset_kpc(m, &rows.coordinates[3 * j]),
                   physical_velocity_kms(m, &rows.velocities[3 * j]));
        stats->sfr_msun_yr += rows.star_formation_rate[j];
      }
  }
}

// Removes a temporary path (file or folder) unless released: no partial output on errors.
class TempPath {
 public:
  explicit TempPath(std::filesystem::path p) : path_(std::move(p)) {}
  ~TempPath() {
    if (!released_) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;
  const std::filesystem::path& path() const { return path_; }
  void release() { released_ = true; }

 private:
  std::filesystem::path path_;
  bool released_ = false;
};

}  // namespace

int radius_bin(double r_kpc) {
  const double x = (std::log10(std::max(r_kpc, 1e-3)) + 3.0) / 6.0 * kRadiusBins;
  return std::clamp(static_cast<int>(x), 0, kRadiusBins - 1);
}

double half_mass_radius_kpc(const std::vector<double>& mass_per_bin) {
  const auto& hist = mass_per_bin;
  double total = 0;
  for (double m : hist) total += m;
  if (!(total > 0)) return 0.0;
  double cum = 0;
  for (int b = 0; b < kRadiusBins; ++b) {
    if (cum + hist[b] >= 0.5 * total) {
      const double f = hist[b] > 0 ? (0.5 * total - cum) / hist[b] : 0.0;
      return std::pow(10.0, -3.0 + 6.0 * (b + f) / kRadiusBins);
    }
    cum += hist[b];
  }
  return 1e3;
}

// The generator's state: its own copy of the spec, and the model derived from it.
struct SyntheticGalaxyGenerator::Model {
  SyntheticGalaxySpec spec;
  GalaxyModel galaxy;
  explicit Model(SyntheticGalaxySpec s) : spec(std::move(s)), galaxy(spec) {}
};

SyntheticGalaxyGenerator::SyntheticGalaxyGenerator(SyntheticGalaxySpec spec) {
  spec.validate();
  model_ = std::make_unique<const Model>(std::move(spec));
}
SyntheticGalaxyGenerator::~SyntheticGalaxyGenerator() = default;

const SyntheticGalaxySpec& SyntheticGalaxyGenerator::spec() const {
  return model_->spec;
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
  check(!subhalos.empty(), "subhalos", "at least one subhalo");
  check(n_chunks >= 1 && n_chunks <= 4096, "n_chunks", "a chunk count in [1, 4096]");
  check(snapshot >= 0 && snapshot <= 999, "snapshot", "a snapshot number in [0, 999]");
  check(group_of_subhalo.empty() || group_of_subhalo.size() == subhalos.size(), "group_of_subhalo",
        "one group index per subhalo (or none)");
  for (std::size_t s = 0; s < group_of_subhalo.size(); ++s) {
    const int prev = s == 0 ? 0 : group_of_subhalo[s - 1];
    check(group_of_subhalo[s] == prev || group_of_subhalo[s] == prev + 1,
          "group_of_subhalo[" + std::to_string(s) + "]",
          "group indices non-decreasing from 0 without gaps");
  }
  check(group_fuzz.empty() || group_fuzz.size() == static_cast<std::size_t>(n_groups()),
        "group_fuzz", "one entry per FoF group (or none)");
  // Every part with particles: valid, same epoch and box, int32-sized, disjoint IDs.
  std::vector<std::pair<const SyntheticGalaxySpec*, std::string>> parts;
  for (std::size_t s = 0; s < subhalos.size(); ++s)
    parts.emplace_back(&subhalos[s], "subhalos[" + std::to_string(s) + "]");
  for (std::size_t g = 0; g < group_fuzz.size(); ++g)
    if (group_fuzz[g].n_stars + group_fuzz[g].n_gas > 0)
      parts.emplace_back(&group_fuzz[g], "group_fuzz[" + std::to_string(g) + "]");
  if (unassociated.n_stars + unassociated.n_gas > 0)
    parts.emplace_back(&unassociated, "unassociated");
  const SyntheticGalaxySpec& first = subhalos.front();
  for (const auto& [g, key] : parts) {
    try {
      g->validate();
    } catch (const ConfigError& e) {
      throw ConfigError(key + ": " + e.what());
    }
    check(g->redshift == first.redshift && g->box_size_ckpc_h == first.box_size_ckpc_h &&
              g->cosmology.hubble_param == first.cosmology.hubble_param &&
              g->cosmology.omega_matter == first.cosmology.omega_matter &&
              g->cosmology.omega_lambda == first.cosmology.omega_lambda,
          key, "the same redshift, box size and cosmology as subhalos[0]");
    check(g->n_stars <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()) &&
              g->n_gas <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
          key + ".n_stars", "at most 2^31-1 particles per type (SubhaloLenType is int32)");
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

std::string snapshot_chunk_path(const std::string& base_dir, int snapshot, int chunk) {
  const std::string nnn = three_digits(snapshot);
  return (std::filesystem::path(base_dir) / ("snapdir_" + nnn) /
          ("snap_" + nnn + "." + std::to_string(chunk) + ".hdf5"))
      .string();
}
std::string group_catalog_chunk_path(const std::string& base_dir, int snapshot, int chunk) {
  const std::string nnn = three_digits(snapshot);
  return (std::filesystem::path(base_dir) / ("groups_" + nnn) /
          ("fof_subhalo_tab_" + nnn + "." + std::to_string(chunk) + ".hdf5"))
      .string();
}
std::string offsets_path(const std::string& base_dir, int snapshot) {
  return (std::filesystem::path(base_dir) / ("offsets_" + three_digits(snapshot) + ".hdf5"))
      .string();
}

void write_tng_cutout(const std::string& path, const SyntheticGalaxySpec& galaxy) {
  galaxy.validate();
  const GalaxyModel model(galaxy);
  TempPath tmp(path + temp_suffix());
  {
    h5::File f(tmp.path().string(), h5::File::Mode::truncate);
    HeaderInfo info{&galaxy, galaxy.snapshot, galaxy.simulation_name, 1, {}, {}};
    info.this_file[0] = info.total[0] = galaxy.n_gas;
    info.this_file[4] = info.total[4] = galaxy.n_stars;
    write_snapshot_header(f, info);
    const h5::Location header = f.group("Header");
    header.set_attribute<std::int32_t>("CutoutID", static_cast<std::int32_t>(galaxy.subhalo_id));
    header.set_string_attribute("CutoutType", "subhalo");
    header.set_string_attribute(
        "CutoutRequest",
        "PartType0=Coordinates,Density,ElectronAbundance,GFM_Metallicity,GFM_Metals,"
        "InternalEnergy,Masses,ParticleIDs,StarFormationRate,Velocities+PartType4=Coordinates,"
        "GFM_InitialMass,GFM_Metallicity,GFM_StellarFormationTime,Masses,ParticleIDs,Velocities");
    if (galaxy.n_gas > 0) {
      const h5::Location g = f.create_group("PartType0");
      create_gas_fields(g, galaxy.n_gas);
      write_gas(model, g, 0, galaxy.n_gas, 0, nullptr);
    }
    if (galaxy.n_stars > 0) {
      const h5::Location g = f.create_group("PartType4");
      create_star_fields(g, galaxy.n_stars);
      write_stars(model, g, 0, galaxy.n_stars, 0, nullptr);
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp.path(), path, ec);
  if (ec)
    throw InputError(path + ": cannot move the finished cutout into place (" + ec.message() + ")");
  tmp.release();
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

void write_tng_snapshot(const std::string& base_dir, const SyntheticSnapshotSpec& spec) {
  spec.validate();
  namespace fs = std::filesystem;
  const std::string nnn = three_digits(spec.snapshot);
  const fs::path base(base_dir);
  const std::vector<std::string> outputs = {"snapdir_" + nnn, "groups_" + nnn,
                                            "offsets_" + nnn + ".hdf5"};
  for (const auto& o : outputs)
    if (fs::exists(base / o))
      throw InputError((base / o).string() +
                       ": already exists (remove it first; make-galaxy "
                       "does not overwrite snapshots)");
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) throw InputError(base_dir + ": cannot create the output folder (" + ec.message() + ")");
  TempPath tmp(base / (".snapshot_" + nnn + temp_suffix()));
  fs::create_directories(tmp.path() / outputs[0], ec);
  fs::create_directories(tmp.path() / outputs[1], ec);
  if (ec) throw InputError(tmp.path().string() + ": cannot create folders (" + ec.message() + ")");
  const std::string tmp_base = tmp.path().string();

  const std::size_t n_sub = spec.subhalos.size();
  std::vector<int> group_of(n_sub, 0);
  if (!spec.group_of_subhalo.empty()) group_of = spec.group_of_subhalo;
  const int n_groups = spec.n_groups();
  std::vector<int> first_sub(n_groups, -1), n_subs(n_groups, 0);
  for (std::size_t s = 0; s < n_sub; ++s) {
    if (first_sub[group_of[s]] < 0) first_sub[group_of[s]] = static_cast<int>(s);
    ++n_subs[group_of[s]];
  }

  // The segments of each type's global array, in TNG order: per group its subhalos then its
  // fuzz; the unassociated particles last.
  struct Segment {
    const SyntheticGalaxySpec* galaxy;
    int subhalo;  // -1: not a subhalo
    int group;    // -1: in no group
    std::array<std::uint64_t, 6> len{}, offset{};
    SegmentStats stats;
  };
  std::vector<Segment> segments;
  std::vector<std::size_t> segment_of_subhalo(n_sub);
  const auto add_segment = [&](const SyntheticGalaxySpec& g, int subhalo, int group) {
    if (g.n_stars + g.n_gas == 0) return;
    Segment seg{&g, subhalo, group, {}, {}, {}};
    seg.len[0] = g.n_gas;
    seg.len[4] = g.n_stars;
    seg.stats.expected = seg.len;
    segments.push_back(std::move(seg));
  };
  for (int grp = 0; grp < n_groups; ++grp) {
    for (int s = first_sub[grp]; s < first_sub[grp] + n_subs[grp]; ++s) {
      segment_of_subhalo[s] = segments.size();
      add_segment(spec.subhalos[s], s, grp);
    }
    if (!spec.group_fuzz.empty()) add_segment(spec.group_fuzz[grp], -1, grp);
  }
  add_segment(spec.unassociated, -1, -1);
  std::array<std::uint64_t, 6> total{};
  for (auto& seg : segments) {
    seg.offset = total;
    for (int t = 0; t < 6; ++t) total[t] += seg.len[t];
  }
  std::vector<std::array<std::uint64_t, 6>> sub_offset(n_sub);
  for (std::size_t s = 0; s < n_sub; ++s) sub_offset[s] = segments[segment_of_subhalo[s]].offset;

  constexpr int kTypes[2] = {0, 4};
  const auto chunk_begin = [&](int t, int k) {
    return static_cast<std::uint64_t>(static_cast<unsigned __int128>(total[t]) * k / spec.n_chunks);
  };
  for (int t = 0; t < 6; ++t)
    if (total[t] / spec.n_chunks >=
        static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max()))
      throw ConfigError(
          "n_chunks: expected enough chunks to keep each file below 2^31 particles "
          "of type " +
          std::to_string(t) + " (TNG's NumPart_ThisFile is int32)");

  // Snapshot chunks, accumulating each segment's stats in global particle order.
  const SyntheticGalaxySpec& first = spec.subhalos.front();
  for (int k = 0; k < spec.n_chunks; ++k) {
    h5::File f(snapshot_chunk_path(tmp_base, spec.snapshot, k), h5::File::Mode::truncate);
    HeaderInfo info{&first, spec.snapshot, spec.simulation_name, spec.n_chunks, {}, total};
    for (int t : kTypes) info.this_file[t] = chunk_begin(t, k + 1) - chunk_begin(t, k);
    write_snapshot_header(f, info);
    for (int t : kTypes) {
      const std::uint64_t lo = chunk_begin(t, k), hi = chunk_begin(t, k + 1);
      if (hi == lo) continue;  // TNG omits the group of a type with no particles in this file
      const h5::Location grp = f.create_group("PartType" + std::to_string(t));
      if (t == 0)
        create_gas_fields(grp, hi - lo);
      else
        create_star_fields(grp, hi - lo);
      for (auto& seg : segments) {
        const std::uint64_t s_lo = seg.offset[t], s_hi = s_lo + seg.len[t];
        const std::uint64_t b = std::max(lo, s_lo), e = std::min(hi, s_hi);
        if (b >= e) continue;
        const GalaxyModel model(*seg.galaxy);
        if (t == 0)
          write_gas(model, grp, b - s_lo, e - s_lo, b - lo, &seg.stats);
        else
          write_stars(model, grp, b - s_lo, e - s_lo, b - lo, &seg.stats);
      }
    }
  }

  // Catalog values per subhalo and per group (a group's sums include its fuzz).
  const double a = first.scale_factor(), h = first.cosmology.hubble_param;
  const double box = first.box_size_ckpc_h;
  const double msun_to_code = h / 1e10, kpc_to_ckpc_h = h / a;
  auto wrap = [box](double x) {
    x = std::fmod(x, box);
    if (x < 0) x += box;
    return x >= box ? 0.0 : x;
  };
  struct Row {
    std::array<double, 6> mass_msun{}, half_mass_kpc{};
    std::array<std::uint64_t, 6> len{};
    std::array<double, 3> pos_ckpc_h{}, cm_ckpc_h{}, vel_kms{};
    double half_mass_all_kpc = 0, sfr = 0, mass_all_msun = 0;
  };
  const auto segment_row = [&](const Segment& seg) {
    Row r;
    const SegmentStats& st = seg.stats;
    r.len = st.count;
    r.mass_msun = st.mass_msun;
    r.half_mass_kpc = st.half_mass_kpc;
    r.half_mass_all_kpc = st.half_mass_all_kpc;
    r.mass_all_msun = st.mass_all_msun();
    r.sfr = st.sfr_msun_yr;
    const double m = std::max(r.mass_all_msun, 1e-300);
    for (int c = 0; c < 3; ++c) {
      r.pos_ckpc_h[c] = seg.galaxy->center_ckpc_h[c];
      r.cm_ckpc_h[c] = wrap(r.pos_ckpc_h[c] + st.mass_pos[c] / m * kpc_to_ckpc_h);
      r.vel_kms[c] = st.mass_vel[c] / m;
    }
    return r;
  };
  std::vector<Row> sub(n_sub), grp(n_groups);
  for (std::size_t s = 0; s < n_sub; ++s) sub[s] = segment_row(segments[segment_of_subhalo[s]]);
  std::vector<std::array<double, 3>> group_mp(n_groups), group_mv(n_groups);
  for (const auto& seg : segments) {
    if (seg.group < 0) continue;
    const Row r = segment_row(seg);
    Row& g = grp[seg.group];
    const Row& central = sub[first_sub[seg.group]];
    for (int t = 0; t < 6; ++t) {
      g.len[t] += r.len[t];
      g.mass_msun[t] += r.mass_msun[t];
    }
    g.mass_all_msun += r.mass_all_msun;
    for (int c = 0; c < 3; ++c) {
      double d = r.cm_ckpc_h[c] - central.pos_ckpc_h[c];
      d -= box * std::round(d / box);
      group_mp[seg.group][c] += r.mass_all_msun * d;
      group_mv[seg.group][c] += r.mass_all_msun * r.vel_kms[c];
    }
  }
  for (int g = 0; g < n_groups; ++g) {
    const Row& central = sub[first_sub[g]];
    const double m = std::max(grp[g].mass_all_msun, 1e-300);
    for (int c = 0; c < 3; ++c) {
      grp[g].pos_ckpc_h[c] = central.pos_ckpc_h[c];
      grp[g].cm_ckpc_h[c] = wrap(central.pos_ckpc_h[c] + group_mp[g][c] / m);
      grp[g].vel_kms[c] = group_mv[g][c] / m;
    }
  }

  // Group catalog chunks: groups and subhalos each split evenly over the files.
  const int nfiles = spec.n_chunks;
  auto split = [nfiles](std::size_t n, int k) { return n * static_cast<std::size_t>(k) / nfiles; };
  for (int k = 0; k < nfiles; ++k) {
    h5::File f(group_catalog_chunk_path(tmp_base, spec.snapshot, k), h5::File::Mode::truncate);
    const std::size_t g_lo = split(n_groups, k), g_hi = split(n_groups, k + 1);
    const std::size_t s_lo = split(n_sub, k), s_hi = split(n_sub, k + 1);
    const h5::Location header = f.create_group("Header");
    header.set_attribute<double>("BoxSize", box);
    header.set_attribute<std::int32_t>("FlagDoubleprecision", 0);
    header.set_attribute<double>("HubbleParam", h);
    header.set_attribute<std::int32_t>("Ngroups_ThisFile", static_cast<std::int32_t>(g_hi - g_lo));
    header.set_attribute<std::int32_t>("Ngroups_Total", n_groups);
    std::uint64_t ids_total = 0, ids_this = 0;
    for (int g = 0; g < n_groups; ++g)
      for (int t = 0; t < 6; ++t) ids_total += grp[g].len[t];
    for (std::size_t g = g_lo; g < g_hi; ++g)
      for (int t = 0; t < 6; ++t) ids_this += grp[g].len[t];
    header.set_attribute<std::int64_t>("Nids_ThisFile", static_cast<std::int64_t>(ids_this));
    header.set_attribute<std::int64_t>("Nids_Total", static_cast<std::int64_t>(ids_total));
    header.set_attribute<std::int32_t>("Nsubgroups_ThisFile",
                                       static_cast<std::int32_t>(s_hi - s_lo));
    header.set_attribute<std::int32_t>("Nsubgroups_Total", static_cast<std::int32_t>(n_sub));
    header.set_attribute<std::int32_t>("NumFiles", nfiles);
    header.set_attribute<double>("Omega0", first.cosmology.omega_matter);
    header.set_attribute<double>("OmegaLambda", first.cosmology.omega_lambda);
    header.set_attribute<double>("Redshift", first.redshift);
    header.set_attribute<double>("Time", a);
    header.set_string_attribute("SimulationName", spec.simulation_name);

    // Group/ and Subhalo/ exist in every file; their datasets only where the file has rows.
    const h5::Location G = f.create_group("Group");
    const h5::Location S = f.create_group("Subhalo");
    if (g_hi > g_lo) {
      const hsize_t n = g_hi - g_lo;
      std::vector<std::int32_t> first_v, len_v, nsubs_v, lentype_v;
      std::vector<float> mass_v, masstype_v, pos_v, cm_v, vel_v;
      for (std::size_t g = g_lo; g < g_hi; ++g) {
        const Row& r = grp[g];
        first_v.push_back(first_sub[g]);
        nsubs_v.push_back(n_subs[g]);
        std::uint64_t len = 0;
        for (int t = 0; t < 6; ++t) {
          len += r.len[t];
          lentype_v.push_back(static_cast<std::int32_t>(r.len[t]));
          masstype_v.push_back(static_cast<float>(r.mass_msun[t] * msun_to_code));
        }
        len_v.push_back(static_cast<std::int32_t>(std::min<std::uint64_t>(len, INT32_MAX)));
        mass_v.push_back(static_cast<float>(r.mass_all_msun * msun_to_code));
        for (int c = 0; c < 3; ++c) {
          pos_v.push_back(static_cast<float>(r.pos_ckpc_h[c]));
          cm_v.push_back(static_cast<float>(r.cm_ckpc_h[c]));
          vel_v.push_back(static_cast<float>(r.vel_kms[c] * a));  // GroupVel is in km/s/a
        }
      }
      G.write<float>("GroupCM", cm_v, {n, 3});
      G.write<std::int32_t>("GroupFirstSub", first_v, {n});
      G.write<std::int32_t>("GroupLen", len_v, {n});
      G.write<std::int32_t>("GroupLenType", lentype_v, {n, 6});
      G.write<float>("GroupMass", mass_v, {n});
      G.write<float>("GroupMassType", masstype_v, {n, 6});
      G.write<std::int32_t>("GroupNsubs", nsubs_v, {n});
      G.write<float>("GroupPos", pos_v, {n, 3});
      G.write<float>("GroupVel", vel_v, {n, 3});
    }
    if (s_hi > s_lo) {
      const hsize_t n = s_hi - s_lo;
      std::vector<std::int32_t> grnr_v, len_v, lentype_v, parent_v;
      std::vector<std::uint8_t> flag_v;
      std::vector<float> mass_v, masstype_v, pos_v, cm_v, vel_v, hm_v, hmtype_v, sfr_v;
      for (std::size_t s = s_lo; s < s_hi; ++s) {
        const Row& r = sub[s];
        grnr_v.push_back(group_of[s]);
        parent_v.push_back(0);
        flag_v.push_back(1);
        std::uint64_t len = 0;
        for (int t = 0; t < 6; ++t) {
          len += r.len[t];
          lentype_v.push_back(static_cast<std::int32_t>(r.len[t]));
          masstype_v.push_back(static_cast<float>(r.mass_msun[t] * msun_to_code));
          hmtype_v.push_back(static_cast<float>(r.half_mass_kpc[t] * kpc_to_ckpc_h));
        }
        len_v.push_back(static_cast<std::int32_t>(std::min<std::uint64_t>(len, INT32_MAX)));
        mass_v.push_back(static_cast<float>(r.mass_all_msun * msun_to_code));
        hm_v.push_back(static_cast<float>(r.half_mass_all_kpc * kpc_to_ckpc_h));
        sfr_v.push_back(static_cast<float>(r.sfr));
        for (int c = 0; c < 3; ++c) {
          pos_v.push_back(static_cast<float>(r.pos_ckpc_h[c]));
          cm_v.push_back(static_cast<float>(r.cm_ckpc_h[c]));
          vel_v.push_back(static_cast<float>(r.vel_kms[c]));  // SubhaloVel is in km/s
        }
      }
      S.write<float>("SubhaloCM", cm_v, {n, 3});
      S.write<std::uint8_t>("SubhaloFlag", flag_v, {n});
      S.write<std::int32_t>("SubhaloGrNr", grnr_v, {n});
      S.write<float>("SubhaloHalfmassRad", hm_v, {n});
      S.write<float>("SubhaloHalfmassRadType", hmtype_v, {n, 6});
      S.write<std::int32_t>("SubhaloLen", len_v, {n});
      S.write<std::int32_t>("SubhaloLenType", lentype_v, {n, 6});
      S.write<float>("SubhaloMass", mass_v, {n});
      S.write<float>("SubhaloMassType", masstype_v, {n, 6});
      S.write<std::int32_t>("SubhaloParent", parent_v, {n});
      S.write<float>("SubhaloPos", pos_v, {n, 3});
      S.write<float>("SubhaloSFR", sfr_v, {n});
      S.write<float>("SubhaloVel", vel_v, {n, 3});
    }
  }

  // Offsets: the first row of each group / subhalo in each type's global particle array.
  {
    h5::File f((fs::path(tmp_base) / outputs[2]).string(), h5::File::Mode::truncate);
    std::vector<std::int64_t> group_off, sub_off, file_snap, file_group, file_sub;
    for (int g = 0; g < n_groups; ++g)
      for (int t = 0; t < 6; ++t)
        group_off.push_back(static_cast<std::int64_t>(sub_offset[first_sub[g]][t]));
    for (std::size_t s = 0; s < n_sub; ++s)
      for (int t = 0; t < 6; ++t) sub_off.push_back(static_cast<std::int64_t>(sub_offset[s][t]));
    for (int k = 0; k < nfiles; ++k) {
      for (int t = 0; t < 6; ++t) file_snap.push_back(static_cast<std::int64_t>(chunk_begin(t, k)));
      file_group.push_back(static_cast<std::int64_t>(split(n_groups, k)));
      file_sub.push_back(static_cast<std::int64_t>(split(n_sub, k)));
    }
    const hsize_t ng = static_cast<hsize_t>(n_groups), ns = n_sub, nf = nfiles;
    for (const char* group : {"Group", "Subhalo", "FileOffsets"}) f.create_group(group);
    f.write<std::int64_t>("Group/SnapByType", group_off, {ng, 6});
    f.write<std::int64_t>("Subhalo/SnapByType", sub_off, {ns, 6});
    f.write<std::int64_t>("FileOffsets/SnapByType", file_snap, {nf, 6});
    f.write<std::int64_t>("FileOffsets/Group", file_group, {nf});
    f.write<std::int64_t>("FileOffsets/Subhalo", file_sub, {nf});
  }

  // Move the three outputs into place; on failure remove what was moved.
  std::vector<fs::path> moved;
  for (const auto& o : outputs) {
    fs::rename(tmp.path() / o, base / o, ec);
    if (ec) {
      for (const auto& m : moved) fs::remove_all(m, ec);
      throw InputError((base / o).string() + ": cannot move the finished output into place (" +
                       ec.message() + ")");
    }
    moved.push_back(base / o);
  }
}

}  // namespace ifusim::tng
