// The VJP entry point (issue 27, docs/gradients.md "The entry point"): run_pipeline_vjp runs a
// config on a galaxy held in memory forward and back through every stage (orient, aperture,
// stellar_spectra, psum, flux, psf, lsf, aperture_mask, noise), and its gradients are checked
// against central finite differences of whole forward runs (run_pipeline), L = <G, cube> for a
// random G.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/config_error.h"
#include "core/constants.h"
#include "io/host_galaxy.h"
#include "io/run_config.h"
#include "io/ssp/ssp_library.h"
#include "pipeline/runner.h"
#include "stages/emission_lines/emission_lines.h"
#include "stages/orient/orient.h"

using namespace ifusim;

namespace {

constexpr double kRedshift = 0.05;
// Wide velocity nodes, so that the finite differences' steps (0.15 of a spacing) are large
// against the float cube's rounding (a star's dL/dv_los is ~1e-4 of its light per km/s).
constexpr double kVelocityBinKms = 500.0;
// A light star moving at this speed along each axis sets the galaxy's speed bound (StarBounds),
// hence the velocity nodes: no other star's perturbation moves them.
constexpr float kAnchorKms = 400.0f;
const char* kSsp = "${IFUSIM_DATA_DIR}/ssp/MILES_BASTI_CH_baseFe";
// The orientation the runs use (align_face_on off: the face-on rotation depends on the stars'
// masses and positions, and is held fixed by the adjoint; docs/gradients.md).
constexpr double kAlphaDeg = 50.0, kBetaDeg = -20.0, kGammaDeg = 30.0;

// The run: a 10 x 10 arcsec field of 1 arcsec spaxels (0.98 kpc at z = 0.05), 4800-5600 A,
// every stage of calc_ifu (noise: with `noise`).
nlohmann::json run_document(bool noise) {
  nlohmann::json pipeline = {"orient", "aperture", "stellar_spectra", "psum", "flux",
                             "psf",    "lsf",      "aperture_mask",   "noise"};
  if (!noise) pipeline.erase(pipeline.size() - 1);
  nlohmann::json d = {
      {"galaxy",
       {{"redshift", kRedshift},
        {"orientation",
         {{"alpha_deg", kAlphaDeg}, {"beta_deg", kBetaDeg}, {"gamma_deg", kGammaDeg}}}}},
      {"telescope",
       {{"name", "small"},
        {"fov_arcsec", 10.0},
        {"spaxel_arcsec", 1.0},
        {"wavelength",
         {{"start_angstrom", 4800.0}, {"end_angstrom", 5600.0}, {"step_angstrom", 1.25}}},
        {"lsf_fwhm_angstrom", 3.0}}},
      {"ssp", {{"library", kSsp}}},
      {"pipeline", pipeline},
      {"stages",
       {{"orient", {{"align_face_on", false}}},
        {"stellar_spectra", {{"velocity_bin_kms", kVelocityBinKms}}},
        {"flux", {{"unit_scale", 1e-20}}},
        {"psf", {{"shape", "gaussian"}, {"fwhm_arcsec", 1.5}}},
        {"noise", {{"snr", 20}, {"per", "angstrom"}}}}},
      {"devices", {{"backend", "cpu"}, {"count", 1}}},
      {"seed", 7}};
  if (!noise) d["stages"].erase("noise");
  return d;
}

// The line-of-sight velocity (after orient's rotation) of an input velocity.
double line_of_sight_kms(const float* v) {
  const Matrix3 r = euler_rotation(kAlphaDeg, kBetaDeg, kGammaDeg);
  return r[6] * v[0] + r[7] * v[1] + r[8] * v[2];
}
double line_of_sight_row(int component) {
  return euler_rotation(kAlphaDeg, kBetaDeg, kGammaDeg)[6 + component];
}

// Where c ln(1 + v/c) falls between the velocity nodes (0 .. 1 within a node spacing), for the
// anchor's speed bound (stellar_spectra's velocity_bins).
double velocity_fraction(double v_los_kms) {
  const double beta = std::sqrt(3.0) * kAnchorKms / kSpeedOfLightKms;
  const double u = (std::log1p(v_los_kms / kSpeedOfLightKms) - std::log1p(-beta)) /
                   (kVelocityBinKms / kSpeedOfLightKms);
  return u - std::floor(u);
}

// n stars in a 8 x 8 kpc square (inside the field), ages and metallicities at fractions 0.3 ..
// 0.7 of their grid cells (in log: finite differences stay inside one linear piece), line-of-
// sight velocities at 0.3 .. 0.7 of a node spacing, each component within +-250 km/s; then the
// anchor.
HostGalaxy stars_between_nodes(const SspGrid& grid, std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0), inner(0.3, 0.7), pos(-4.0, 4.0);
  std::normal_distribution<double> logm(5.0, 0.3);
  auto between = [&](const std::vector<double>& axis) {
    const auto cell = static_cast<std::size_t>(unit(rng) * static_cast<double>(axis.size() - 1));
    const double lo = std::log10(axis[cell]), hi = std::log10(axis[cell + 1]);
    return static_cast<float>(std::pow(10.0, lo + inner(rng) * (hi - lo)));
  };
  std::vector<float> x, v, m, age, z;
  for (std::size_t i = 0; i <= n; ++i) {
    const bool anchor = i == n;
    x.insert(x.end(), {static_cast<float>(pos(rng)), static_cast<float>(pos(rng)),
                       static_cast<float>(0.3 * pos(rng))});
    float vel[3];
    do {
      for (float& c : vel) c = static_cast<float>(500.0 * unit(rng) - 250.0);
    } while (!anchor && (velocity_fraction(line_of_sight_kms(vel)) < 0.3 ||
                         velocity_fraction(line_of_sight_kms(vel)) > 0.7));
    if (anchor) std::fill(vel, vel + 3, kAnchorKms);
    v.insert(v.end(), vel, vel + 3);
    m.push_back(static_cast<float>(anchor ? 1e-3 : std::pow(10.0, logm(rng))));
    float a = between(grid.age_gyr);
    while (a > 12.5f) a = between(grid.age_gyr);  // younger than the Universe at z = 0.05
    age.push_back(a);
    z.push_back(between(grid.metallicity));
  }
  const std::size_t rows = n + 1;
  HostGalaxy g;
  g.galaxy.redshift = kRedshift;
  g.source = "test_vjp_entry";
  g.stars["position_kpc"] = {x, rows, 3};
  g.stars["velocity_kms"] = {v, rows, 3};
  g.stars["initial_mass_msun"] = {m, rows, 1};
  g.stars["age_gyr"] = {age, rows, 1};
  g.stars["metallicity"] = {z, rows, 1};
  REQUIRE(validate_and_complete(g).empty());
  return g;
}

