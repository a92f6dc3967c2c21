// Reverse mode through the binned engine (issue 27, docs/gradients.md "Stars (binned engine)"):
// every star's dL/d(initial mass, age, metallicity, v_los) from StellarSpectraStage's
// particle_adjoint, against central finite differences of the forward run (the stage and psum),
// L = <G, cube> for a random cotangent G.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "helpers.h"
#include "pipeline/devices.h"
#include "ssp_fixture.h"
#include "stages/common/dust_curves.h"
#include "stages/common/particle_fields.h"
#include "stages/orient/orient.h"
#include "stages/spaxel_grid/spaxel_grid.h"
#include "stages/stage.h"
#include "stages/stellar_spectra/stellar_spectra.h"

using namespace ifusim;

namespace {

constexpr double kRedshift = 0.05;
constexpr int kSide = 5;  // 5 x 5 spaxels
constexpr double kSpaxelKpc = 2.0;
// Wide velocity nodes, so that finite differences can take steps of 20 km/s within one node
// spacing: the forward's float cube rounds L's differences at ~1e-7 of a star's light, and a
// star's dL/dv_los is ~1e-5 of its light per km/s (smooth templates, a random G).
constexpr double kVelocityBinKms = 100.0;
// The band (vacuum) holds both ends of the templates (3000-8000 A at rest, 3150-8400 A
// observed), so the ends' S and P columns (EdgeWindow) are differentiated too.
const WaveBins kBins{2900.0, 4.0, 1550};  // 2898 .. 9098 A
// A star beyond every other's speed in each component (and of negligible mass) sets the speed
// bound, so that no perturbation of the others moves the velocity nodes.
constexpr float kAnchorKms = 400.0f;
// The tests through orient: its Euler angles (run_forward's through_orient, turned_back).
constexpr double kAlphaDeg = 30.0, kBetaDeg = -50.0, kGammaDeg = 110.0;

struct Forward {
  // Declared first, destroyed last: the state and the stage hold arrays on its devices.
  std::shared_ptr<const Mesh> mesh;
  std::unique_ptr<RunState> state;
  std::unique_ptr<Stage> stage;
  std::unique_ptr<Stage> orient;  // where the run went through orient (kept for particle_vjp)
  CubeShape shape;
  std::vector<float> cube;
};

// `dust_av`: each star's A_V (CCM89, R_V = 3.1, as the dust stage would give it; a fixed bound
// of 3 mag, so that no perturbation moves the expansion); empty for none.
// `smoothing`: the grid's "kernel" smoothing (the stars' own smoothing_length_kpc where the
// host stars have it, else the kNN lengths). `through_orient`: the orient stage first, at the
// tests' Euler angles (kAlphaDeg, ...) with align_face_on off (the rotation held fixed).
Forward run_forward(int n_devices, const test::HostStars& host, std::shared_ptr<const SspGrid> grid,
                    const std::vector<float>& dust_av = {}, bool smoothing = false,
                    bool through_orient = false) {
  Forward f;
  f.mesh = make_mesh(Backend::cpu, n_devices);
  f.state = std::make_unique<RunState>(*f.mesh);
  RunState& state = *f.state;
  state.data.stars = test::put_stars(*f.mesh, host);
  state.observation.redshift = kRedshift;
  state.observation.axes.wavelength_medium = "vacuum";
  state.observation.axes.wave_start_angstrom = kBins.start_angstrom;
  state.observation.axes.wave_step_angstrom = kBins.step_angstrom;
  if (through_orient) {
    f.orient = make_orient_stage(
        nlohmann::json{
            {"align_face_on", false},
            {"orientation",
             {{"alpha_deg", kAlphaDeg}, {"beta_deg", kBetaDeg}, {"gamma_deg", kGammaDeg}}}},
        "p");
    run_stage(*f.orient, state);
  }
  nlohmann::json spaxel_params{{"n_spaxels", kSide}, {"spaxel_size_kpc", kSpaxelKpc}};
  if (smoothing) spaxel_params["smoothing"] = "kernel";
  const auto spaxels = make_spaxel_grid_stage(spaxel_params, "p");
  run_stage(*spaxels, state);
  state.spaxels.n_wave = kBins.n;
  if (!dust_av.empty()) {
    state.data.stars.derived.set(fields::stars_dust_av,
                                 device_put(*f.mesh, dust_av, 1, Sharding::sharded()));
    DustAttenuation attenuation;
    attenuation.curve = DustCurve{DustCurveKind::ccm89, 3.1};
    attenuation.av_bound_mag = 3.0;
    state.products.put("dust_attenuation", attenuation);
  }
  StellarSpectraParams params;
  params.velocity_bin_kms = kVelocityBinKms;
  f.stage = make_stellar_spectra_stage(grid, params);
  f.stage->run(state);
  reduce_partials(state);
  f.shape = state.cube->shape;
  f.cube = state.cube->data;
  return f;
}

double loss(const std::vector<float>& cube, const std::vector<double>& g) {
  double sum = 0.0;
  for (std::size_t k = 0; k < cube.size(); ++k) sum += g[k] * static_cast<double>(cube[k]);
  return sum;
}

// Ages and metallicities placed at fractions 0.2 .. 0.8 of their grid cells (in log), each
// velocity at 0.25 .. 0.75 of its node spacing and with both of the templates' ends, shifted by
// it, at 0.25 .. 0.75 of an observed bin: finite differences stay within one linear piece (the
// weights' kinks are at nodes and at the bins' edges).
test::HostStars stars_between_nodes(const SspGrid& grid, std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0), inner(0.2, 0.8), pos(-4.5, 4.5);
  std::normal_distribution<double> logm(6.0, 0.3);
  auto between = [&](const std::vector<double>& axis) {
    const auto cell = static_cast<std::size_t>(unit(rng) * (axis.size() - 1));
    const double lo = std::log10(axis[cell]), hi = std::log10(axis[cell + 1]);
    return std::pow(10.0, lo + inner(rng) * (hi - lo));
  };
  // The velocity nodes the stage makes for the anchor's speed bound (velocity_bins), and the
  // templates' ends (vacuum, at rest).
  const double beta = std::sqrt(3.0) * kAnchorKms / kSpeedOfLightKms;
  const double du = kVelocityBinKms / kSpeedOfLightKms, u_min = std::log1p(-beta);
  const SspTables tables = make_ssp_tables(grid);
  auto fraction = [](double x) { return x - std::floor(x); };
  auto inside = [](double f) { return f >= 0.25 && f <= 0.75; };
  auto velocity = [&]() {
    while (true) {
      const double v = unit(rng) * 500.0 - 250.0;
      const double doppler = (1.0 + kRedshift) * (1.0 + v / kSpeedOfLightKms);
      if (inside(fraction((std::log1p(v / kSpeedOfLightKms) - u_min) / du)) &&
          inside(fraction((tables.edges.front() * doppler - kBins.first_edge()) /
                          kBins.step_angstrom)) &&
          inside(
              fraction((tables.edges.back() * doppler - kBins.first_edge()) / kBins.step_angstrom)))
        return v;
    }
  };
  test::HostStars s;
  for (std::size_t i = 0; i <= n; ++i) {
    const bool anchor = i == n;
    for (int c = 0; c < 3; ++c) s.position_kpc.push_back(static_cast<float>(pos(rng)));
    const double v = velocity();
    for (int c = 0; c < 3; ++c)
      s.velocity_kms.push_back(anchor ? kAnchorKms
                                      : static_cast<float>(c == 2 ? v : 100.0 * unit(rng) - 50.0));
    const double m = anchor ? 1e-3 : std::pow(10.0, logm(rng));
    s.mass_msun.push_back(static_cast<float>(m));
    s.initial_mass_msun.push_back(static_cast<float>(1.6 * m));
    s.age_gyr.push_back(static_cast<float>(between(grid.age_gyr)));
    s.metallicity.push_back(static_cast<float>(between(grid.metallicity)));
  }
  return s;
}

