#include "io/tng/stellar_centre.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "io/tng/tng_convert.h"

namespace ifusim::tng {
namespace {

constexpr double kShrinkFactor = 0.975;
constexpr std::size_t kShrinkStopMax = 1000;
constexpr std::size_t kShrinkStopFloor = 50;
// A sphere counts as held when it lies inside the held stars' sphere by this relative margin,
// far above the rounding of distances measured from two different centres.
constexpr double kHeldMargin = 1e-9;
// Masses as integers in 2^-30 of the largest: exact, order-free sums of up to 2^34 stars.
constexpr double kMassQuanta = 1073741824.0;
constexpr std::size_t kRadiusBins = 4096;
constexpr double kInfinity = std::numeric_limits<double>::infinity();
// Held stars are narrowed to kNarrowSlack sphere radii around the centre once they are more than
// kNarrowRatio times the stars inside the sphere: a narrower level then lasts until the centre
// has moved by about half a radius, and the step's cost stays within a few times its stars.
constexpr double kNarrowSlack = 1.5;
constexpr std::size_t kNarrowRatio = 3;

using Vec3 = std::array<double, 3>;

double distance(const double* d, const Vec3& c) {
  const double dx = d[0] - c[0], dy = d[1] - c[1], dz = d[2] - c[2];
  return std::sqrt(dx * dx + dy * dy + dz * dz);
}

// The mass-weighted mean offset of the stars within `radius` of `c`, summed in the order they
// are added.
struct CentreOfMass {
  Vec3 c;
  double radius;
  Vec3 sum{0, 0, 0};
  double mass = 0;
  std::size_t count = 0;
  // distance(d, c) <= radius decided on the squared distance s where it is clear: s below
  // radius^2 (1 - 1e-12) has sqrt(s) < radius, so its rounded root is <= radius, and s above
  // radius^2 (1 + 1e-12) has a rounded root > radius (the products round by 1e-16). Only the
  // stars in between (and NaN) take the root, so the decision is the root's, bit for bit.
  double inside_sq = radius * radius * (1.0 - 1e-12);
  double outside_sq = radius * radius * (1.0 + 1e-12);

  void add(const double* d, double m) {
    const double dx = d[0] - c[0], dy = d[1] - c[1], dz = d[2] - c[2];
    const double s = dx * dx + dy * dy + dz * dz;
    if (!(s <= inside_sq) && (s > outside_sq || !(std::sqrt(s) <= radius))) return;  // NaN: outside
    ++count;
    mass += m;
    for (int k = 0; k < 3; ++k) sum[k] += m * d[k];
  }
  // add() over n stars (offsets 3 per star) with the sums in registers and no branch on the
  // sphere (the stars come in row order, in and out at random: a branch mispredicts): a star
  // outside adds +-0.0, which leaves a sum bitwise as it was (a sum that starts at +0.0 is
  // never -0.0). Same terms, same order, so the bits of add() one by one.
  void add_all(const double* offsets, const double* masses, std::size_t n) {
    double sx = sum[0], sy = sum[1], sz = sum[2], ms = mass;
    std::size_t in_count = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double* d = offsets + 3 * i;
      const double dx = d[0] - c[0], dy = d[1] - c[1], dz = d[2] - c[2];
      const double s = dx * dx + dy * dy + dz * dz;
      bool in = s <= inside_sq;
      // Bitwise &, not &&: the common case must not branch on `in`.
      const bool edge = !in & (s <= outside_sq);
      if (__builtin_expect(edge, 0)) in = std::sqrt(s) <= radius;  // rare: at the sphere's edge
      // m or +0.0 through a bit mask: m * d exactly for a star inside, +-0.0 for one outside.
      std::uint64_t bits;
      std::memcpy(&bits, masses + i, sizeof bits);
      bits &= std::uint64_t{0} - static_cast<std::uint64_t>(in);
      double w;
      std::memcpy(&w, &bits, sizeof w);
      sx += w * d[0];
      sy += w * d[1];
      sz += w * d[2];
      ms += w;
      in_count += in;
    }
    sum = {sx, sy, sz};
    mass = ms;
    count += in_count;
  }
  Vec3 centre() const {
    Vec3 out = sum;
    if (mass > 0)
      for (auto& s : out) s /= mass;
    return out;
  }
};

// The stars nearest a centre, in row order: every star within radius() of it, and at most
// `budget` of them (more only on ties). Stars are offered one by one; whenever twice the budget
// are held, the radius drops to the budget-th smallest distance and the farther stars go.
class NearStars {
 public:
  NearStars(const Vec3& centre, std::size_t budget) : centre_(centre), budget_(budget) {}

