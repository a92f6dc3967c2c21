// Reduction kernels: one source, compiled by reductions_cpu.cpp and reductions_cuda.cu.
#include <cmath>
namespace ifusim::IFUSIM_BACKEND_NS {

// |x|, with NaN taken as +infinity: a maximum that met a NaN is then +inf on every backend and
// for every split (the CPU's `v > max` would skip it, CUDA's `a < b ? b : a` keep it or not by
// order), and the fixed-point scales built on it refuse it by name.
struct AbsValue {
  const float* values;
  IFUSIM_HD float operator()(std::size_t i) const {
    const float v = values[i];
    if (v != v) return INFINITY;
    return v < 0 ? -v : v;
  }
};

float max_abs_value(const Device& device, Span<const float> values) {
  return transform_max(device, values.size, AbsValue{values.data}, 0.0f);
}

KeyedSums sum_by_key(const Device& device, DeviceBuffer<std::uint64_t> keys,
                     DeviceBuffer<std::int64_t> values) {
  const std::size_t n = keys.size();
  return sort_reduce_by_key(device, std::move(keys), std::move(values), n);
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
