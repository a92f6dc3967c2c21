// The few parallel primitives stages use, written once over the backend's Thrust policy.
// Included by cpu_system.h and cuda_system.cuh inside neither namespace. transform_max is defined
// per backend in those two headers.
#include <cstddef>

namespace ifusim::IFUSIM_BACKEND_NS {

// f(i) for i in [0, n), then wait for the device.
template <class F>
void parallel_for(const Device& device, std::size_t n, F f) {
  if (n == 0) return;
  thrust::for_each_n(policy(device), thrust::counting_iterator<std::size_t>(0), n, f);
  finish(device);
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