RunConfig config_of(const HostGalaxy& galaxy, bool noise) {
  return parse_run_config(run_document(noise), "", std::make_shared<const HostGalaxy>(galaxy));
}

RunOptions quiet() {
  RunOptions o;
  o.write_outputs = false;
  o.progress = false;
  return o;
}

// L = <G, cube> in double; NaN voxels (outside the aperture) are constants of the model.
double loss(const Cube& cube, const std::vector<double>& g) {
  double sum = 0.0;
  for (std::size_t k = 0; k < cube.data.size(); ++k)
    if (!std::isnan(cube.data[k])) sum += g[k] * static_cast<double>(cube.data[k]);
  return sum;
}

// Each (adjoint, finite difference) pair of a field: the adjoint finite, and within `tolerance`
// of the difference relative to max(|fd|, floor x the largest |fd| checked for the field).
void check(const char* what, const std::vector<std::pair<double, double>>& pairs, double tolerance,
           double floor) {
  double largest = 0.0;
  for (const auto& [ad, fd] : pairs) largest = std::max(largest, std::abs(fd));
  REQUIRE(largest > 0.0);
  for (const auto& [ad, fd] : pairs) {
    INFO(what << ": adjoint " << ad << ", finite difference " << fd);
    CHECK(std::isfinite(ad));
    CHECK(std::abs(ad - fd) <= tolerance * std::max(std::abs(fd), floor * largest));
  }
}

// The central difference of L = <G, cube> in one value of a field of `galaxy`'s stars or gas
// (`table`), perturbed as the input holds it (float), the runs made by config_of(galaxy) without
// noise; `log10_step`: by x 10^(+-step), the difference taken in log10 and turned into d/dx.
template <class ConfigOf>
double central_difference(const HostGalaxy& galaxy,
                          std::map<std::string, HostField> HostGalaxy::*table,
                          const std::string& field, std::size_t index, double step, bool log10_step,
                          const std::vector<double>& g, ConfigOf config_of) {
  HostGalaxy up = galaxy, down = galaxy;
  float& xu = (up.*table).at(field).values[index];
  float& xd = (down.*table).at(field).values[index];
  const double x = xu;
  xu = static_cast<float>(log10_step ? x * std::pow(10.0, step) : x + step);
  xd = static_cast<float>(log10_step ? x * std::pow(10.0, -step) : x - step);
  const double lp = loss(run_pipeline(config_of(up), quiet()).cube, g);
  const double lm = loss(run_pipeline(config_of(down), quiet()).cube, g);
  if (!log10_step) return (lp - lm) / (static_cast<double>(xu) - static_cast<double>(xd));
  return (lp - lm) / (std::log10(static_cast<double>(xu)) - std::log10(static_cast<double>(xd))) /
         (x * std::log(10.0));
}

}  // namespace

