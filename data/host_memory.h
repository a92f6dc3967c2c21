#pragma once
// Large host arrays in transparent huge pages, where the kernel offers them. A cube of MUSE-WFM
// (300 x 300 spaxels x 3721 bins, 2.7 GB of double) written for the first time takes ~650,000
// page faults in 4 kB pages: 2 to 4 s of system time on the 2-core development VM, more than
// the binned method's whole product. In 2 MB pages it takes ~1,300. Linux gives huge pages to
// regions that ask for them (madvise) in its default "madvise" mode; elsewhere this does nothing.
#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace ifusim {

inline constexpr std::size_t kHugePageBytes = std::size_t(2) << 20;

// Asks for huge pages over the whole 2 MB pages inside [data, data + bytes), before they are
// first touched. A hint: failure (an old kernel, THP off) leaves ordinary pages.
inline void advise_huge_pages([[maybe_unused]] void* data, [[maybe_unused]] std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const std::uintptr_t last = (begin + bytes) / kHugePageBytes * kHugePageBytes;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#endif
}

// Maps in the pages of [data, data + bytes), freshly allocated storage that holds no objects yet,
// on all of OpenMP's threads at once. The first write to fresh memory is most of the cost of
// filling a cube here: the kernel zeroes each page, and on a VM the host may first have to back it
// (the 2-core development VM, which returns freed memory to its host: 3.0 s to fill a 1.34 GB
// MUSE-WFM float cube on one thread, 1.55 s on two, docs/benchmarks.md). Regions below 64 MB are
// left to the caller's fill.
void populate_pages(void* data, std::size_t bytes);

// Zeroes [data, data + bytes) on all of OpenMP's threads at once where it is large (a partial
// array's fill, memory::fill_zero): on fresh storage the fill is the first write, whose page faults
// and kernel zeroing are most of its cost on the VM (populate_pages), and take one thread's time
// per thread. Below a few MB, one memset.
void zero_bytes(void* data, std::size_t bytes);

// An empty vector with room for n values, its storage advised huge pages and mapped in on all
// threads (an allocation of many MB is a fresh mapping from malloc, untouched until filled).
template <class T>
std::vector<T> large_reserved(std::size_t n) {
  std::vector<T> v;
  v.reserve(n);
  advise_huge_pages(v.data(), n * sizeof(T));
  populate_pages(v.data(), n * sizeof(T));
  return v;
}

// n copies of value in such a vector (the fill itself, std::vector's, runs on one thread over
// pages already there).
template <class T>
std::vector<T> large_vector(std::size_t n, const T& value = T()) {
  std::vector<T> v = large_reserved<T>(n);
  v.resize(n, value);
  return v;
}

// A copy of [first, first + n) made the same way: a caller's large array taken in (the cotangent
// of a MUSE-WFM cube, 2.7 GB: 2.3 s as a plain std::vector copy on the H100 node, its time in
// page faults, docs/gpu.md).
template <class T>
std::vector<T> large_copy(const T* first, std::size_t n) {
  std::vector<T> v = large_reserved<T>(n);
  v.assign(first, first + n);
  return v;
}

}  // namespace ifusim
