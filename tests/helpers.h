#pragma once
// Shared test fixtures: random star sets (never all-zero) placed on a mesh.
#include <map>
#include <random>
#include <string>
#include <vector>

#include "data/datacube.h"
#include "data/galaxy_data.h"

namespace ifusim::test {

using ifusim::HostStars;
using ifusim::put_stars;

// The values of a run's maps, by name (what the tests compare).
inline std::map<std::string, std::vector<double>> map_values(std::map<std::string, SkyMap> maps) {
  std::map<std::string, std::vector<double>> out;
  for (auto& [name, map] : maps) out[name] = std::move(map.values);
  return out;
}

// Positions in a Gaussian blob of `scale_kpc`, log-normal masses around 1e6 Msun.
inline HostStars random_stars(std::size_t n, unsigned seed, double scale_kpc = 5.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> pos(0.0, scale_kpc), vel(0.0, 150.0), logm(6.0, 0.3);
  std::uniform_real_distribution<double> age(0.05, 13.0), z(0.0005, 0.04);
  HostStars s;
  for (std::size_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) s.position_kpc.push_back(static_cast<float>(pos(rng)));
    for (int c = 0; c < 3; ++c) s.velocity_kms.push_back(static_cast<float>(vel(rng)));
    const double m = std::pow(10.0, logm(rng));
    s.mass_msun.push_back(static_cast<float>(m));
    s.initial_mass_msun.push_back(static_cast<float>(m * 1.6));
    s.metallicity.push_back(static_cast<float>(z(rng)));
    s.age_gyr.push_back(static_cast<float>(age(rng)));
  }
  return s;
}

}  // namespace ifusim::test