TEST_CASE("VJP entry: gradients of a whole run against central finite differences", "[vjp_entry]") {
  const SspGrid grid = load_ssp_library(resolve_path(kSsp, ""));
  const std::size_t n = 100;
  const std::size_t stars[] = {0, 23, 57, 88};  // the stars checked
  HostGalaxy galaxy = stars_between_nodes(grid, n, 3);
  // Each 30 x the others' typical mass: the finite differences are limited by the float cube's
  // rounding (~6e-8 of each voxel changed), which the star's own light then dominates.
  for (std::size_t i : stars) galaxy.stars.at("initial_mass_msun").values[i] = 3e6f;
  const Cube base = run_pipeline(config_of(galaxy, false), quiet()).cube;
  std::mt19937_64 rng(17);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> g(base.data.size());
  for (double& v : g) v = normal(rng);

  const VjpReport vjp = run_pipeline_vjp(config_of(galaxy, true), quiet(), g);
  // The forward cube is the run's, noise and all.
  const Cube noisy = run_pipeline(config_of(galaxy, true), quiet()).cube;
  REQUIRE(vjp.forward.cube.data.size() == noisy.data.size());
  CHECK(std::equal(noisy.data.begin(), noisy.data.end(), vjp.forward.cube.data.begin(),
                   [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }));
  // The noise's adjoint is the identity: the gradient is that of the noiseless cube, bitwise
  // what the run without the noise stage gives.
  const VjpReport quiet_vjp = run_pipeline_vjp(config_of(galaxy, false), quiet(), g);
  CHECK(quiet_vjp.gradients.fields == vjp.gradients.fields);

  const auto& grads = vjp.gradients.fields;
  for (const char* key :
       {"stars.initial_mass_msun", "stars.age_gyr", "stars.metallicity", "stars.velocity_kms"}) {
    INFO(key);
    REQUIRE(grads.count(key) == 1);
    const std::vector<double>& values = grads.at(key);
    CHECK(values.size() == (n + 1) * (std::string(key) == "stars.velocity_kms" ? 3 : 1));
    CHECK(std::none_of(values.begin(), values.end(), [](double x) { return std::isnan(x); }));
    CHECK(std::any_of(values.begin(), values.end(), [](double x) { return x != 0.0; }));
  }

  // Central differences of whole runs without noise, the field perturbed as the input holds it
  // (float). Mass: L is linear in it (steps of 50 %). Age: linear in log10 within a grid cell,
  // steps of 0.15 of the star's cell in log (it sits at 0.3 .. 0.7 of it). Velocity: L is linear
  // in ln(1 + v_los/c) within a node spacing, steps moving v_los by 0.15 of a spacing (75 km/s;
  // the difference's error ~(h/c)^2).
  auto fd = [&](const std::string& field, std::size_t index, double step, bool log10_step) {
    return central_difference(galaxy, &HostGalaxy::stars, field, index, step, log10_step, g,
                              [](const HostGalaxy& h) { return config_of(h, false); });
  };
  auto cell_log_width = [&](const std::vector<double>& axis, double value) {
    const auto hi = std::upper_bound(axis.begin(), axis.end(), value);
    return std::log10(*hi) - std::log10(*(hi - 1));
  };
  // The floors (check): the differences are limited by the float cube's rounding, for velocity
  // ~5e-7 absolute scatter across step sizes (0.3, 0.6, 1 x the step), 1e-3 of a star whose
  // dL/dv_los is 15 x smaller than the largest checked; hence velocity's floor of 0.1 (mass and
  // age: 1e-2).
  std::vector<std::pair<double, double>> mass, age, velocity;
  for (std::size_t i : stars) {
    const double m = galaxy.stars.at("initial_mass_msun").values[i];
    mass.emplace_back(grads.at("stars.initial_mass_msun")[i],
                      fd("initial_mass_msun", i, 0.5 * m, false));
    const double a = galaxy.stars.at("age_gyr").values[i];
    age.emplace_back(grads.at("stars.age_gyr")[i],
                     fd("age_gyr", i, 0.15 * cell_log_width(grid.age_gyr, a), true));
  }
  // Every component of two stars' velocities: orient's adjoint maps dL/dv_los back by R^T.
  for (std::size_t i : {stars[1], stars[2]})
    for (int c = 0; c < 3; ++c) {
      const double step = 0.15 * kVelocityBinKms / std::max(0.2, std::abs(line_of_sight_row(c)));
      velocity.emplace_back(grads.at("stars.velocity_kms")[3 * i + c],
                            fd("velocity_kms", 3 * i + c, std::min(step, 100.0), false));
    }
  check("initial mass", mass, 1e-4, 1e-2);
  check("age", age, 1e-3, 1e-2);
  check("velocity", velocity, 1e-3, 0.1);
}

