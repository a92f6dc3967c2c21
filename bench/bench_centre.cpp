// The stellar centre of a large galaxy (io/tng/stellar_centre.h): every shrinking sphere on every
// star against the wide spheres on a subsample. Prints, per galaxy size, the stars tested
// against spheres, the time, their ratios and how far the two centres lie apart.
// Usage: bench_centre [N ...]   (default 1e5 1e6 4e6; an exponential disc, h = 3, z0 = 0.3)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "io/tng/stellar_centre.h"

using namespace ifusim;

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(static_cast<std::size_t>(std::atof(argv[i])));
  if (sizes.empty()) sizes = {100000, 1000000, 4000000};
  std::printf("%9s %12s %12s %7s %8s %8s %7s %10s\n", "stars", "visits_all", "visits_sub", "ratio",
              "all_s", "sub_s", "ratio", "|dc|");
  for (const std::size_t n : sizes) {
    constexpr double kBox = 1e4, kAt = 5000.0;
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> u(0, 1);
    std::normal_distribution<double> g(0, 1);
    std::vector<double> x, m, v;
    for (std::size_t i = 0; i < n; ++i) {
      const double r = -3.0 * std::log((1 - u(rng)) * (1 - u(rng))), phi = 2 * M_PI * u(rng);
      x.insert(x.end(), {kAt + r * std::cos(phi), kAt + r * std::sin(phi), kAt + 0.3 * g(rng)});
      m.push_back(0.5 + u(rng));
      v.insert(v.end(), {g(rng), g(rng), g(rng)});
    }
    const tng::VisitStarBlocks visit = [&](bool velocities,
                                           const std::function<void(const tng::CentreBlock&)>& fn) {
      fn({x.data(), m.data(), velocities ? v.data() : nullptr, n});
    };
    auto timed = [&](std::size_t subsample, double& seconds) {
      const auto t0 = std::chrono::steady_clock::now();
      const tng::StellarCentre c = tng::find_stellar_centre(visit, kBox, 1.0, 1.0, n, subsample);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return c;
    };
    double all_s = 0, sub_s = 0;
    const tng::StellarCentre all = timed(0, all_s);
    const tng::StellarCentre sub = timed(tng::kCentreSubsampleStars, sub_s);
    double d2 = 0;
    for (int k = 0; k < 3; ++k) d2 += std::pow(all.center_code[k] - sub.center_code[k], 2);
    std::printf("%9zu %12zu %12zu %7.1f %8.3f %8.3f %7.1f %10.2e\n", n, all.sphere_visits,
                sub.sphere_visits, double(all.sphere_visits) / double(sub.sphere_visits), all_s,
                sub_s, all_s / sub_s, std::sqrt(d2));
  }
}