std::vector<double> random_cotangent(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> out(n);
  for (double& v : out) v = g(rng);
  return out;
}

// For kernel smoothing (5 x 2 kpc spaxels, edges at -5, -3, ..., 5): each star's smoothing
// length (1.2 - 3 kpc, sigma 0.33 - 0.82 kpc, given, so held fixed: a kNN length would move with
// the perturbed star) and its sky position (x, y within +-extent_kpc), drawn until every side of
// its truncation square (x +- H, y +- H) is >= 0.25 kpc from every spaxel edge: central
// differences with steps up to 0.08 kpc stay where the covered spaxels do not change (one smooth
// piece). With `depth`, z too within +-extent_kpc.
void place_for_smoothing(test::HostStars& s, unsigned seed, double extent_kpc = 4.5,
                         bool depth = false) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> pos(-extent_kpc, extent_kpc), length(1.2, 3.0);
  auto clear = [](double u) {
    for (double edge = -5.0; edge <= 5.0; edge += kSpaxelKpc)
      if (std::abs(u - edge) < 0.25) return false;
    return true;
  };
  s.smoothing_length_kpc.assign(s.size(), 0.0f);
  for (std::size_t i = 0; i < s.size(); ++i) {
    while (true) {
      const auto h = static_cast<float>(length(rng));
      const auto x = static_cast<float>(pos(rng)), y = static_cast<float>(pos(rng));
      // The square's reach as the footprint computes it from the float length.
      const double reach =
          kKernelTruncationSigmas * (static_cast<double>(h) * kStarSigmaPerSmoothingLength);
      if (!clear(x - reach) || !clear(x + reach) || !clear(y - reach) || !clear(y + reach))
        continue;
      s.smoothing_length_kpc[i] = h;
      s.position_kpc[3 * i] = x;
      s.position_kpc[3 * i + 1] = y;
      if (depth) s.position_kpc[3 * i + 2] = static_cast<float>(pos(rng));
      break;
    }
  }
}

