// The centre of a cutout's stars in passes with bounded memory (io/tng/stellar_centre.h): any
// block size and any budget give the bits of one block holding every star; the half-mass radius
// splits the mass in two, the bulk velocity is the mass-weighted mean inside it, and the centre
// is the cluster's, across the periodic box's edge.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "io/tng/stellar_centre.h"

using namespace ifusim;

namespace {

constexpr double kBox = 1000.0;  // code units
constexpr double kPosFactor = 0.7, kVelFactor = 0.9;

// A Plummer-like cluster of `n` stars around (999, 500, 0.5), across the box's edges in x and z,
// plus 10 % of stars spread over the box; masses in [0.5, 1.5); velocities around (30, -20, 10).
struct Stars {
  std::vector<double> x, m, v;
};
Stars make_stars(std::size_t n) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> g(0.0, 1.0);
  Stars s;
  for (std::size_t i = 0; i < n; ++i) {
    const bool background = i % 10 == 3;
    const double centre[3] = {999.0, 500.0, 0.5};
    const double r = background ? 0 : 4.0 / std::sqrt(std::pow(u(rng), -2.0 / 3.0) - 1.0 + 1e-3);
    const double dir[3] = {g(rng), g(rng), g(rng)};
    const double norm = std::sqrt(dir[0] * dir[0] + dir[1] * dir[1] + dir[2] * dir[2]);
    for (int k = 0; k < 3; ++k) {
      double p = background ? kBox * u(rng) : centre[k] + std::min(r, 300.0) * dir[k] / norm;
      p -= kBox * std::floor(p / kBox);
      s.x.push_back(p);
      s.v.push_back((k == 0 ? 30.0 : k == 1 ? -20.0 : 10.0) + 50.0 * g(rng));
    }
    s.m.push_back(0.5 + u(rng));
  }
  return s;
}

tng::VisitStarBlocks visit(const Stars& s, std::size_t block) {
  return [&s, block](bool velocities, const std::function<void(const tng::CentreBlock&)>& fn) {
    for (std::size_t b = 0; b < s.m.size(); b += block)
      fn({s.x.data() + 3 * b, s.m.data() + b, velocities ? s.v.data() + 3 * b : nullptr,
          std::min(block, s.m.size() - b)});
  };
}

bool same_bits(const tng::StellarCentre& a, const tng::StellarCentre& b) {
  return std::memcmp(a.center_code.data(), b.center_code.data(), sizeof a.center_code) == 0 &&
         std::memcmp(a.bulk_velocity_kms.data(), b.bulk_velocity_kms.data(),
                     sizeof a.bulk_velocity_kms) == 0 &&
         std::memcmp(&a.halfmass_radius_kpc, &b.halfmass_radius_kpc, sizeof(double)) == 0;
}

double offset(double d) {
  return d - kBox * std::floor(d / kBox + 0.5);
}

}  // namespace

TEST_CASE("stellar centre: the bits of one block holding every star, for any block and budget",
          "[tng][centre]") {
  const std::size_t n = 20000;
  const Stars stars = make_stars(n);
  const tng::StellarCentre held =
      tng::find_stellar_centre(visit(stars, n), kBox, kPosFactor, kVelFactor, n);
  // Held: centre of mass, radius and the stars near the centre, the half-mass radius, the
  // bulk velocity.
  CHECK(held.passes == 4);
  for (const std::size_t block : {1, 777, 20000})
    for (const std::size_t budget : {1, 97, 5000, 19999}) {
      INFO("block " << block << ", budget " << budget);
      const tng::StellarCentre streamed =
          tng::find_stellar_centre(visit(stars, block), kBox, kPosFactor, kVelFactor, budget);
      CHECK(same_bits(held, streamed));
      if (budget < 5000) CHECK(streamed.passes > held.passes);
    }

  // The centre is the cluster's (the background moves the centre of mass, not the densest
  // point), across the box's edges.
  CHECK(std::abs(offset(held.center_code[0] - 999.0)) < 0.5);
  CHECK(std::abs(offset(held.center_code[1] - 500.0)) < 0.5);
  CHECK(std::abs(offset(held.center_code[2] - 0.5)) < 0.5);
  for (const double c : held.center_code) CHECK((c >= 0 && c < kBox));

  // Half the mass lies within the half-mass radius, and less than half below it.
  std::vector<double> r(n);
  double total = 0, within = 0, below = 0, mass = 0;
  double mv[3] = {0, 0, 0};
  for (std::size_t i = 0; i < n; ++i) {
    double s = 0;
    for (int k = 0; k < 3; ++k) {
      const double d = offset(stars.x[3 * i + k] - held.center_code[k]) * kPosFactor;
      s += d * d;
    }
    r[i] = std::sqrt(s);
    total += stars.m[i];
    if (r[i] <= held.halfmass_radius_kpc) {
      within += stars.m[i];
      mass += stars.m[i];
      for (int k = 0; k < 3; ++k) mv[k] += stars.m[i] * stars.v[3 * i + k] * kVelFactor;
    }
    if (r[i] < held.halfmass_radius_kpc) below += stars.m[i];
  }
  CHECK(within >= 0.5 * total * (1 - 1e-9));
  CHECK(below < 0.5 * total);
  CHECK(held.halfmass_radius_kpc > 1.0);
  for (int k = 0; k < 3; ++k)
    CHECK(held.bulk_velocity_kms[k] == Approx(mv[k] / mass).epsilon(1e-12));
  CHECK(held.bulk_velocity_kms[0] == Approx(30.0 * kVelFactor).margin(5.0));
}