TEST_CASE("VJP entry: what has no adjoint is refused, naming the stage or the key", "[vjp_entry]") {
  const SspGrid grid = load_ssp_library(resolve_path(kSsp, ""));
  const HostGalaxy galaxy = stars_between_nodes(grid, 20, 5);
  const RunConfig c = config_of(galaxy, true);
  // The cotangent shaped as the final cube.
  const Cube cube = run_pipeline(c, quiet()).cube;
  CHECK_THROWS_WITH(
      run_pipeline_vjp(c, quiet(), std::vector<double>(cube.data.size() + 1, 1.0)),
      Catch::Contains("the cotangent holds") && Catch::Contains(to_string(cube.shape)));
  const std::vector<double> g(cube.data.size(), 1.0);
  // A particle stage without an adjoint (mass_image deposits into the cube).
  nlohmann::json d = run_document(false);
  d["pipeline"] = {"orient", "aperture", "mass_image", "psum"};
  d["stages"] = {{"orient", {{"align_face_on", false}}}};
  const RunConfig masses = parse_run_config(d, "", std::make_shared<const HostGalaxy>(galaxy));
  const Cube image = run_pipeline(masses, quiet()).cube;
  CHECK_THROWS_WITH(run_pipeline_vjp(masses, quiet(), std::vector<double>(image.data.size(), 1.0)),
                    Catch::Contains("stages.mass_image") && Catch::Contains("has no adjoint"));
  // The exact spectral method.
  d = run_document(true);
  d["stages"]["stellar_spectra"] = {{"method", "exact"}};
  CHECK_THROWS_WITH(
      run_pipeline_vjp(parse_run_config(d, "", std::make_shared<const HostGalaxy>(galaxy)), quiet(),
                       g),
      Catch::Contains("stages.stellar_spectra.method"));
  // A streamed galaxy (a synthetic one, read in blocks).
  d = run_document(true);
  d["input"] = {{"synthetic", {{"stars", 2000}, {"gas", 0}, {"seed", 1}, {"redshift", kRedshift}}},
                {"stream_block_stars", 500}};
  CHECK_THROWS_WITH(run_pipeline_vjp(parse_run_config(d, ""), quiet(), g),
                    Catch::Contains("input.stream_block_stars"));
  // Runs across processes.
  RunOptions across = quiet();
  across.across_processes = true;
  CHECK_THROWS_WITH(run_pipeline_vjp(c, across, g), Catch::Contains("across processes"));
}