ParticleGradients gradients_of(int n_devices, const test::HostStars& host,
                               std::shared_ptr<const SspGrid> grid, const std::vector<double>& g,
                               const std::vector<float>& dust_av = {}, bool smoothing = false) {
  Forward f = run_forward(n_devices, host, grid, dust_av, smoothing);
  CubeCotangent cotangent{f.shape, g};
  ParticleGradients out;
  REQUIRE(f.stage->particle_adjoint(*f.state, cotangent, out));
  return out;
}

}  // namespace

TEST_CASE("stellar VJP: every star's gradient matches central finite differences of the forward",
          "[vjp]") {
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const std::size_t n = 60;
  const test::HostStars host = stars_between_nodes(*grid, n, 5);
  const Forward base = run_forward(1, host, grid);
  const std::vector<double> g = random_cotangent(base.cube.size(), 11);
  const ParticleGradients grads = gradients_of(1, host, grid, g);
  const auto& d_mass = grads.fields.at("stars.initial_mass_msun");
  const auto& d_age = grads.fields.at("stars.age_gyr");
  const auto& d_z = grads.fields.at("stars.metallicity");
  const auto& d_v = grads.fields.at("stars.velocity_kms");
  REQUIRE(d_mass.size() == n + 1);
  REQUIRE(d_v.size() == 3 * (n + 1));

  // Central differences, with the values as stored (float). Mass: steps of 50 % (L is linear in
  // it). Age and metallicity: L is linear in the log within a grid cell, so a difference between
  // any two points of the star's cell is exact but for rounding, and the widest has the least:
  // the points 5 % of the cell inside its nodes (in log10), turned into d/dx by 1 / (x ln 10).
  // Velocity: steps of 20 km/s (>= 25 km/s from a node, and the ends' steps >= 1 A from a bin's
  // edge; L is linear in ln(1 + v/c) within a node spacing but for the ends' 1/D, so the
  // difference's error is ~(h / c)^2). The steps are as large as the pieces allow: the
  // differences are limited by the forward's rounding, the float cube's and the product's float
  // sums' (the worst errors, 1e-5 mass, 2e-6 age, 3e-4 metallicity, 7e-4 velocity, are its noise;
  // metallicity's was 7e-4 with steps of 0.8 x the distance to the nearest node and sums in
  // double, 1.3e-3 with those steps and the sums in float groups).
  enum class Step { linear, log10 };
  auto central = [&](std::vector<float> test::HostStars::*field, std::size_t index, Step kind,
                     double step_down, double step_up) {
    test::HostStars up = host, down = host;
    const double x = (host.*field)[index];
    (up.*field)[index] =
        static_cast<float>(kind == Step::log10 ? x * std::pow(10.0, step_up) : x + step_up);
    (down.*field)[index] =
        static_cast<float>(kind == Step::log10 ? x * std::pow(10.0, -step_down) : x - step_down);
    const double lp = loss(run_forward(1, up, grid).cube, g);
    const double lm = loss(run_forward(1, down, grid).cube, g);
    const double xp = (up.*field)[index], xm = (down.*field)[index];
    if (kind == Step::linear) return (lp - lm) / (xp - xm);
    return (lp - lm) / (std::log10(xp) - std::log10(xm)) / (x * std::log(10.0));
  };
  struct Check {
    const char* name;
    std::vector<float> test::HostStars::*field;
    const std::vector<double>* grad;
    std::size_t stride, component;
    Step kind;
    const std::vector<double>* nodes;  // log10 steps: the grid axis the step must stay inside
    double relative_step, absolute_step, tolerance;
  };
  // Tolerances: the targets, relative to max(|fd|, 1e-2 x the field's largest |fd|) (a
  // star whose gradient happens to be near 0 is held to that floor).
  const Check checks[] = {
      {"mass", &test::HostStars::initial_mass_msun, &d_mass, 1, 0, Step::linear, nullptr, 0.5, 0.0,
       1e-4},
      {"age", &test::HostStars::age_gyr, &d_age, 1, 0, Step::log10, &grid->age_gyr, 0.0, 0.0, 1e-3},
      {"metallicity", &test::HostStars::metallicity, &d_z, 1, 0, Step::log10, &grid->metallicity,
       0.0, 0.0, 1e-3},
      {"velocity", &test::HostStars::velocity_kms, &d_v, 3, 2, Step::linear, nullptr, 0.0, 20.0,
       1e-3}};
  for (const Check& c : checks) {
    std::vector<double> fd(n), ad(n);
    for (std::size_t i = 0; i < n; ++i) {  // the anchor (star n) is not checked
      const std::size_t at = i * c.stride + c.component;
      const double x = (host.*(c.field))[at];
      double step_down = c.relative_step * std::abs(x) + c.absolute_step, step_up = step_down;
      if (c.nodes) {
        const auto above = std::upper_bound(c.nodes->begin(), c.nodes->end(), x);
        REQUIRE(above != c.nodes->begin());
        REQUIRE(above != c.nodes->end());
        const double lo = std::log10(*(above - 1)), hi = std::log10(*above);
        step_down = std::log10(x) - (lo + 0.05 * (hi - lo));
        step_up = hi - 0.05 * (hi - lo) - std::log10(x);
        REQUIRE(step_down > 0.0);
        REQUIRE(step_up > 0.0);
      }
      fd[i] = central(c.field, at, c.kind, step_down, step_up);
      ad[i] = (*c.grad)[i * c.stride + c.component];
      REQUIRE(std::isfinite(ad[i]));
      REQUIRE(std::isfinite(fd[i]));
    }
    double largest = 0.0;
    for (double v : fd) largest = std::max(largest, std::abs(v));
    REQUIRE(largest > 0.0);
    double worst = 0.0;
    std::size_t worst_star = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double err = std::abs(ad[i] - fd[i]) / std::max(std::abs(fd[i]), 1e-2 * largest);
      if (err > worst) worst_star = i;
      worst = std::max(worst, err);
      INFO(c.name << " star " << i << ": vjp " << ad[i] << ", fd " << fd[i]);
      CHECK(err <= c.tolerance);
    }
    WARN(c.name << ": worst relative error " << worst << " (star " << worst_star << ": vjp "
                << ad[worst_star] << ", fd " << fd[worst_star] << "; largest |fd| " << largest
                << ")");
  }
  // The velocity's other components: the stage sees only v_los (+z).
  for (std::size_t i = 0; i <= n; ++i) {
    CHECK(d_v[3 * i] == 0.0);
    CHECK(d_v[3 * i + 1] == 0.0);
  }
}

