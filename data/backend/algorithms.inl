// The few parallel primitives stages use, written once over the backend's Thrust policy.
// Included by cpu_system.h and cuda_system.cuh inside neither namespace. transform_max is defined
// per backend in those two headers.
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/unique.h>

#include <cstddef>
#include <cstdint>

#include "data/buffer.h"
#include "data/keyed_sums.h"

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

// Thrust's temporary storage (the sort's second copy of keys and values, CUB's scratch) taken
// through memory::allocate, so that the memory counters see it: the plan's estimate of a sparse
// histogram's bytes is tested against them (tests/backend_checks.h).
struct CountedTemporaries {
  using value_type = char;
  const Device* device;
  char* allocate(std::ptrdiff_t bytes) {
    return static_cast<char*>(memory::allocate(*device, static_cast<std::size_t>(bytes)));
  }
  void deallocate(char* p, std::size_t) noexcept { memory::release(*device, p); }
};

// Sums the values of equal keys of n (key, value) pairs, consuming them: sorted in place, then
// reduced into buffers of exactly the unique keys' size, allocated only after the sort, so that
// the pairs, the sort's scratch and the result are never held all at once (at most the pairs'
// 16 bytes an entry plus the sort's second copy and scratch; kSparseEntryBytes of
// stages/stellar_spectra counts on it). Integer sums: exact in any order.
inline KeyedSums sort_reduce_by_key(const Device& device, DeviceBuffer<std::uint64_t> keys,
                                    DeviceBuffer<std::int64_t> values, std::size_t n) {
  KeyedSums out;
  if (n == 0) return out;
  CountedTemporaries temporaries{&device};
  thrust::sort_by_key(policy(device, temporaries), keys.data(), keys.data() + n, values.data());
  const auto unique = static_cast<std::size_t>(
      thrust::unique_count(policy(device, temporaries), keys.data(), keys.data() + n));
  finish(device);
  out.keys = DeviceBuffer<std::uint64_t>(device, unique);
  out.values = DeviceBuffer<std::int64_t>(device, unique);
  const auto ends = thrust::reduce_by_key(policy(device, temporaries), keys.data(), keys.data() + n,
                                          values.data(), out.keys.data(), out.values.data());
  finish(device);
  out.size = static_cast<std::size_t>(ends.first - out.keys.data());
  return out;
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
