#include "data/datacube.h"

namespace ifusim {

std::vector<double> spaxel_means(const Cube& cube) {
  const std::size_t n_spaxels = cube.shape.n_spaxels();
  const auto n_wave = static_cast<std::size_t>(cube.shape.n_wave);
  std::vector<double> mean(n_spaxels, 0.0);
  if (n_wave == 0) return mean;
  const std::size_t whole = n_wave / kSpaxelMeanParts * kSpaxelMeanParts;
#pragma omp parallel for schedule(static)
  for (long long s = 0; s < static_cast<long long>(n_spaxels); ++s) {
    const float* values = cube.data.data() + static_cast<std::size_t>(s) * n_wave;
    double part[kSpaxelMeanParts] = {};
    for (std::size_t k = 0; k < whole; k += kSpaxelMeanParts)
      for (std::size_t q = 0; q < kSpaxelMeanParts; ++q) part[q] += values[k + q];
    for (std::size_t k = whole; k < n_wave; ++k) part[k - whole] += values[k];
    double sum = 0.0;
    for (const double p : part) sum += p;
    mean[static_cast<std::size_t>(s)] = sum / static_cast<double>(n_wave);
  }
  return mean;
}

}  // namespace ifusim