TEST_CASE("stellar VJP with dust: A_V, mass and age against central finite differences", "[vjp]") {
  // A_V is held in a fine table (dust_expansion.h, ~2e-3 mag a row) whose piecewise-linear
  // slope is the derivative given; a step of 0.05 mag spans ~20 rows of it, so the difference
  // sees the smooth attenuation's slope: the two agree to ~1e-3, held here to 1e-2. Mass and age
  // through the dust terms (rank > 1) to the targets.
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const std::size_t n = 24;
  const test::HostStars host = stars_between_nodes(*grid, n, 9);
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> av(0.2, 2.5);
  std::vector<float> dust_av(host.size());
  for (float& a : dust_av) a = static_cast<float>(av(rng));
  const Forward base = run_forward(1, host, grid, dust_av);
  const std::vector<double> g = random_cotangent(base.cube.size(), 21);
  const ParticleGradients grads = gradients_of(1, host, grid, g, dust_av);
  REQUIRE(grads.fields.size() == 5);
  const auto& d_av = grads.fields.at("stars.dust_av");
  const auto& d_mass = grads.fields.at("stars.initial_mass_msun");
  const auto& d_age = grads.fields.at("stars.age_gyr");
  auto check = [&](const char* name, const std::vector<double>& ad, double tolerance,
                   const std::function<double(std::size_t)>& fd_of) {
    std::vector<double> fd(n);
    double largest = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      fd[i] = fd_of(i);
      REQUIRE(std::isfinite(fd[i]));
      REQUIRE(std::isfinite(ad[i]));
      largest = std::max(largest, std::abs(fd[i]));
    }
    REQUIRE(largest > 0.0);
    double worst = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      const double err = std::abs(ad[i] - fd[i]) / std::max(std::abs(fd[i]), 1e-2 * largest);
      worst = std::max(worst, err);
      INFO(name << " star " << i << ": vjp " << ad[i] << ", fd " << fd[i]);
      CHECK(err <= tolerance);
    }
    WARN(name << " with dust: worst relative error " << worst);
  };
  check("A_V", d_av, 1e-2, [&](std::size_t i) {
    std::vector<float> up = dust_av, down = dust_av;
    up[i] += 0.05f;
    down[i] -= 0.05f;
    return (loss(run_forward(1, host, grid, up).cube, g) -
            loss(run_forward(1, host, grid, down).cube, g)) /
           (static_cast<double>(up[i]) - down[i]);
  });
  check("mass", d_mass, 1e-4, [&](std::size_t i) {
    test::HostStars up = host, down = host;
    up.initial_mass_msun[i] *= 1.5f;
    down.initial_mass_msun[i] *= 0.5f;
    return (loss(run_forward(1, up, grid, dust_av).cube, g) -
            loss(run_forward(1, down, grid, dust_av).cube, g)) /
           (static_cast<double>(up.initial_mass_msun[i]) - down.initial_mass_msun[i]);
  });
  check("age", d_age, 1e-3, [&](std::size_t i) {
    double distance = 1e9;
    const double x = host.age_gyr[i];
    for (double node : grid->age_gyr)
      distance = std::min(distance, std::abs(std::log10(x) - std::log10(node)));
    test::HostStars up = host, down = host;
    up.age_gyr[i] = static_cast<float>(x * std::pow(10.0, 0.8 * distance));
    down.age_gyr[i] = static_cast<float>(x * std::pow(10.0, -0.8 * distance));
    return (loss(run_forward(1, up, grid, dust_av).cube, g) -
            loss(run_forward(1, down, grid, dust_av).cube, g)) /
           (std::log10(static_cast<double>(up.age_gyr[i])) - std::log10(down.age_gyr[i])) /
           (x * std::log(10.0));
  });
}

