#include "data/host_memory.h"

#include <algorithm>
#include <cstring>

namespace ifusim {

void populate_pages(void* data, std::size_t bytes) {
  constexpr std::size_t kThresholdBytes = std::size_t(64) << 20;
  if (data == nullptr || bytes < kThresholdBytes) return;
  // Pieces of 8 huge pages: many per thread, so that a static split balances.
  constexpr std::size_t kPieceBytes = 8 * kHugePageBytes;
  auto* begin = static_cast<unsigned char*>(data);
  const long long pieces = static_cast<long long>((bytes + kPieceBytes - 1) / kPieceBytes);
#pragma omp parallel for schedule(static)
  for (long long p = 0; p < pieces; ++p) {
    unsigned char* first = begin + static_cast<std::size_t>(p) * kPieceBytes;
    const std::size_t length =
        std::min(kPieceBytes, bytes - static_cast<std::size_t>(p) * kPieceBytes);
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    // madvise wants a page-aligned start: the piece's whole 4 kB pages.
    const auto address = reinterpret_cast<std::uintptr_t>(first);
    const std::uintptr_t aligned = (address + 4095) / 4096 * 4096;
    if (aligned < address + length &&
        madvise(reinterpret_cast<void*>(aligned), (address + length - aligned) / 4096 * 4096,
                MADV_POPULATE_WRITE) == 0)
      continue;  // a page shared with the next piece is the caller's fill's to map
#endif
    // A kernel without MADV_POPULATE_WRITE (before Linux 5.14): a byte written per page. The
    // storage holds no objects yet; the caller's fill writes every value afterwards.
    for (std::size_t offset = 0; offset < length; offset += 4096) first[offset] = 0;
    first[length - 1] = 0;
  }
}

void zero_bytes(void* data, std::size_t bytes) {
  constexpr std::size_t kThresholdBytes = std::size_t(8) << 20;
  if (bytes < kThresholdBytes) {
    if (bytes > 0) std::memset(data, 0, bytes);
    return;
  }
  constexpr std::size_t kPieceBytes = kHugePageBytes;
  auto* begin = static_cast<unsigned char*>(data);
  const long long pieces = static_cast<long long>((bytes + kPieceBytes - 1) / kPieceBytes);
#pragma omp parallel for schedule(static)
  for (long long p = 0; p < pieces; ++p) {
    const std::size_t offset = static_cast<std::size_t>(p) * kPieceBytes;
    std::memset(begin + offset, 0, std::min(kPieceBytes, bytes - offset));
  }
}

}  // namespace ifusim
