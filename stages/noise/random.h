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

// The key of the stream of its own that element `index` draws from, where an element needs an
// unbounded number of uniforms (a Poisson variate by rejection, a Ziggurat's rare retries): a
// mixed function of the state and the index (mix64 is a bijection, so distinct indices give
// distinct keys).
inline std::uint64_t counter_key(std::uint64_t state, std::uint64_t index) {
  return mix64(state ^ mix64(index + 0x632be59bd9b4e019ULL));
}

// The uniforms of the stream `key` from position `position` on.
class CounterStream {
 public:
  CounterStream(std::uint64_t key, std::uint64_t position) : key_(key), position_(position) {}
  std::uint64_t bits() { return mix64(key_ + (++position_) * kGolden); }
  double uniform() { return to_unit(bits()); }
  double normal() {  // Box & Muller 1958, from the next two uniforms
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  std::uint64_t key_;
  std::uint64_t position_;
};

// The Ziggurat method for the standard normal (Marsaglia & Tsang 2000, J. Stat. Softw. 5(8)),
// with 256 layers of equal area v under f(x) = exp(-x^2 / 2): r = 3.6541528853610088 is where
// the last layer's edge lies and v = 0.00492867323399 their area (the constants of Marsaglia &
// Tsang's 256-layer table, also numpy's). Exact: a draw inside a layer's rectangle is returned
// at once (98.8% of draws: one 64-bit word, a table look-up, a multiply and a compare), the
// wedges are accepted against f itself and the tail beyond r is sampled exactly (Marsaglia 1964).
struct ZigguratTables {
  static constexpr int kLayers = 256;
  static constexpr double kR = 3.6541528853610088;
  static constexpr double kV = 0.00492867323399;
  double x[kLayers + 1];  // layer i spans [0, x[i]) (x[0] = v / f(r): the base with its tail)
  double f[kLayers + 1];  // f(x[i])
  ZigguratTables() {
    const double fr = std::exp(-0.5 * kR * kR);
    x[0] = kV / fr;
    x[1] = kR;
    for (int i = 1; i < kLayers - 1; ++i)
      x[i + 1] = std::sqrt(-2.0 * std::log(kV / x[i] + std::exp(-0.5 * x[i] * x[i])));
    x[kLayers] = 0.0;
    for (int i = 0; i <= kLayers; ++i) f[i] = std::exp(-0.5 * x[i] * x[i]);
  }
};

inline const ZigguratTables& ziggurat_tables() {
  static const ZigguratTables tables;
  return tables;
}

// A standard normal from the 64-bit word `first` and, only when that word is rejected (~1.2%),
// the words of `more()`. Bits 0-7 pick the layer, bit 8 the sign, bits 11-63 the position.
template <class More>
inline double ziggurat_normal(const ZigguratTables& t, std::uint64_t first, More&& more) {
  std::uint64_t b = first;
  for (;;) {
    const int i = static_cast<int>(b & 0xff);
    const double sign = (b & 0x100) ? -1.0 : 1.0;
    const double u = static_cast<double>(b >> 11) * 0x1.0p-53;  // [0, 1)
    const double x = u * t.x[i];
    if (x < t.x[i + 1]) return sign * x;  // inside the rectangle under the next layer
    if (i == 0) {                         // the tail beyond r (Marsaglia 1964)
      for (;;) {
        const double xt = -std::log(to_unit(more())) / ZigguratTables::kR;
        const double yt = -std::log(to_unit(more()));
        if (2.0 * yt > xt * xt) return sign * (ZigguratTables::kR + xt);
      }
    }
    // The wedge between f(x[i]) and f(x[i + 1]): accept under the curve.
    const double y = t.f[i] + to_unit(more()) * (t.f[i + 1] - t.f[i]);
    if (y < std::exp(-0.5 * x * x)) return sign * x;
    b = more();
  }
}

// A standard normal for counter `index` of the stream of `state`: the Ziggurat's first word is
// position `index` of the stream, its rare further words come from the stream of
// counter_key(state, index), so every index's value is a function of the state and the index
// alone (the same for any thread count, schedule or device count).
inline double counter_normal_of_state(std::uint64_t state, std::uint64_t index,
                                      const ZigguratTables& tables = ziggurat_tables()) {
  const std::uint64_t first = mix64(state + (index + 1) * kGolden);
  std::uint64_t key = 0, position = 0;
  return ziggurat_normal(tables, first, [&] {
    if (position == 0) key = counter_key(state, index);
    return mix64(key + (++position) * kGolden);
  });
}

}  // namespace ifusim