TEST_CASE("stellar VJP: gradients are bitwise identical for 1 and 3 devices", "[vjp]") {
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const test::HostStars host = stars_between_nodes(*grid, 400, 7);
  // Without smoothing, and with kernel smoothing (the kNN lengths; the sky position's gradient).
  const bool smoothing = GENERATE(false, true);
  CAPTURE(smoothing);
  const Forward base = run_forward(1, host, grid, {}, smoothing);
  const std::vector<double> g = random_cotangent(base.cube.size(), 13);
  const ParticleGradients one = gradients_of(1, host, grid, g, {}, smoothing);
  const ParticleGradients three = gradients_of(3, host, grid, g, {}, smoothing);
  REQUIRE(one.fields.size() == (smoothing ? 5u : 4u));
  REQUIRE(one.fields.count("stars.position_kpc") == (smoothing ? 1u : 0u));
  for (const auto& [name, values] : one.fields) {
    INFO(name);
    const auto& other = three.fields.at(name);
    REQUIRE(other.size() == values.size());
    CHECK(std::memcmp(values.data(), other.data(), values.size() * sizeof(double)) == 0);
    bool any = false;
    for (double v : values) any = any || v != 0.0;
    CHECK(any);
  }
}

namespace {

// L's central difference in one star's sky-position component, Richardson-extrapolated from steps
// h and 2 h: (4 D(h) - D(2 h)) / 3, whose error is O(h^4) (the weights are smooth within a piece,
// erf of (edge - x) / (sqrt 2 sigma)), so that steps large against the float cube's rounding (its
// differences of L are ~1e-7 of a star's light) stay accurate for kernels of sigma >= 0.33 kpc.
// Each D uses the steps as stored (float).
double position_difference(const std::function<double(const test::HostStars&)>& loss_of,
                           const test::HostStars& host, std::size_t at, double h) {
  auto central = [&](double step) {
    test::HostStars up = host, down = host;
    up.position_kpc[at] = static_cast<float>(host.position_kpc[at] + step);
    down.position_kpc[at] = static_cast<float>(host.position_kpc[at] - step);
    return (loss_of(up) - loss_of(down)) /
           (static_cast<double>(up.position_kpc[at]) - down.position_kpc[at]);
  };
  return (4.0 * central(h) - central(2.0 * h)) / 3.0;
}

// Each gradient of `ad` against its finite difference in `fd`: both finite, and within
// `tolerance` relative to max(|fd|, 1e-2 x the largest |fd|); the worst error is printed.
void compare_gradients(const std::string& name, const std::vector<double>& ad,
                       const std::vector<double>& fd, double tolerance) {
  REQUIRE(ad.size() >= fd.size());
  double largest = 0.0;
  for (std::size_t k = 0; k < fd.size(); ++k) {
    REQUIRE(std::isfinite(fd[k]));
    REQUIRE(std::isfinite(ad[k]));
    largest = std::max(largest, std::abs(fd[k]));
  }
  REQUIRE(largest > 0.0);
  double worst = 0.0;
  for (std::size_t k = 0; k < fd.size(); ++k) {
    const double err = std::abs(ad[k] - fd[k]) / std::max(std::abs(fd[k]), 1e-2 * largest);
    worst = std::max(worst, err);
    INFO(name << " " << k << ": vjp " << ad[k] << ", fd " << fd[k]);
    CHECK(err <= tolerance);
  }
  WARN(name << ": worst relative error " << worst << " (largest |fd| " << largest << ")");
}

// `seen` (the stars as the spectral stage should see them) turned back by R^T, positions and
// velocities, so that orient's R brings them there.
test::HostStars turned_back(const test::HostStars& seen) {
  const Matrix3 r = euler_rotation(kAlphaDeg, kBetaDeg, kGammaDeg);
  test::HostStars input = seen;
  const std::size_t rows = seen.position_kpc.size() / 3;
  for (auto field : {&test::HostStars::position_kpc, &test::HostStars::velocity_kms})
    for (std::size_t i = 0; i < rows; ++i)
      for (int c = 0; c < 3; ++c) {
        double x = 0.0;
        for (int k = 0; k < 3; ++k) x += r[3 * k + c] * (seen.*field)[3 * i + k];
        (input.*field)[3 * i + c] = static_cast<float>(x);
      }
  return input;
}

}  // namespace

