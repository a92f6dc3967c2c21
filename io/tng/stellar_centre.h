#pragma once
// The centre, half-mass radius and bulk velocity of a cutout's stars, found in passes over them
// with bounded memory, so that a galaxy larger than memory can be centred
// (input.stream_block_stars, docs/streaming.md) and a galaxy held at once gets the same bits.
//
// - Centre: shrinking spheres on current stellar mass (Power et al. 2003, MNRAS 338, 14,
//   sect. 2.5), in the periodic box: start from the centre of mass of all the stars and the
//   sphere around it that holds them all, shrink the radius by 2.5 % a step and move to the
//   centre of mass inside, and stop before fewer than min(1000, 1 % of N) stars remain (with a
//   floor of 50, so that a small, subsampled cutout is not centred on a handful of particles).
//   In a galaxy of N >= 1e5 stars the wide spheres, which cost most of the steps (their sum
//   over the steps of the stars inside was 1e8 star visits at N = 1e6), run on every
//   (N / 5e4)-th star until a sphere holds fewer than a tenth of those; the rest on all stars.
// - Half-mass radius: the smallest distance r_i at which the current mass within r_i reaches
//   half the total. The masses are summed in 2^-32 of the largest mass as integers, so the sum
//   does not depend on the order the stars come in.
// - Bulk velocity: the mass-weighted velocity of the stars within the half-mass radius.
//
// Every sum runs over the stars in row order whatever the blocks, and the stars the iteration
// keeps in memory (at most `budget` of those near the centre, plus ties) are exactly those the
// next sphere can hold: the result is bitwise the same for any block size and any budget.
#include <array>
#include <cstddef>
#include <functional>

namespace ifusim::tng {

// One block of stars in row order: Coordinates (comoving code units, 3 per star), Masses (code
// units) and, when asked for, Velocities (code units, 3 per star; else nullptr).
struct CentreBlock {
  const double* coordinates = nullptr;
  const double* masses = nullptr;
  const double* velocities = nullptr;
  std::size_t n = 0;
};

// One pass: calls `block` for every block of the stars, in row order. `velocities`: whether the
// pass needs them.
using VisitStarBlocks =
    std::function<void(bool velocities, const std::function<void(const CentreBlock&)>& block)>;

struct StellarCentre {
  std::array<double, 3> center_code{0, 0, 0};  // in [0, box)
  std::array<double, 3> bulk_velocity_kms{0, 0, 0};
  double halfmass_radius_kpc = 0;
  std::size_t passes = 0;         // over the stars
  std::size_t sphere_visits = 0;  // stars tested against a shrinking sphere, over its steps
};

// The subsample the wide spheres of a large galaxy run on: with N >= 2 subsample_stars stars,
// every (N / subsample_stars)-th star by row.
inline constexpr std::size_t kCentreSubsampleStars = 50000;

// pos_factor, vel_factor: code units -> physical kpc, km/s. `budget`: how many stars one step
// may hold (>= 1). `subsample_stars`: see kCentreSubsampleStars; 0 runs every sphere on every
// star. The stars must be finite and at least one.
StellarCentre find_stellar_centre(const VisitStarBlocks& visit, double box_size, double pos_factor,
                                  double vel_factor, std::size_t budget,
                                  std::size_t subsample_stars = kCentreSubsampleStars);

}  // namespace ifusim::tng
