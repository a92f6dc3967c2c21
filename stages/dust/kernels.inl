// Dust kernels: one source, compiled by dust_cpu.cpp and dust_cuda.cu.
namespace ifusim::IFUSIM_BACKEND_NS {

struct StarDustAv {
  DustScreenView screens;
  const std::int32_t* spaxel_index;
  const float* z_kpc;
  float* dust_av;
  IFUSIM_HD void operator()(std::size_t i) const {
    dust_av[i] = screen_av(screens, spaxel_index[i], z_kpc[i]);
  }
};

void compute_dust_av(const Device& device, const DustScreenView& screens,
                     Span<const std::int32_t> spaxel_index, Span<const float> z_kpc,
                     Span<float> dust_av) {
  parallel_for(device, dust_av.size,
               StarDustAv{screens, spaxel_index.data, z_kpc.data, dust_av.data});
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
