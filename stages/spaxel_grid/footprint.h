#pragma once
// Where a particle's light goes on the sky: the spaxels it covers and the fraction of its light
// each receives. Every depositing kernel (spectra, kinematics, images) walks a particle's
// footprint through for_each, so that spatial smoothing is one piece of code shared by all of
// them. Without smoothing the footprint is the particle's own spaxel with weight 1 (none when
// it falls outside the field or the aperture).
#include <cstddef>
#include <cstdint>

#include "data/galaxy_data.h"
#include "data/hd.h"
#include "stages/spaxel_grid/grid.h"

namespace ifusim {

// Per-device views of one particle set's footprint fields (trivially copyable: kernels receive
// it by value).
struct FootprintView {
  const std::int32_t* spaxel_index = nullptr;  // -1 outside the field or the aperture

  // f(spaxel, weight) for every spaxel particle i covers; the weights of a particle inside the
  // field sum to 1, minus what falls outside the field or the aperture.
  template <class F>
  IFUSIM_HD void for_each(std::size_t i, F&& f) const {
    const std::int32_t s = spaxel_index[i];
    if (s >= 0) f(s, 1.0);
  }
};

// The footprint of the stars held by `device` (views into the stars' fields on that device), for
// the grid the stars were assigned with (RunState::spaxel_grid).
inline FootprintView star_footprint(const Stars& stars, const SpaxelGrid& grid,
                                    const Device& device) {
  (void)grid;  // smoothing will need it
  FootprintView view;
  view.spaxel_index = stars.spaxel_index.local(device).data;
  return view;
}

}  // namespace ifusim
