#include "data/sharding.h"

#include <stdexcept>

namespace ifusim {

std::string Sharding::to_string() const {
  switch (kind_) {
    case Kind::sharded:
      return "Sharded(" + axis_ + ")";
    case Kind::replicated:
      return "Replicated";
    case Kind::partial:
      return "Partial(" + axis_ + ")";
  }
  return "?";
}

std::vector<IndexRange> split_evenly(std::size_t n, std::size_t n_devices) {
  if (n_devices == 0) throw std::invalid_argument("split_evenly: a mesh needs at least one device");
  std::vector<IndexRange> ranges(n_devices);
  const std::size_t base = n / n_devices, extra = n % n_devices;
  std::size_t begin = 0;
  for (std::size_t d = 0; d < n_devices; ++d) {
    const std::size_t count = base + (d < extra ? 1 : 0);
    ranges[d] = {begin, begin + count};
    begin += count;
  }
  return ranges;
}

}  // namespace ifusim
