// Mass-image kernels: one source, compiled by mass_image_cpu.cpp and mass_image_cuda.cu.
namespace ifusim::IFUSIM_BACKEND_NS {

// Each star's mass over its footprint: weight 1 in its own spaxel without smoothing (m * 1.0 is
// m exactly, so the image is bitwise the single-spaxel one), its kernel's share of each spaxel
// with smoothing.
struct DepositMass {
  const float* mass_msun;
  FootprintView footprint;
  double counts_per_unit;
  std::int64_t* image_sums;
  IFUSIM_HD void operator()(std::size_t i) const {
    const double mass = mass_msun[i];
    std::int64_t* sums = image_sums;
    const double scale = counts_per_unit;
    footprint.for_each(i, [&](std::int32_t spaxel, double weight) {
      atomic_add_fixed(&sums[spaxel], to_fixed(mass * weight, scale));
    });
  }
};

void accumulate_mass_image(const Device& device, Span<const float> mass_msun,
                           const FootprintView& footprint, double counts_per_unit,
                           Span<std::int64_t> image_sums) {
  parallel_for(device, mass_msun.size,
               DepositMass{mass_msun.data, footprint, counts_per_unit, image_sums.data});
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