  void add(const double* d, double m) {
    const double r = distance(d, centre_);
    if (!(r <= radius_)) return;
    distances_.push_back(r);
    offsets_.insert(offsets_.end(), d, d + 3);
    masses_.push_back(m);
    if (distances_.size() > 2 * budget_) trim();
  }

  void trim() {
    if (distances_.size() <= budget_) return;
    std::vector<double> sorted = distances_;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(budget_ - 1),
                     sorted.end());
    radius_ = sorted[budget_ - 1];
    std::size_t kept = 0;
    for (std::size_t i = 0; i < distances_.size(); ++i) {
      if (!(distances_[i] <= radius_)) continue;
      distances_[kept] = distances_[i];
      std::copy_n(offsets_.begin() + static_cast<std::ptrdiff_t>(3 * i), 3,
                  offsets_.begin() + static_cast<std::ptrdiff_t>(3 * kept));
      masses_[kept++] = masses_[i];
    }
    distances_.resize(kept);
    offsets_.resize(3 * kept);
    masses_.resize(kept);
  }

  // Whether every star within `radius` of `c` is held: the stars not held lie farther than
  // radius_ from centre_, so farther than radius_ - |c - centre_| from c.
  bool holds(const Vec3& c, double radius) const {
    if (radius_ == kInfinity) return true;
    return distance(c.data(), centre_) + radius <= radius_ * (1.0 - kHeldMargin);
  }

  // The held stars within `radius` of `c`, in row order, as a set around `c`; the sphere must be
  // held, so the new set again holds every star within its radius.
  NearStars narrowed(const Vec3& c, double radius) const {
    NearStars out(c, budget_);
    out.radius_ = radius;
    for (std::size_t i = 0; i < masses_.size(); ++i) {
      const double* d = offsets_.data() + 3 * i;
      const double r = distance(d, c);
      if (!(r <= radius)) continue;
      out.distances_.push_back(r);
      out.offsets_.insert(out.offsets_.end(), d, d + 3);
      out.masses_.push_back(masses_[i]);
    }
    return out;
  }

  std::size_t size() const { return masses_.size(); }

  // Room for `stars` offered stars (those a pass will hold at most), so that filling the set
  // does not copy it as it grows.
  void reserve(std::size_t stars) {
    stars = std::min(stars, 2 * budget_ + 1);
    distances_.reserve(stars);
    offsets_.reserve(3 * stars);
    masses_.reserve(stars);
  }

  void add_to(CentreOfMass& com) const { com.add_all(offsets_.data(), masses_.data(), size()); }

 private:
  Vec3 centre_;
  std::size_t budget_;
  double radius_ = kInfinity;
  std::vector<double> distances_, offsets_, masses_;
};

struct RadiusMass {
  double r;
  std::uint64_t q;
};

// The radius at which the sorted cumulative mass, from `below` (the mass at smaller radii),
// first reaches half of `total`. The crossing must lie among `stars`.
// The radius is that of the star at which the cumulative mass crosses in any order sorted by
// radius (ties share it), so a weighted selection finds it in O(n) where a sort took O(n log n):
// split at the middle element, and keep the side that holds the crossing.
double crossing_radius(std::vector<RadiusMass>& stars, std::uint64_t below, std::uint64_t total) {
  if (stars.empty()) return 0.0;
  const auto by_radius = [](const RadiusMass& a, const RadiusMass& b) { return a.r < b.r; };
  // Crossed before any star (no mass at all): the first star's radius.
  if (2 * below >= total) return std::min_element(stars.begin(), stars.end(), by_radius)->r;
  std::size_t lo = 0, hi = stars.size();
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    const auto at = [&](std::size_t i) { return stars.begin() + static_cast<std::ptrdiff_t>(i); };
    std::nth_element(at(lo), at(mid), at(hi), by_radius);
    std::uint64_t lower = 0;
    for (std::size_t i = lo; i < mid; ++i) lower += stars[i].q;
    if (2 * (below + lower) >= total) {
      hi = mid;  // crossed before the middle element
    } else if (2 * (below + lower + stars[mid].q) >= total) {
      return stars[mid].r;
    } else {
      below += lower + stars[mid].q;
      lo = mid + 1;
    }
  }
  // Never crossed (the mass beyond the stars is missing): the largest radius, as a sort gives.
  return std::max_element(stars.begin(), stars.end(), by_radius)->r;
}

}  // namespace