TEST_CASE("stellar VJP with kernel smoothing: dL/d(sky position) against finite differences",
          "[vjp]") {
  // The footprint weights' slopes (footprint.h) carried through the gather: each star's dL/dx and
  // dL/dy against Richardson-extrapolated central differences (steps 0.04 and 0.08 kpc, against
  // kernels of sigma 0.33-0.82 kpc and square sides >= 0.25 kpc from every spaxel edge, so the
  // covered spaxels do not change within a step: place_for_smoothing), within the 1e-3
  // relative to max(|fd|, 1e-2 x the largest |fd|); z (the line of sight) is exactly 0. The mass
  // gradient with smoothing too (50 % steps, 1e-4). The differences are limited by the float
  // cube's rounding, not by the steps (the errors scatter as the steps change: 0.005 kpc gave up
  // to 3.9e-3, 0.01 up to 2.1e-3, 0.04-0.1 kpc 1.7e-4 to 6.2e-4); measured worst at 0.04 kpc:
  // 1.7e-4 (x), 3.0e-4 (y), 1.2e-5 (mass).
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const std::size_t n = 30;
  test::HostStars host = stars_between_nodes(*grid, n, 31);
  place_for_smoothing(host, 37);
  const Forward base = run_forward(1, host, grid, {}, true);
  const std::vector<double> g = random_cotangent(base.cube.size(), 41);
  const ParticleGradients grads = gradients_of(1, host, grid, g, {}, true);
  REQUIRE(grads.fields.size() == 5);
  const auto& d_pos = grads.fields.at("stars.position_kpc");
  const auto& d_mass = grads.fields.at("stars.initial_mass_msun");
  REQUIRE(d_pos.size() == 3 * (n + 1));
  auto loss_of = [&](const test::HostStars& h) {
    return loss(run_forward(1, h, grid, {}, true).cube, g);
  };
  for (int c = 0; c < 2; ++c) {
    std::vector<double> fd(n), ad(n);
    for (std::size_t i = 0; i < n; ++i) {  // the anchor (star n) is not checked
      fd[i] = position_difference(loss_of, host, 3 * i + c, 0.04);
      ad[i] = d_pos[3 * i + c];
    }
    compare_gradients(c == 0 ? "x with smoothing" : "y with smoothing", ad, fd, 1e-3);
  }
  for (std::size_t i = 0; i <= n; ++i) CHECK(d_pos[3 * i + 2] == 0.0);
  std::vector<double> fd_mass(n), ad_mass(n);
  for (std::size_t i = 0; i < n; ++i) {
    test::HostStars up = host, down = host;
    up.initial_mass_msun[i] *= 1.5f;
    down.initial_mass_msun[i] *= 0.5f;
    fd_mass[i] = (loss_of(up) - loss_of(down)) /
                 (static_cast<double>(up.initial_mass_msun[i]) - down.initial_mass_msun[i]);
    ad_mass[i] = d_mass[i];
  }
  compare_gradients("mass with smoothing", ad_mass, fd_mass, 1e-4);
}

