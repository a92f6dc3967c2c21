#pragma once
// Counter-based random numbers for the noise models: every voxel's numbers are a function of the
// seed and the voxel's index alone, so the cube is the same for any number of threads and any
// schedule. SplitMix64 (Steele, Lea & Flood 2014, OOPSLA): the n-th output of the generator
// seeded with s is mix64(s + (n + 1) golden), so any position of a stream is reached directly.
#include <cmath>
#include <cstdint>
#include <numbers>

namespace ifusim {

inline constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// SplitMix64's output function.
inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in (0, 1): 53 random bits, offset by half a step so that log() never sees 0.
inline double to_unit(std::uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;
}

// The state of a seed's stream: the seed mixed first, so that nearby seeds give unrelated streams.
inline std::uint64_t counter_state(std::uint64_t seed) {
  return mix64(seed);
}

// A standard normal for counter `index` of the stream of `state`: positions 2 index and
// 2 index + 1 (two uniforms, Box & Muller 1958).
inline double counter_normal_of_state(std::uint64_t state, std::uint64_t index) {
  const double u1 = to_unit(mix64(state + (2 * index + 1) * kGolden));
  const double u2 = to_unit(mix64(state + (2 * index + 2) * kGolden));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// The key of the stream of its own that element `index` draws from, where an element needs an
// unbounded number of uniforms (a Poisson variate by rejection): a mixed function of the state
// and the index (mix64 is a bijection, so distinct indices give distinct keys).
inline std::uint64_t counter_key(std::uint64_t state, std::uint64_t index) {
  return mix64(state ^ mix64(index + 0x632be59bd9b4e019ULL));
}

// The uniforms of the stream `key` from position `position` on.
class CounterStream {
 public:
  CounterStream(std::uint64_t key, std::uint64_t position) : key_(key), position_(position) {}
  double uniform() { return to_unit(mix64(key_ + (++position_) * kGolden)); }
  double normal() {  // Box & Muller 1958, from the next two uniforms
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  std::uint64_t key_;
  std::uint64_t position_;
};

}  // namespace ifusim
