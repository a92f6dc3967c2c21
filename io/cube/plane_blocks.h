#pragma once
// The cube writers' shared transposition: a cube held spaxel-major (values[spaxel * n_wave + k])
// is stored wavelength-major ((n_wave, ny, nx), as FITS and the HDF5 layout keep it) a block of
// whole wavelength planes at a time, so that no transposed copy of the whole cube is made (1.3 GB
// of float on MUSE-WFM).
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "data/datacube.h"

namespace ifusim::detail {

// write(k0, k1, block) for consecutive plane ranges [k0, k1) covering the cube, block holding
// planes k0..k1-1 as T, plane-major (block[(k - k0) * n_spaxels + spaxel]), with the value of
// voxel i (spaxel-major, i = spaxel * n_wave + k) given by value(i): the values of a derived
// array (MaNGA's IVAR and MASK) are made a block at a time, never as a whole cube. A block holds
// at most max_elements values, and at least one plane. The block is the writer's scratch
// (cfitsio takes a non-const pointer).
template <class T, class Value, class Write>
void for_each_plane_block_of(const CubeShape& shape, std::size_t max_elements, Value&& value,
                             Write&& write) {
  const std::size_t n_spaxels = shape.n_spaxels();
  if (n_spaxels == 0 || shape.n_wave == 0) return;
  const std::size_t planes =
      std::clamp<std::size_t>(max_elements / n_spaxels, 1, static_cast<std::size_t>(shape.n_wave));
  std::vector<T> block(planes * n_spaxels);
  for (int k0 = 0; k0 < shape.n_wave; k0 += static_cast<int>(planes)) {
    const int k1 = std::min<int>(shape.n_wave, k0 + static_cast<int>(planes));
#pragma omp parallel for schedule(static)
    for (long long sp = 0; sp < static_cast<long long>(n_spaxels); ++sp)
      for (int k = k0; k < k1; ++k)
        block[static_cast<std::size_t>(k - k0) * n_spaxels + static_cast<std::size_t>(sp)] =
            static_cast<T>(value(static_cast<std::size_t>(sp) * shape.n_wave + k));
    write(k0, k1, block.data());
  }
}

// The same for a held array: block values are static_cast<T>(values[i]).
template <class T, class V, class Write>
void for_each_plane_block(const CubeShape& shape, const std::vector<V>& values,
                          std::size_t max_elements, Write&& write) {
  const V* v = values.data();
  for_each_plane_block_of<T>(
      shape, max_elements, [v](std::size_t i) { return v[i]; }, std::forward<Write>(write));
}

}  // namespace ifusim::detail
