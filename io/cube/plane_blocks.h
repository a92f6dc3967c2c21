#pragma once
// The cube writers' shared transposition: a cube held spaxel-major (values[spaxel * n_wave + k])
// is stored wavelength-major ((n_wave, ny, nx), as FITS and the HDF5 layout keep it) a block of
// whole wavelength planes at a time, so that no transposed copy of the whole cube is made (1.3 GB
// of float on MUSE-WFM).
//
// Speed (issue 22): a block holds at least kMinBlockPlanes planes, so that each spaxel's run of
// the block's planes is whole cache lines (2 planes, 8 bytes of every 64-byte line, made
// MUSE-WFM's transposition read the cube 8 times over and open ~1,900 parallel regions an
// array), made in tiles of spaxels; and the block being written overlaps with the next one being
// made: two buffers, the calling thread writes block b while the others fill block b + 1, so the
// file's writes (cfitsio, HDF5: one thread) are the pass's only serial part.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <limits>
#include <utility>
#include <vector>

#include "data/datacube.h"

namespace ifusim::detail {

// 32 planes of float: two 64-byte cache lines of each spaxel's spectrum (11.5 MB a block on
// MUSE-WFM's 90,000 spaxels). Transposing MUSE-WFM's 1.3 GB on one thread of the development VM
// (huge pages): 1.36 s a pass at 2 planes untiled, 0.36 s at 32 planes in tiles, 0.33 s at 64.
inline constexpr std::size_t kMinBlockPlanes = 32;
// Spaxels a tile: 64 spaxels' lines of 32 planes (8 to 12 kB) fit the L1 cache.
inline constexpr std::size_t kTileSpaxels = 64;

// write(k0, k1, block) for consecutive plane ranges [k0, k1) covering the cube, in order, on the
// calling thread (the file libraries are not thread-safe), block holding planes k0..k1-1 as T,
// plane-major (block[(k - k0) * n_spaxels + spaxel]), with the value of voxel i (spaxel-major,
// i = spaxel * n_wave + k) given by value(i): the values of a derived array (MaNGA's IVAR and
// MASK) are made a block at a time, never as a whole cube. A block holds
// max(max_elements / n_spaxels, kMinBlockPlanes) planes (at least one, at most the cube's), and
// two blocks exist at a time. value(i) is called from any thread and must not throw; an exception
// from write stops the pass and is rethrown here. The block is the writer's scratch (cfitsio
// takes a non-const pointer).
template <class T, class Value, class Write>
void for_each_plane_block_of(const CubeShape& shape, std::size_t max_elements, Value&& value,
                             Write&& write) {
  const std::size_t n_spaxels = shape.n_spaxels();
  if (n_spaxels == 0 || shape.n_wave == 0) return;
  const std::size_t n_wave = static_cast<std::size_t>(shape.n_wave);
  const std::size_t planes =
      std::clamp<std::size_t>(std::max(max_elements / n_spaxels, kMinBlockPlanes), 1, n_wave);
  const std::size_t n_blocks = (n_wave + planes - 1) / planes;
  std::vector<T> buffers[2] = {
      std::vector<T>(planes * n_spaxels),
      n_blocks > 1 ? std::vector<T>(planes * n_spaxels) : std::vector<T>()};
  std::exception_ptr failed;
  // The phase whose write failed: every thread reads it after that phase's barrier and leaves
  // there, together (atomic: thread 0 may already be in the next phase when another reads it).
  constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  std::atomic<std::size_t> failed_phase{kNone};
  // Phase p: the calling thread (thread 0) writes block p - 1 (if any) while the other threads
  // fill block p (if any) a tile of spaxels at a time, taken from a counter; thread 0 takes tiles
  // too once its write is done (a write into memory is quicker than a block's transposition, so
  // thread 0 would otherwise wait at the barrier). Each block has its counter, reset for phase
  // p + 1 during phase p, when no one uses it; a barrier ends each phase.
  const std::size_t n_tiles = (n_spaxels + kTileSpaxels - 1) / kTileSpaxels;
  std::atomic<std::size_t> next_tile[2];
  next_tile[0].store(0);
  next_tile[1].store(0);
#pragma omp parallel
  {
    const int me = omp_get_thread_num();
    for (std::size_t p = 0; p <= n_blocks; ++p) {
      if (me == 0 && p > 0) {
        const std::size_t k0 = (p - 1) * planes, k1 = std::min(n_wave, k0 + planes);
        try {
          write(static_cast<int>(k0), static_cast<int>(k1), buffers[(p - 1) % 2].data());
        } catch (...) {
          failed = std::current_exception();
          failed_phase.store(p, std::memory_order_relaxed);
        }
      }
      if (me == 0) next_tile[(p + 1) % 2].store(0, std::memory_order_relaxed);
      if (p < n_blocks && failed_phase.load(std::memory_order_relaxed) > p) {
        const std::size_t k0 = p * planes, k1 = std::min(n_wave, k0 + planes);
        T* block = buffers[p % 2].data();
        // Tiles of spaxels, each a few planes of their spectra (cache lines) turned into rows of
        // the planes.
        for (std::size_t t = next_tile[p % 2].fetch_add(1, std::memory_order_relaxed); t < n_tiles;
             t = next_tile[p % 2].fetch_add(1, std::memory_order_relaxed)) {
          const std::size_t s0 = t * kTileSpaxels, s1 = std::min(n_spaxels, s0 + kTileSpaxels);
          for (std::size_t k = k0; k < k1; ++k) {
            T* out = block + (k - k0) * n_spaxels;
            for (std::size_t sp = s0; sp < s1; ++sp)
              out[sp] = static_cast<T>(value(sp * n_wave + k));
          }
        }
      }
#pragma omp barrier
      if (failed_phase.load(std::memory_order_relaxed) <= p) break;
    }
  }
  if (failed) std::rethrow_exception(failed);
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
