#include "stages/aperture_mask/aperture_mask.h"

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/json_params.h"
#include "data/host_memory.h"

namespace ifusim {

namespace {

// Keeps the entries of `c` whose two spaxels both pass `keep(ix, iy)`.
template <class Keep>
void keep_correlations(SpatialCorrelation& c, Keep keep) {
  std::size_t n = 0;
  for (std::size_t e = 0; e < c.rho.size(); ++e) {
    if (!keep(c.i_x[e], c.i_y[e]) || !keep(c.j_x[e], c.j_y[e])) continue;
    c.i_x[n] = c.i_x[e];
    c.i_y[n] = c.i_y[e];
    c.j_x[n] = c.j_x[e];
    c.j_y[n] = c.j_y[e];
    c.rho[n] = c.rho[e];
    ++n;
  }
  for (auto* indices : {&c.i_x, &c.i_y, &c.j_x, &c.j_y}) indices->resize(n);
  c.rho.resize(n);
}

// Gives the kernel back the whole pages of `values` past its size (the cropped margin, ~0.2 GB
// on MUSE-WFM), which stayed resident after an in-place crop: the capacity is kept (a
// shrink_to_fit would copy the cube), its pages read as zeros if the vector ever grows again.
template <typename T>
void release_tail_pages([[maybe_unused]] std::vector<T>& values) {
#if defined(__linux__) && defined(MADV_DONTNEED)
  const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto end = reinterpret_cast<std::uintptr_t>(values.data() + values.size());
  const auto last = reinterpret_cast<std::uintptr_t>(values.data() + values.capacity());
  const std::uintptr_t first = (end + page - 1) / page * page;
  const std::uintptr_t stop = last / page * page;
  if (stop > first) ::madvise(reinterpret_cast<void*>(first), stop - first, MADV_DONTNEED);
#endif
}

}  // namespace

void apply_aperture_mask(const SpaxelGrid& grid, Cube& cube, std::map<std::string, SkyMap>& maps) {
  const auto& s = cube.shape;
  if (s.nx != grid.n_side || s.ny != grid.n_side)
    throw std::logic_error("aperture_mask: the cube is not on the spaxel grid");
  const double nan = std::nan("");
  const std::size_t n_wave = static_cast<std::size_t>(s.n_wave);
  for (int iy = 0; iy < s.ny; ++iy)
    for (int ix = 0; ix < s.nx; ++ix) {
      if (grid.spaxel_in_aperture(ix, iy)) continue;
      const std::size_t spaxel = static_cast<std::size_t>(iy) * s.nx + ix;
      for (auto* values : {&cube.data, &cube.variance})
        if (!values->empty())
          std::fill_n(values->begin() + static_cast<std::ptrdiff_t>(spaxel * n_wave), n_wave, nan);
      for (auto& [name, map] : maps)
        if (map.values.size() == s.n_spaxels()) map.values[spaxel] = nan;
    }
  // A spaxel outside the aperture has no measurement, so no correlation with any other.
  for (auto& [name, c] : cube.correlations)
    keep_correlations(c, [&](int ix, int iy) { return grid.spaxel_in_aperture(ix, iy); });
}

void crop_margin(const CubeMargin& margin, Cube& cube, std::map<std::string, SkyMap>& maps) {
  const CubeShape in = cube.shape;
  const CubeShape out{in.nx - 2 * margin.spaxels, in.ny - 2 * margin.spaxels,
                      in.n_wave - 2 * margin.wavelengths};
  if (out.nx <= 0 || out.ny <= 0 || out.n_wave <= 0)
    throw std::logic_error("aperture_mask: the cube is smaller than its margin");
  // In place: every kept run moves to an index no later than its own (spaxel and plane offsets
  // only shrink), so a forward pass never overwrites a value it has still to move. A cropped copy
  // was a second cube (1.3 GB on MUSE-WFM) at this stage's peak, and its page faults.
  auto crop = [&](auto& values, int n_wave_in, int n_wave_out, int k0) {
    if (values.empty()) return;
    for (int iy = 0; iy < out.ny; ++iy)
      for (int ix = 0; ix < out.nx; ++ix) {
        const std::size_t from =
            (static_cast<std::size_t>(iy + margin.spaxels) * in.nx + ix + margin.spaxels) *
                n_wave_in +
            k0;
        const std::size_t to = (static_cast<std::size_t>(iy) * out.nx + ix) * n_wave_out;
        if (to != from)  // to < from: std::copy's forward order is safe on the overlap
          std::copy(values.begin() + static_cast<std::ptrdiff_t>(from),
                    values.begin() + static_cast<std::ptrdiff_t>(from + n_wave_out),
                    values.begin() + static_cast<std::ptrdiff_t>(to));
      }
    values.resize(out.n_spaxels() * static_cast<std::size_t>(n_wave_out));
    release_tail_pages(values);
  };
  // The correlation matrices' spaxel indices move with the crop, and their planes with the
  // band's; entries of spaxels cut off go.
  for (auto& [name, c] : cube.correlations) {
    keep_correlations(c, [&](int ix, int iy) {
      return ix >= margin.spaxels && ix < margin.spaxels + out.nx && iy >= margin.spaxels &&
             iy < margin.spaxels + out.ny;
    });
    for (auto* indices : {&c.i_x, &c.i_y, &c.j_x, &c.j_y})
      for (int& i : *indices) i -= margin.spaxels;
    c.plane -= margin.wavelengths;
  }
  std::erase_if(cube.correlations, [&](const auto& entry) {
    return entry.second.plane < 0 || entry.second.plane >= out.n_wave;
  });
  crop(cube.data, in.n_wave, out.n_wave, margin.wavelengths);
  crop(cube.variance, in.n_wave, out.n_wave, margin.wavelengths);
  for (auto& [name, map] : maps)
    if (map.values.size() == in.n_spaxels()) crop(map.values, 1, 1, 0);
  cube.shape = out;
}

namespace {

class ApertureMaskStage final : public Stage {
 public:
  std::string name() const override { return "aperture_mask"; }
  std::vector<std::string> needs() const override { return {"cube", "spaxels"}; }
  std::vector<Provided> provides() const override {
    return {{"cube_masked", "", "NaN outside the aperture, the PSF's and LSF's margin cropped"}};
  }

