#pragma once
// Sorted unique keys and the integer sums of the values given with each: what sum_by_key
// (data/collectives/reductions.h) makes of (key, value) pairs, on the device that held them.
#include <cstddef>
#include <cstdint>

#include "data/buffer.h"

namespace ifusim {

struct KeyedSums {
  DeviceBuffer<std::uint64_t> keys;   // ascending, unique
  DeviceBuffer<std::int64_t> values;  // the sum of every value given with keys[i]
  std::size_t size = 0;               // entries used
};

}  // namespace ifusim
