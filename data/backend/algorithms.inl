// The few parallel primitives stages use, written once over the backend's Thrust policy.
// Included by cpu_system.h and cuda_system.cuh inside neither namespace. transform_max is defined
// per backend in those two headers.
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>

#include <cstddef>
#include <cstdint>

#include "data/buffer.h"

namespace ifusim::IFUSIM_BACKEND_NS {

// f(i) for i in [0, n), then wait for the device.
template <class F>
void parallel_for(const Device& device, std::size_t n, F f) {
  if (n == 0) return;
  thrust::for_each_n(policy(device), thrust::counting_iterator<std::size_t>(0), n, f);
  finish(device);
}

// In place: exclusive prefix sum of counts[0, n); returns the total.
inline std::uint64_t exclusive_scan(const Device& device, std::uint64_t* counts, std::size_t n) {
  if (n == 0) return 0;
  std::uint64_t last = 0, last_offset = 0;
  memory::copy_to_host(device, &last, counts + n - 1, sizeof last);
  thrust::exclusive_scan(policy(device), counts, counts + n, counts);
  finish(device);
  memory::copy_to_host(device, &last_offset, counts + n - 1, sizeof last_offset);
  return last_offset + last;
}

// Sorts n (key, value) pairs by key and sums the values of equal keys into the first entries of
// keys_out / values_out; returns how many unique keys there are. Integer sums: exact in any order.
inline std::size_t sort_reduce_by_key(const Device& device, std::uint64_t* keys,
                                      std::int64_t* values, std::size_t n, std::uint64_t* keys_out,
                                      std::int64_t* values_out) {
  if (n == 0) return 0;
  thrust::sort_by_key(policy(device), keys, keys + n, values);
  const auto ends =
      thrust::reduce_by_key(policy(device), keys, keys + n, values, keys_out, values_out);
  finish(device);
  return static_cast<std::size_t>(ends.first - keys_out);
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
