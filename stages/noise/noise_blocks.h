#pragma once
// The S/N noise model's per-voxel work in blocks (noise.cpp): first each voxel's standard normal
// where the Ziggurat's first word lands inside a layer's rectangle (98.8% of draws; this loop runs
// in vector registers in its x86-64-v4 clone), then the rest one by one, then the model (in vector
// registers too: its file is compiled without errno and FP-exception semantics,
// stages/CMakeLists.txt). The values are those of counter_normal_of_state and of the
// one-voxel-at-a-time model, bitwise.
#include <cstddef>
#include <cstdint>

#include "stages/noise/random.h"

namespace ifusim {

// z[l] = counter_normal_of_state(state, first_index + l) for l < n where the first word's draw
// is accepted at once; NaN where it is not (the caller draws those with counter_normal_of_state).
void ziggurat_first_draws(std::uint64_t state, std::uint64_t first_index, std::size_t n,
                          const ZigguratTables& tables, double* z);

// The S/N model of n voxels: variance = bg + max(signal, 0) shot, data = signal + sqrt(variance)
// z, each in double and rounded once to float; NaN voxels (outside the aperture) keep their data
// and take it as their variance. Returns how many variances are positive but below float's
// normal range.
long long apply_snr_model(float* data, float* variance, const double* bg, const double* shot,
                          const double* z, std::size_t n);

}  // namespace ifusim
