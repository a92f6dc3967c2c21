// Reduction kernels: one source, compiled by reductions_cpu.cpp and reductions_cuda.cu.
namespace ifusim::IFUSIM_BACKEND_NS {

struct AbsValue {
  const float* values;
  IFUSIM_HD float operator()(std::size_t i) const { return values[i] < 0 ? -values[i] : values[i]; }
};

float max_abs_value(const Device& device, Span<const float> values) {
  return transform_max(device, values.size, AbsValue{values.data}, 0.0f);
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
