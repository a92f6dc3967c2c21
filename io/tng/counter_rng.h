#pragma once
// The synthetic galaxies' random numbers: a counter-based generator (cf. Salmon et al. 2011,
// "Parallel random numbers: as easy as 1, 2, 3"). A value is a hash of (key, particle index,
// draw), not the next state of a sequence, so any block of particles is generated on its own, in
// any order and on any thread, with the same bits.
#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace ifusim::tng {

// splitmix64's finaliser (Steele, Lea & Flood 2014): a bijective 64-bit mixer. Also derives
// the keys and seeds of related galaxies from one seed.
inline std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct CounterRng {
  std::uint64_t key;
  // Uniform in the open interval (0, 1): never 0, so logarithms of it are finite.
  double uniform(std::uint64_t index, std::uint64_t draw) const {
    const std::uint64_t h = mix64(mix64(key ^ mix64(index)) + draw * 0xd6e8feb86659fd93ULL);
    return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
  }
  // Two standard normals (Box & Muller 1958) from draws `draw` and `draw + 1`.
  std::array<double, 2> normals(std::uint64_t index, std::uint64_t draw) const {
    const double r = std::sqrt(-2.0 * std::log(uniform(index, draw)));
    const double t = 2.0 * std::numbers::pi * uniform(index, draw + 1);
    return {r * std::cos(t), r * std::sin(t)};
  }
};

}  // namespace ifusim::tng
