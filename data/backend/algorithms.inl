// The few parallel primitives stages use, written once over the backend's Thrust policy.
// Included by cpu_system.h and cuda_system.cuh inside neither namespace.
#include <cstddef>

namespace ifusim::IFUSIM_BACKEND_NS {

// f(i) for i in [0, n), then wait for the device.
template <class F>
void parallel_for(const Device& device, std::size_t n, F f) {
  if (n == 0) return;
  thrust::for_each_n(policy(device), thrust::counting_iterator<std::size_t>(0), n, f);
  finish(device);
}

// max over i in [0, n) of f(i), or `lowest` when n == 0. Exact in any order.
template <class T, class F>
T transform_max(const Device& device, std::size_t n, F f, T lowest) {
  if (n == 0) return lowest;
  const T result = thrust::transform_reduce(
      policy(device), thrust::counting_iterator<std::size_t>(0),
      thrust::counting_iterator<std::size_t>(n), f, lowest, thrust::maximum<T>());
  finish(device);
  return result;
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