TEST_CASE("stellar VJP: the exact method and a wrong cotangent are refused", "[vjp]") {
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const test::HostStars host = stars_between_nodes(*grid, 20, 3);
  Forward f = run_forward(1, host, grid);
  ParticleGradients out;
  CubeCotangent wrong{CubeShape{kSide, kSide, kBins.n - 1},
                      std::vector<double>(kSide * kSide * (kBins.n - 1), 1.0)};
  CHECK_THROWS_WITH(f.stage->particle_adjoint(*f.state, wrong, out),
                    Catch::Contains("the cotangent is 5 x 5 x 1549"));
}

TEST_CASE("stellar VJP through orient: dL/d(input velocity), 3 components, by finite differences",
          "[vjp]") {
  // The stars as the spectral stage should see them (between nodes, stars_between_nodes), given
  // to the run turned back by R^T, so that orient's R brings them there; the anchor's rotated
  // components stay the largest. particle_vjp runs stellar_spectra's adjoint, then orient's.
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const std::size_t n = 12;
  const test::HostStars input = turned_back(stars_between_nodes(*grid, n, 23));
  const Forward base = run_forward(1, input, grid, {}, false, true);
  const std::vector<double> g = random_cotangent(base.cube.size(), 29);
  const ParticleGradients grads = particle_vjp({base.orient.get(), base.stage.get()}, *base.state,
                                               CubeCotangent{base.shape, g});
  const auto& d_v = grads.fields.at("stars.velocity_kms");
  REQUIRE(d_v.size() == 3 * (n + 1));
  // 20 km/s steps of one input component move v_los by at most 20 km/s (within its piece).
  std::vector<double> fd(3 * n);
  for (std::size_t i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) {
      test::HostStars up = input, down = input;
      up.velocity_kms[3 * i + c] += 20.0f;
      down.velocity_kms[3 * i + c] -= 20.0f;
      const double lp = loss(run_forward(1, up, grid, {}, false, true).cube, g);
      const double lm = loss(run_forward(1, down, grid, {}, false, true).cube, g);
      fd[3 * i + c] = (lp - lm) / (static_cast<double>(up.velocity_kms[3 * i + c]) -
                                   down.velocity_kms[3 * i + c]);
    }
  // Entry 3 i + c: star i's input component c.
  compare_gradients("input velocity through orient", d_v, fd, 1e-3);
}