TEST_CASE("stellar centre: stars at one point", "[tng][centre]") {
  Stars stars;
  for (int i = 0; i < 300; ++i) {
    stars.x.insert(stars.x.end(), {10.0, 20.0, 30.0});
    stars.m.push_back(1.0);
    stars.v.insert(stars.v.end(), {1.0, 2.0, 3.0});
  }
  for (const std::size_t budget : {1, 300}) {
    const tng::StellarCentre c =
        tng::find_stellar_centre(visit(stars, 64), kBox, kPosFactor, kVelFactor, budget);
    CHECK(c.center_code[0] == Approx(10.0));
    CHECK(c.center_code[2] == Approx(30.0));
    CHECK(c.halfmass_radius_kpc == Approx(0.0).margin(1e-9));
    CHECK(c.bulk_velocity_kms[1] == Approx(2.0 * kVelFactor));
  }
}

TEST_CASE("stellar centre: a large galaxy's wide spheres on a subsample, the same for any block",
          "[tng][centre]") {
  // 1e5 stars, the wide spheres on every 10th (subsample_stars 1e4): the result's bits depend on
  // neither block size nor budget, it lies within the final sphere's noise of the all-star
  // path's centre, and the spheres test a fraction of the stars the all-star path tests.
  const std::size_t n = 100000, subsample = 10000;
  const Stars stars = make_stars(n);
  const tng::StellarCentre all =
      tng::find_stellar_centre(visit(stars, n), kBox, kPosFactor, kVelFactor, n, 0);
  const tng::StellarCentre sub =
      tng::find_stellar_centre(visit(stars, n), kBox, kPosFactor, kVelFactor, n, subsample);
  for (const std::size_t block : {1000, 33333})
    for (const std::size_t budget : {500, 40000}) {
      INFO("block " << block << ", budget " << budget);
      CHECK(same_bits(sub, tng::find_stellar_centre(visit(stars, block), kBox, kPosFactor,
                                                    kVelFactor, budget, subsample)));
    }
  // The final sphere holds ~1000 stars within ~1.2 code units of the centre (Plummer a = 4):
  // its centre of mass is good to ~1.2 / sqrt(1000) ~ 0.04; both paths end there.
  for (int k = 0; k < 3; ++k) {
    CHECK(std::abs(offset(sub.center_code[k] - all.center_code[k])) < 0.1);
    CHECK(std::abs(offset(sub.center_code[k] - (k == 0 ? 999.0 : k == 1 ? 500.0 : 0.5))) < 0.3);
  }
  CHECK(sub.halfmass_radius_kpc == Approx(all.halfmass_radius_kpc).epsilon(1e-3));
  CHECK(sub.sphere_visits < all.sphere_visits / 3);
  // Below twice the subsample's size every sphere runs on every star: the bits of no subsample.
  CHECK(same_bits(
      all, tng::find_stellar_centre(visit(stars, n), kBox, kPosFactor, kVelFactor, n, n / 2 + 1)));
}
