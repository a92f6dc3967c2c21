// Mass-image kernels: one source, compiled by mass_image_cpu.cpp and mass_image_cuda.cu.
namespace ifusim::IFUSIM_BACKEND_NS {

struct DepositMass {
  const float* mass_msun;
  const std::int32_t* spaxel_index;
  double counts_per_unit;
  std::int64_t* image_sums;
  IFUSIM_HD void operator()(std::size_t i) const {
    const std::int32_t s = spaxel_index[i];
    if (s >= 0) atomic_add_fixed(&image_sums[s], to_fixed(mass_msun[i], counts_per_unit));
  }
};

void accumulate_mass_image(const Device& device, Span<const float> mass_msun,
                           Span<const std::int32_t> spaxel_index, double counts_per_unit,
                           Span<std::int64_t> image_sums) {
  parallel_for(device, mass_msun.size,
               DepositMass{mass_msun.data, spaxel_index.data, counts_per_unit, image_sums.data});
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