TEST_CASE("stellar VJP through orient with smoothing: dL/d(input position), 3 components",
          "[vjp]") {
  // The sky position's gradient (x, y of the rotated frame, z 0) turned back by orient's R^T:
  // every component of the input position against Richardson-extrapolated central differences
  // (steps 0.08 and 0.16 kpc of one input component move the rotated x and y by at most that,
  // within the 0.25 kpc that place_for_smoothing keeps the squares' sides from spaxel edges).
  // The differences' noise, from the float cube, is ~1e-2 absolute here (2e-5 of the largest
  // component), which the floor of 1e-2 x the largest turns into up to 1.3e-3 at steps of 0.04
  // or 0.06 kpc; at 0.08 kpc it is halved and the extrapolation's O(h^4) error is ~1e-4 of the
  // largest: measured worst 5.5e-4.
  // The smoothing lengths are given (held fixed), as a kNN length would move with the star.
  // The stars sit within 1 kpc of the centre in every component: the rotated positions are
  // float, rounded to ~6e-8 kpc there (~2.4e-7 at 4 kpc), and that rounding of the step, times
  // the rotated frame's gradient, is the differences' largest error where R^T's components
  // cancel (measured 5e-3 with stars to 4.5 kpc and 0.015 kpc steps).
  auto grid = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  const std::size_t n = 8;
  test::HostStars seen = stars_between_nodes(*grid, n, 43);
  place_for_smoothing(seen, 47, 1.0, true);
  const test::HostStars input = turned_back(seen);
  const Forward base = run_forward(1, input, grid, {}, true, true);
  const std::vector<double> g = random_cotangent(base.cube.size(), 53);
  const ParticleGradients grads = particle_vjp({base.orient.get(), base.stage.get()}, *base.state,
                                               CubeCotangent{base.shape, g});
  const auto& d_pos = grads.fields.at("stars.position_kpc");
  REQUIRE(d_pos.size() == 3 * (n + 1));
  auto loss_of = [&](const test::HostStars& h) {
    return loss(run_forward(1, h, grid, {}, true, true).cube, g);
  };
  std::vector<double> fd(3 * n);
  for (std::size_t k = 0; k < 3 * n; ++k) fd[k] = position_difference(loss_of, input, k, 0.08);
  // Entry 3 i + c: star i's input component c.
  compare_gradients("input position through orient with smoothing", d_pos, fd, 1e-3);
}

TEST_CASE("orient's adjoint turns a gradient of the rotated velocity back by R^T", "[vjp]") {
  auto mesh = make_mesh(Backend::cpu, 1);
  RunState state(*mesh);
  state.data.stars = test::put_stars(*mesh, test::random_stars(10, 3));
  const auto orient = make_orient_stage(
      nlohmann::json{
          {"align_face_on", false},
          {"orientation",
           {{"alpha_deg", kAlphaDeg}, {"beta_deg", kBetaDeg}, {"gamma_deg", kGammaDeg}}}},
      "p");
  orient->run(state);
  const Matrix3 r = euler_rotation(kAlphaDeg, kBetaDeg, kGammaDeg);
  ParticleGradients grads;
  grads.fields["stars.velocity_kms"] = {0.0, 0.0, 2.0, 1.0, -1.0, 0.5};
  REQUIRE(orient->particle_adjoint(state, CubeCotangent{}, grads));
  const auto& g = grads.fields.at("stars.velocity_kms");
  const double out[2][3] = {{0.0, 0.0, 2.0}, {1.0, -1.0, 0.5}};
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 3; ++c) {
      double expected = 0.0;
      for (int k = 0; k < 3; ++k) expected += r[3 * k + c] * out[i][k];
      CHECK(g[3 * i + c] == Approx(expected).epsilon(1e-14));
    }
}