StellarCentre find_stellar_centre(const VisitStarBlocks& visit, double box_size, double pos_factor,
                                  double vel_factor, std::size_t budget,
                                  std::size_t subsample_stars) {
  StellarCentre out;
  budget = std::max<std::size_t>(budget, 1);
  // Offsets from the first star, unwrapped in the periodic box.
  bool have_origin = false;
  Vec3 origin{0, 0, 0};
  auto offset = [&](const double* x, double* d) {
    for (int k = 0; k < 3; ++k) d[k] = periodic_offset(x[k] - origin[k], box_size);
  };
  auto pass = [&](bool velocities, auto&& per_star) {
    ++out.passes;
    visit(velocities, [&](const CentreBlock& b) {
      for (std::size_t i = 0; i < b.n; ++i) per_star(b, i);
    });
  };

  // Pass 1: the centre of mass of all the stars, their count and the largest mass.
  CentreOfMass all{{0, 0, 0}, kInfinity};
  double max_mass = 0;
  pass(true, [&](const CentreBlock& b, std::size_t i) {
    if (!have_origin) {
      std::copy_n(b.coordinates + 3 * i, 3, origin.begin());
      have_origin = true;
    }
    double d[3];
    offset(b.coordinates + 3 * i, d);
    all.add(d, b.masses[i]);
    max_mass = std::max(max_mass, b.masses[i]);
  });
  const std::size_t n = all.count;
  Vec3 c = all.centre();
  const std::size_t n_stop = std::min(
      n, std::min(kShrinkStopMax,
                  std::max(kShrinkStopFloor, static_cast<std::size_t>(std::ceil(0.01 * n)))));

  // Pass 2: the radius that holds them all and, for a large galaxy, every stride-th star (by
  // row: the same stars for any block size and budget), else the stars nearest the centre. (A
  // large galaxy's nearest stars are taken after its wide spheres, around their centre: taken
  // here too they were a copy of every held star, 1e6 at N = 1e6, that was never used.)
  const std::size_t stride = subsample_stars > 0 ? n / subsample_stars : 0;
  double radius = 0;
  NearStars near(c, budget);
  NearStars subsample(c, n);  // holds every star offered
  if (stride < 2) near.reserve(n);
  std::size_t row = 0;
  pass(false, [&](const CentreBlock& b, std::size_t i) {
    double d[3];
    offset(b.coordinates + 3 * i, d);
    radius = std::max(radius, distance(d, c));
    if (stride < 2) {
      near.add(d, b.masses[i]);
    } else if (row++ % stride == 0) {
      subsample.add(d, b.masses[i]);
    }
  });
  near.trim();

  // Shrinking spheres: a step runs on the held stars while they hold its sphere, else it is a
  // pass that also takes the stars nearest the new centre. The held stars are narrowed in
  // levels, each the stars of the one before within kNarrowSlack sphere radii of a later
  // centre, so that a step costs about the stars its sphere holds rather than all those held
  // (a galaxy held at once holds all its stars: 240 steps over 1e6 stars were 80 % of the
  // reading). A step sums over the narrowest level that holds its sphere: the same stars in the
  // same row order as a pass, so the same bits. The steps stop before the sphere holds fewer
  // than `stop` of the stars `root` is drawn from.
  auto shrink = [&](NearStars& root, std::size_t stop) {
    std::vector<NearStars> narrower;  // each inside the one before, the first inside `root`
    for (;;) {
      const double shrunk = kShrinkFactor * radius;
      // Stars at one point (radius 0) would never leave the sphere: stop there too.
      if (!(shrunk > 0.0)) break;
      CentreOfMass next{c, shrunk};
      while (!narrower.empty() && !narrower.back().holds(c, shrunk)) narrower.pop_back();
      const NearStars* used = nullptr;
      if (!narrower.empty()) {
        used = &narrower.back();
      } else if (root.holds(c, shrunk)) {
        used = &root;
      }
      if (used) {
        used->add_to(next);
        out.sphere_visits += used->size();
      } else {
        out.sphere_visits += n;
        NearStars fresh(c, budget);
        pass(false, [&](const CentreBlock& b, std::size_t i) {
          double d[3];
          offset(b.coordinates + 3 * i, d);
          next.add(d, b.masses[i]);
          fresh.add(d, b.masses[i]);
        });
        fresh.trim();
        root = std::move(fresh);
        used = &root;
      }
      if (next.count < stop) break;
      c = next.centre();
      radius = shrunk;
      // A level much larger than the sphere's stars: narrow it around the new centre.
      const double slack_radius = kNarrowSlack * radius;
      if (used->size() > kNarrowRatio * next.count && used->holds(c, slack_radius))
        narrower.push_back(used->narrowed(c, slack_radius));
    }
  };
  // A large galaxy: the wide spheres, which hold most stars and cost most of the steps, run on
  // the subsample (whose centres of mass there are good to ~ r / sqrt(subsample_stars / 10), 1.4 %
  // of r), until a sphere would hold fewer than a tenth of it; the narrow ones, which decide the
  // centre, on every star from there.
  if (stride >= 2) {
    shrink(subsample, std::max<std::size_t>(subsample.size() / 10, 1));
    subsample = NearStars(c, 1);
    near = NearStars(c, budget);
    near.reserve(n);
    pass(false, [&](const CentreBlock& b, std::size_t i) {
      double d[3];
      offset(b.coordinates + 3 * i, d);
      near.add(d, b.masses[i]);
    });
    near.trim();
  }
  shrink(near, n_stop);
  for (int k = 0; k < 3; ++k) {
    const double p = origin[k] + c[k];
    out.center_code[k] = p - box_size * std::floor(p / box_size);
  }

  // Half-mass radius: the crossing is narrowed by histograms of mass over radius until the
  // stars of its bin fit the budget (one pass when they all do), then found among them.
  auto radius_of = [&](const double* x) {
    double s = 0;
    for (int k = 0; k < 3; ++k) {
      const double dk = periodic_offset(x[k] - out.center_code[k], box_size) * pos_factor;
      s += dk * dk;
    }
    return std::sqrt(s);
  };
  auto quanta = [&](double m) {
    return max_mass > 0 ? static_cast<std::uint64_t>(std::llround(m / max_mass * kMassQuanta)) : 0;
  };
  std::uint64_t total = 0;
  double r_max = 0;
  std::vector<RadiusMass> held;
  held.reserve(std::min(n, budget + 1));
  bool all_held = true;
  pass(false, [&](const CentreBlock& b, std::size_t i) {
    const double r = radius_of(b.coordinates + 3 * i);
    const std::uint64_t q = quanta(b.masses[i]);
    total += q;
    r_max = std::max(r_max, r);
    if (!all_held) return;
    held.push_back({r, q});
    if (held.size() > budget) {
      all_held = false;
      std::vector<RadiusMass>().swap(held);
    }
  });
  std::uint64_t below = 0;  // the mass at radii < lo
  double lo = 0, hi = std::nextafter(r_max, kInfinity);
  while (!all_held) {
    std::vector<double> edges(kRadiusBins + 1);
    for (std::size_t k = 0; k < kRadiusBins; ++k)
      edges[k] = lo + (hi - lo) * static_cast<double>(k) / static_cast<double>(kRadiusBins);
    edges[kRadiusBins] = hi;
    std::vector<std::uint64_t> bin_mass(kRadiusBins, 0);
    std::vector<std::size_t> bin_count(kRadiusBins, 0);
    std::vector<double> bin_min(kRadiusBins, kInfinity), bin_max(kRadiusBins, -kInfinity);
    pass(false, [&](const CentreBlock& b, std::size_t i) {
      const double r = radius_of(b.coordinates + 3 * i);
      if (!(r >= lo && r < hi)) return;
      const auto k = static_cast<std::size_t>(std::upper_bound(edges.begin(), edges.end(), r) -
                                              edges.begin() - 1);
      bin_mass[k] += quanta(b.masses[i]);
      ++bin_count[k];
      bin_min[k] = std::min(bin_min[k], r);
      bin_max[k] = std::max(bin_max[k], r);
    });
    std::size_t k = 0;
    while (k + 1 < kRadiusBins && 2 * (below + bin_mass[k]) < total) below += bin_mass[k++];
    lo = edges[k];
    hi = edges[k + 1];
    if (bin_count[k] > budget && bin_min[k] == bin_max[k]) {  // more stars than fit, one radius
      out.halfmass_radius_kpc = bin_min[k];
      break;
    }
    if (bin_count[k] <= budget) {
      pass(false, [&](const CentreBlock& b, std::size_t i) {
        const double r = radius_of(b.coordinates + 3 * i);
        if (r >= lo && r < hi) held.push_back({r, quanta(b.masses[i])});
      });
      all_held = true;
    }
  }
  if (all_held) out.halfmass_radius_kpc = crossing_radius(held, below, total);

  // The mass-weighted velocity of the stars within the half-mass radius.
  double mass = 0;
  Vec3 mv{0, 0, 0};
  pass(true, [&](const CentreBlock& b, std::size_t i) {
    if (radius_of(b.coordinates + 3 * i) > out.halfmass_radius_kpc) return;
    const double m = b.masses[i];
    mass += m;
    for (int k = 0; k < 3; ++k) mv[k] += m * b.velocities[3 * i + k] * vel_factor;
  });
  for (int k = 0; k < 3; ++k) out.bulk_velocity_kms[k] = mv[k] / mass;
  return out;
}

}  // namespace ifusim::tng