  void run(RunState& state) override {
    if (!state.cube) throw std::logic_error("aperture_mask: no cube (psum must run first)");
    grid_ = state.products.get<SpaxelGrid>("spaxels");
    margin_ = state.observation.margin;
    given_ = state.cube->shape;
    apply_aperture_mask(grid_, *state.cube, state.maps);
    crop_margin(margin_, *state.cube, state.maps);
    made_ = state.cube->shape;
    state.observation.margin = {};
  }

  // The crop's transpose pads the cotangent with zeros back to the margin-included shape; the
  // mask's is zero outside the aperture (the forward's NaN there is no measurement, constant:
  // its derivative is 0). docs/gradients.md.
  bool adjoint(const RunState&, CubeCotangent& cotangent) const override {
    check_cotangent_shape("aperture_mask", made_, cotangent);
    std::vector<double> padded = large_vector<double>(given_.n_voxels(), 0.0);
    const double* cropped = cotangent.values().data();
    for_each_aperture_spectrum([&](std::size_t in_made, std::size_t in_given) {
      std::copy_n(cropped + in_made, made_.n_wave, padded.data() + in_given);
    });
    cotangent.replace(given_, std::move(padded));
    return true;
  }
  // Zero outside the aperture (the forward's constant NaN), then the crop.
  bool tangent(const RunState&, CubeCotangent& tangent) const override {
    check_cotangent_shape("aperture_mask", given_, tangent);
    std::vector<double> cropped = large_vector<double>(made_.n_voxels(), 0.0);
    const double* padded = tangent.values().data();
    for_each_aperture_spectrum([&](std::size_t in_made, std::size_t in_given) {
      std::copy_n(padded + in_given, made_.n_wave, cropped.data() + in_made);
    });
    tangent.replace(made_, std::move(cropped));
    return true;
  }

 private:
  // f(in_made, in_given) for every spaxel in the aperture, in parallel: where its spectrum starts
  // in the cropped cube and, past the band's margin, in the margin-included one.
  template <class F>
  void for_each_aperture_spectrum(F&& f) const {
#pragma omp parallel for schedule(static)
    for (int iy = 0; iy < made_.ny; ++iy)
      for (int ix = 0; ix < made_.nx; ++ix) {
        const int gx = ix + margin_.spaxels, gy = iy + margin_.spaxels;
        if (!grid_.spaxel_in_aperture(gx, gy)) continue;
        f((static_cast<std::size_t>(iy) * made_.nx + ix) * made_.n_wave,
          (static_cast<std::size_t>(gy) * given_.nx + gx) * given_.n_wave + margin_.wavelengths);
      }
  }
  // What run() did, for the adjoint: the aperture, the margin cropped, the shapes.
  SpaxelGrid grid_;
  CubeMargin margin_;
  CubeShape given_, made_;
};

}  // namespace

std::unique_ptr<Stage> make_aperture_mask_stage(const nlohmann::json& params,
                                                const std::string& path) {
  JsonParams(params, path).finish();  // no parameters: the aperture is the telescope's
  return std::make_unique<ApertureMaskStage>();
}

StageEntry aperture_mask_stage() {
  return {
      .name = "aperture_mask",
      .summary = "NaN in the spaxels outside a circular or hexagonal aperture; crops the margin",
      .kind = StageKind::cube,
      .make = &from_params<&make_aperture_mask_stage>,
      .crops_margin = true};
}

}  // namespace ifusim
