#pragma once
// Where a particle's light goes on the sky: the spaxels it covers and the fraction of its light
// each receives. Every depositing kernel (spectra, kinematics, images) walks a particle's
// footprint through for_each, so that spatial smoothing is one piece of code shared by all of
// them. Without smoothing the footprint is the particle's own spaxel with weight 1 (none when
// it falls outside the field or the aperture).
#include <cstddef>
#include <cstdint>

#include "data/hd.h"

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

}  // namespace ifusim
