// Spaxel assignment kernels: one source, compiled by spaxel_grid_cpu.cpp and spaxel_grid_cuda.cu.
namespace ifusim::IFUSIM_BACKEND_NS {

struct AssignSpaxel {
  SpaxelGrid grid;
  const float* x_kpc;
  const float* y_kpc;
  std::int32_t* spaxel_index;
  IFUSIM_HD void operator()(std::size_t i) const {
    spaxel_index[i] = grid.index_of(x_kpc[i], y_kpc[i]);
  }
};

void assign_spaxels(const Device& device, SpaxelGrid grid, Span<const float> x_kpc,
                    Span<const float> y_kpc, Span<std::int32_t> spaxel_index) {
  parallel_for(device, spaxel_index.size,
               AssignSpaxel{grid, x_kpc.data, y_kpc.data, spaxel_index.data});
}

}  // namespace ifusim::IFUSIM_BACKEND_NS