TEST_CASE(
    "VJP entry: a kept forward (ForwardSession) gives run_pipeline's cube and "
    "run_pipeline_vjp's gradients, bitwise, backward after backward",
    "[vjp_entry]") {
  const SspGrid grid = load_ssp_library(resolve_path(kSsp, ""));
  const HostGalaxy galaxy = stars_between_nodes(grid, 60, 7);
  const RunConfig c = config_of(galaxy, true);  // noise included: the cube as the run makes it
  const Cube run = run_pipeline(c, quiet()).cube;
  std::mt19937_64 rng(23);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> g(run.data.size()), h(run.data.size());
  for (double& v : g) v = normal(rng);
  for (double& v : h) v = normal(rng);
  const VjpReport reference = run_pipeline_vjp(c, quiet(), g);
  const VjpReport reference_h = run_pipeline_vjp(c, quiet(), h);
  REQUIRE(reference.gradients.fields.size() == 4);

  ForwardSession kept(c, quiet());
  const auto same = [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  const Cube& cube = kept.report().cube;
  REQUIRE(cube.data.size() == run.data.size());
  CHECK(cube.shape == run.shape);
  CHECK(kept.cube_shape() == run.shape);
  CHECK(std::equal(run.data.begin(), run.data.end(), cube.data.begin(), same));
  CHECK(std::equal(run.variance.begin(), run.variance.end(), cube.variance.begin(), same));
  CHECK(std::any_of(cube.data.begin(), cube.data.end(), [](float v) { return v > 0; }));
  CHECK(kept.n_stars() == galaxy.n_stars());

  // Backward after backward, another cotangent between, and from a moved-to session: each
  // bitwise a fresh run_pipeline_vjp's (the adjoints leave their stages' state as it was).
  CHECK(kept.backward(g).fields == reference.gradients.fields);
  CHECK(kept.backward(h).fields == reference_h.gradients.fields);
  ForwardSession moved = std::move(kept);
  CHECK(moved.backward(g).fields == reference.gradients.fields);
  // A mis-sized cotangent is refused, and the session still works after it.
  CHECK_THROWS_WITH(
      moved.backward(std::vector<double>(g.size() - 1, 1.0)),
      Catch::Contains("the cotangent holds") && Catch::Contains(to_string(run.shape)));
  CHECK(moved.backward(h).fields == reference_h.gradients.fields);
}

namespace {

// Stars and star-forming gas: the stars of stars_between_nodes, and n cells in the same 8 x 8 kpc
// square with SFRs of 0.1-0.3 Msun/yr (the checked cells `bright`, 10 x more: their own lines
// dominate the float rounding of the voxels they change), 12 + log(O/H) in 7.9-8.6 (inside the
// Curti et al. 2020 range, away from its clamps) at the middle of a cell of the ratio grid, and
// velocities within +-200 km/s. `metals`: O/H from GFM_Metals (X_H 0.74, X_O set for the same
// O/H) instead of the metallicity.
HostGalaxy stars_and_gas(const SspGrid& grid, std::size_t n_stars, std::size_t n_gas,
                         const std::vector<std::size_t>& bright, unsigned seed, bool metals) {
  HostGalaxy g = stars_between_nodes(grid, n_stars, seed);
  std::mt19937_64 rng(seed + 100);
  std::uniform_real_distribution<double> unit(0.0, 1.0), pos(-4.0, 4.0);
  // The kernels interpolate the ratios on this grid of 12 + log(O/H), linearly.
  const LineRatioGrid ratios = make_line_ratio_grid(EmissionLineParams{}, nullptr);
  std::vector<float> x, v, m, rho, z, sfr, x_metals;
  for (std::size_t i = 0; i < n_gas; ++i) {
    x.insert(x.end(), {static_cast<float>(pos(rng)), static_cast<float>(pos(rng)),
                       static_cast<float>(0.3 * pos(rng))});
    for (int c = 0; c < 3; ++c) v.push_back(static_cast<float>(400.0 * unit(rng) - 200.0));
    m.push_back(1e6f);
    rho.push_back(1e7f);
    // 12 + log(O/H) at the middle of a cell of the ratio grid (~0.001 dex), from 7.9 to 8.6.
    const double cell = std::floor((0.3 + 0.7 * unit(rng)) / ratios.oxygen_step);
    const double oxygen = ratios.oxygen_min + (cell + 0.5) * ratios.oxygen_step;
    z.push_back(static_cast<float>(0.0134 * std::pow(10.0, oxygen - 8.69)));
    const double o_over_h = std::pow(10.0, oxygen - 12.0);
    std::vector<float> row(10, 0.0f);
    row[0] = 0.74f;                                                 // H
    row[4] = static_cast<float>(o_over_h * 15.999 / 1.008 * 0.74);  // O
    x_metals.insert(x_metals.end(), row.begin(), row.end());
    const bool is_bright = std::find(bright.begin(), bright.end(), i) != bright.end();
    sfr.push_back(static_cast<float>((0.1 + 0.2 * unit(rng)) * (is_bright ? 10.0 : 1.0)));
  }
  g.gas["position_kpc"] = {x, n_gas, 3};
  g.gas["velocity_kms"] = {v, n_gas, 3};
  g.gas["mass_msun"] = {m, n_gas, 1};
  g.gas["density_msun_per_kpc3"] = {rho, n_gas, 1};
  g.gas["metallicity"] = {z, n_gas, 1};
  g.gas["sfr_msun_per_yr"] = {sfr, n_gas, 1};
  if (metals) g.gas["metals"] = {x_metals, n_gas, 10};
  REQUIRE(validate_and_complete(g).empty());
  return g;
}

// run_document with emission_lines after stellar_spectra (H-beta and [O III] 4959, 5007 fall in
// the band at z = 0.05); `devices` cpu devices; `smoothing`: the aperture's kernel smoothing;
// `dust`: the dust stage (its defaults: CCM89, birth clouds) after the aperture.
RunConfig gas_config(const HostGalaxy& galaxy, bool noise, int devices = 1, bool smoothing = false,
                     bool dust = false) {
  nlohmann::json d = run_document(noise);
  nlohmann::json& p = d["pipeline"];
  p.insert(p.begin() + 3, "emission_lines");
  if (dust) p.insert(p.begin() + 2, "dust");
  d["devices"]["count"] = devices;
  d["devices"]["oversubscribe"] = true;  // more cpu devices than threads: the same result
  d["stages"]["emission_lines"] = {{"lines", {"hbeta", "oiii_4959", "oiii_5007"}}};
  if (smoothing) d["stages"]["aperture"] = {{"smoothing", "kernel"}};
  return parse_run_config(d, "", std::make_shared<const HostGalaxy>(galaxy));
}

}  // namespace

TEST_CASE("VJP entry: the gas's emission lines against central finite differences",
          "[vjp_entry][vjp_gas]") {
  const SspGrid grid = load_ssp_library(resolve_path(kSsp, ""));
  const LineRatioGrid ratios = make_line_ratio_grid(EmissionLineParams{}, nullptr);
  const std::size_t n_gas = 40;
  const std::vector<std::size_t> cells = {2, 17, 31};  // the cells checked
  const bool metals = GENERATE(false, true);
  INFO("O/H from " << (metals ? "GFM_Metals" : "the metallicity"));
  HostGalaxy galaxy = stars_and_gas(grid, 60, n_gas, cells, 11, metals);
  // A cell that forms no stars: no light, but the SFR's derivative from the right.
  const std::size_t dark = 9;
  galaxy.gas.at("sfr_msun_per_yr").values[dark] = 0.0f;
  const Cube base = run_pipeline(gas_config(galaxy, false), quiet()).cube;
  std::mt19937_64 rng(23);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> g(base.data.size());
  for (double& v : g) v = normal(rng);
  // The lines are there: the cube with them differs from the stars' alone.
  {
    nlohmann::json d = run_document(false);
    const Cube stars_only =
        run_pipeline(parse_run_config(d, "", std::make_shared<const HostGalaxy>(galaxy)), quiet())
            .cube;
    REQUIRE(std::abs(loss(base, g) - loss(stars_only, g)) > 1e-3 * std::abs(loss(base, g)));
  }

  const VjpReport vjp = run_pipeline_vjp(gas_config(galaxy, true), quiet(), g);
  const auto& grads = vjp.gradients.fields;
  std::vector<std::pair<const char*, std::size_t>> keys = {{"gas.sfr_msun_per_yr", 1},
                                                           {"gas.metallicity", 1},
                                                           {"gas.velocity_kms", 3},
                                                           {"stars.initial_mass_msun", 1}};
  if (metals) keys.emplace_back("gas.metals", 10);
  for (const auto& [key, components] : keys) {
    INFO(key);
    REQUIRE(grads.count(key) == 1);
    const std::vector<double>& values = grads.at(key);
    CHECK(values.size() == (std::string(key).rfind("gas.", 0) == 0 ? n_gas : 61) * components);
    CHECK(std::none_of(values.begin(), values.end(), [](double x) { return std::isnan(x); }));
    // With GFM_Metals the lines do not read the metallicity: its gradient is 0.
    if (std::string(key) == "gas.metallicity" && metals)
      CHECK(std::all_of(values.begin(), values.end(), [](double x) { return x == 0.0; }));
    else
      CHECK(std::any_of(values.begin(), values.end(), [](double x) { return x != 0.0; }));
  }
  // The noise's adjoint is the identity: bitwise the gradients of the run without it.
  CHECK(run_pipeline_vjp(gas_config(galaxy, false), quiet(), g).gradients.fields ==
        vjp.gradients.fields);

  // Central differences of whole runs without noise, the field perturbed as the input holds it
  // (float); `log10_step`: by x 10^(+-step), the difference taken in log10 and turned into d/dx.
  auto fd = [&](const std::string& field, std::size_t index, double step, bool log10_step = false) {
    return central_difference(galaxy, &HostGalaxy::gas, field, index, step, log10_step, g,
                              [](const HostGalaxy& h) { return gas_config(h, false); });
  };
  // Richardson's extrapolation of the central differences of steps h and 2h: error O(h^4).
  auto richardson = [&](const std::string& field, std::size_t index, double step,
                        bool log10_step = false) {
    return (4.0 * fd(field, index, step, log10_step) - fd(field, index, 2.0 * step, log10_step)) /
           3.0;
  };
  std::vector<std::pair<double, double>> sfr, oxygen, hydrogen, velocity;
  for (const std::size_t i : cells) {
    // SFR: L is linear in it (steps of 50 %).
    const double s = galaxy.gas.at("sfr_msun_per_yr").values[i];
    sfr.emplace_back(grads.at("gas.sfr_msun_per_yr")[i], fd("sfr_msun_per_yr", i, 0.5 * s));
    // O/H: L is linear in 12 + log(O/H) within a cell of the ratio grid (~0.001 dex), and each
    // cell sits at a cell's middle, where the cell's slope (the adjoint's) is the calibration's
    // derivative to O(step^2). Steps within the cell would be limited by the float cube's rounding
    // (the forbidden lines change by ~1e-3 of their light); so steps of 4 and 8 cells in log10
    // (from middle to middle), extrapolated.
    const std::string field = metals ? "metals" : "metallicity";
    const std::size_t index = metals ? 10 * i + 4 : i;
    const double step = 4.0 * ratios.oxygen_step;
    const double ad = metals ? grads.at("gas.metals")[index] : grads.at("gas.metallicity")[i];
    oxygen.emplace_back(ad, richardson(field, index, step, true));
    if (metals)  // and X_H, which lowers O/H
      hydrogen.emplace_back(grads.at("gas.metals")[10 * i],
                            richardson("metals", 10 * i, step, true));
  }
  // Every input component of two cells' velocities (orient's R^T), each step moving v_los by
  // about 4 km/s, against a line sigma of ~65 km/s (the templates' resolution and the cell's own
  // width): Richardson's extrapolation of the steps h and 2h, whose error is O(h^4).
  for (const std::size_t i : {cells[0], cells[2]})
    for (int c = 0; c < 3; ++c) {
      const double step = std::min(4.0 / std::abs(line_of_sight_row(c)), 40.0);
      velocity.emplace_back(grads.at("gas.velocity_kms")[3 * i + c],
                            richardson("velocity_kms", 3 * i + c, step));
    }
  // The dark cell: L is linear in its SFR from 0 up, so a one-sided difference is exact (but for
  // rounding); its O/H and velocity gradients are 0 (x its SFR).
  {
    HostGalaxy lit = galaxy;
    lit.gas.at("sfr_msun_per_yr").values[dark] = 2.0f;
    const double forward_fd =
        (loss(run_pipeline(gas_config(lit, false), quiet()).cube, g) - loss(base, g)) / 2.0;
    sfr.emplace_back(grads.at("gas.sfr_msun_per_yr")[dark], forward_fd);
    CHECK(grads.at("gas.velocity_kms")[3 * dark + 2] == 0.0);
    CHECK(grads.at(metals ? "gas.metals" : "gas.metallicity")[metals ? 10 * dark + 4 : dark] ==
          0.0);
  }
  check("sfr", sfr, 1e-4, 1e-2);
  check(metals ? "X_O" : "Z", oxygen, 1e-3, 1e-2);
  if (metals) check("X_H", hydrogen, 1e-3, 1e-2);
  check("velocity", velocity, 1e-3, 1e-2);
}

namespace {

// stars_and_gas with a dust screen worth having: every cell 3e7 Msun (about 0.1-0.5 mag of A_V in
// its spaxel at these metallicities), and the k-th `front` cell 1.5 kpc in front of star 5 + 17 k
// along the line of sight (after orient's rotation: the same spaxel, 1.5 kpc nearer), so that
// each has light behind it. The last cell is an anchor: 1e9 Msun 3 kpc behind star 0, whose
// spaxel then holds the deepest screen, so that the largest A_V (which sizes the stars' dust
// expansion, held fixed by the adjoint) does not move with a checked cell's mass.
HostGalaxy dusty_stars_and_gas(const SspGrid& grid, const std::vector<std::size_t>& front,
                               unsigned seed) {
  const std::size_t n_gas = 40, anchor = n_gas - 1;
  HostGalaxy g = stars_and_gas(grid, 60, n_gas, front, seed, false);
  for (float& m : g.gas.at("mass_msun").values) m = 3e7f;
  for (float& rho : g.gas.at("density_msun_per_kpc3").values) rho = 3e8f;  // cells as before
  g.gas.at("mass_msun").values[anchor] = 1e9f;
  g.gas.at("density_msun_per_kpc3").values[anchor] = 1e10f;
  const Matrix3 r = euler_rotation(kAlphaDeg, kBetaDeg, kGammaDeg);
  auto place = [&](std::size_t cell, std::size_t star, double along_kpc) {
    for (int c = 0; c < 3; ++c)
      g.gas.at("position_kpc").values[3 * cell + c] = static_cast<float>(
          g.stars.at("position_kpc").values[3 * star + c] + along_kpc * r[6 + c]);
  };
  for (std::size_t k = 0; k < front.size(); ++k) place(front[k], 5 + 17 * k, -1.5);
  place(anchor, 0, 3.0);
  return g;
}

}  // namespace

TEST_CASE(
    "VJP entry: through the dust stage, the gas's mass and metallicity against central finite "
    "differences",
    "[vjp_entry][vjp_gas]") {
  const SspGrid grid = load_ssp_library(resolve_path(kSsp, ""));
  const LineRatioGrid ratios = make_line_ratio_grid(EmissionLineParams{}, nullptr);
  const bool smoothing = GENERATE(false, true);
  INFO("kernel smoothing " << smoothing);
  const std::vector<std::size_t> cells = {3, 18, 30};  // the cells checked
  const HostGalaxy galaxy = dusty_stars_and_gas(grid, cells, 13);
  auto config = [smoothing](const HostGalaxy& h) {
    return gas_config(h, false, 1, smoothing, true);
  };
  const Cube base = run_pipeline(config(galaxy), quiet()).cube;
  std::mt19937_64 rng(41);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> g(base.data.size());
  for (double& v : g) v = normal(rng);

  const VjpReport vjp = run_pipeline_vjp(config(galaxy), quiet(), g);
  const auto& grads = vjp.gradients.fields;
  for (const auto& [key, size] :
       std::vector<std::pair<const char*, std::size_t>>{{"gas.mass_msun", 40},
                                                        {"gas.metallicity", 40},
                                                        {"gas.dust_av", 40},
                                                        {"stars.dust_av", 61},
                                                        {"stars.age_gyr", 61},
                                                        {"gas.sfr_msun_per_yr", 40}}) {
    INFO(key);
    REQUIRE(grads.count(key) == 1);
    const std::vector<double>& values = grads.at(key);
    CHECK(values.size() == size);
    CHECK(std::none_of(values.begin(), values.end(), [](double x) { return std::isnan(x); }));
    CHECK(std::any_of(values.begin(), values.end(), [](double x) { return x != 0.0; }));
  }
  // Each checked cell dims the star behind it.
  for (const std::size_t i : cells) CHECK(grads.at("gas.mass_msun")[i] != 0.0);

  // Central differences of whole runs, Richardson-extrapolated from steps h and 2h (error
  // O(h^4)): L depends on m and Z through 10^(-0.4 A_V k), smooth in them. The mass is perturbed
  // with the density (the cell's radius, hence its kernel footprint, held as the adjoint holds
  // it: docs/gradients.md); steps x 10^(+-0.02) in log10. The metallicity also sets the lines'
  // O/H: steps of 4 and 8 cells of the ratio grid, from a cell's middle to middles, as in the
  // lines' test.
  auto central = [&](std::size_t i, const char* field, double step) {
    auto loss_at = [&](double factor) {
      HostGalaxy h = galaxy;
      h.gas.at(field).values[i] = static_cast<float>(h.gas.at(field).values[i] * factor);
      if (std::string(field) == "mass_msun")
        h.gas.at("density_msun_per_kpc3").values[i] =
            static_cast<float>(h.gas.at("density_msun_per_kpc3").values[i] * factor);
      return std::pair{loss(run_pipeline(config(h), quiet()).cube, g),
                       static_cast<double>(h.gas.at(field).values[i])};
    };
    auto difference = [&](double h) {
      const auto [lp, xp] = loss_at(std::pow(10.0, h));
      const auto [lm, xm] = loss_at(std::pow(10.0, -h));
      const double x = galaxy.gas.at(field).values[i];
      return (lp - lm) / (std::log10(xp) - std::log10(xm)) / (x * std::log(10.0));
    };
    return (4.0 * difference(step) - difference(2.0 * step)) / 3.0;
  };
  std::vector<std::pair<double, double>> mass, metallicity;
  for (const std::size_t i : cells) {
    mass.emplace_back(grads.at("gas.mass_msun")[i], central(i, "mass_msun", 0.02));
    metallicity.emplace_back(grads.at("gas.metallicity")[i],
                             central(i, "metallicity", 4.0 * ratios.oxygen_step));
  }
  check("gas mass", mass, 1e-3, 1e-2);
  check("gas metallicity", metallicity, 1e-3, 1e-2);
}

TEST_CASE("VJP entry: the gas's gradients are bitwise the same for 1, 2 and 3 devices",
          "[vjp_entry][vjp_gas]") {
  const SspGrid grid = load_ssp_library(resolve_path(kSsp, ""));
  const bool smoothing = GENERATE(false, true);
  const bool dust = GENERATE(false, true);
  INFO("kernel smoothing " << smoothing << ", dust " << dust);
  HostGalaxy galaxy = stars_and_gas(grid, 50, 200, {}, 29, false);
  if (dust)
    for (float& m : galaxy.gas.at("mass_msun").values) m = 1e7f;  // a screen of ~0.1-1 mag
  const Cube base = run_pipeline(gas_config(galaxy, false, 1, smoothing, dust), quiet()).cube;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> g(base.data.size());
  for (double& v : g) v = normal(rng);
  const VjpReport one = run_pipeline_vjp(gas_config(galaxy, false, 1, smoothing, dust), quiet(), g);
  std::vector<const char*> keys = {"gas.sfr_msun_per_yr", "gas.metallicity", "gas.velocity_kms"};
  if (dust) keys.insert(keys.end(), {"gas.mass_msun", "gas.dust_av", "stars.dust_av"});
  for (const char* key : keys) {
    INFO(key);
    REQUIRE(one.gradients.fields.count(key) == 1);
    const std::vector<double>& values = one.gradients.fields.at(key);
    CHECK(std::none_of(values.begin(), values.end(), [](double x) { return std::isnan(x); }));
    CHECK(std::any_of(values.begin(), values.end(), [](double x) { return x != 0.0; }));
  }
  for (const int devices : {2, 3}) {
    INFO(devices << " devices");
    const VjpReport many =
        run_pipeline_vjp(gas_config(galaxy, false, devices, smoothing, dust), quiet(), g);
    CHECK(many.gradients.fields == one.gradients.fields);
  }
}
