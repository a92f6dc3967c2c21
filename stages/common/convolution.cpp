#include "stages/common/convolution.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "core/config_error.h"
#include "data/host_memory.h"
#include "stages/common/vector_kernels.h"

namespace ifusim {

void refuse_cropped_cube(const RunState& state, const std::string& what) {
  const Cube& cube = *state.cube;
  const bool cropped = state.spaxels.nx > 0 && cube.shape.nx != state.spaxels.nx;
  // aperture_mask makes a spaxel's whole spectrum NaN: its first voxel tells (a scan of every
  // voxel took 0.3 s of MUSE-WFM's run, twice).
  const std::size_t n_wave = static_cast<std::size_t>(std::max(cube.shape.n_wave, 0));
  bool masked = false;
  if (n_wave > 0)
    for (std::size_t i = 0; i < cube.data.size() && !masked; i += n_wave)
      masked = std::isnan(cube.data[i]);
  if (cropped || masked)
    throw ConfigError(what +
                      ": the cube was already cropped to the field or masked outside the "
                      "aperture; put aperture_mask after psf and lsf");
}

double gaussian_truncation_sigmas(double peak_fraction) {
  return std::sqrt(-2.0 * std::log(peak_fraction));
}

Kernel1D gaussian_pixel_kernel(double sigma_pixels, double peak_fraction, int max_radius) {
  Kernel1D k;
  if (!(sigma_pixels > 0.0)) {
    k.weights = {1.0};
    return k;
  }
  const double reach = std::ceil(sigma_pixels * gaussian_truncation_sigmas(peak_fraction));
  k.radius = static_cast<int>(std::min<double>(reach, std::max(max_radius, 0)));
  const double scale = 1.0 / (sigma_pixels * std::sqrt(2.0));
  // The uncapped kernel's weights telescope to the integral over [-reach - 1/2, reach + 1/2].
  k.sum = std::erf((reach + 0.5) * scale);
  k.weights.resize(2 * static_cast<std::size_t>(k.radius) + 1);
  for (int d = -k.radius; d <= k.radius; ++d) {
    // erfc for the far tail on each side keeps the small weights accurate (no cancellation).
    double w;
    if (d > 0)
      w = 0.5 * (std::erfc((d - 0.5) * scale) - std::erfc((d + 0.5) * scale));
    else if (d < 0)
      w = 0.5 * (std::erfc((-d - 0.5) * scale) - std::erfc((-d + 0.5) * scale));
    else
      w = std::erf(0.5 * scale);
    k.weights[d + k.radius] = w;
  }
  return k;
}

void convolve_axis(const std::vector<double>& in, std::vector<double>& out, std::size_t outer,
                   int n, std::size_t inner, const Kernel1D& kernel) {
  convolve_axis(in, out, outer, n, inner, std::vector<Kernel1D>{kernel});
}

void convolve_axis(const std::vector<double>& in, std::vector<double>& out, std::size_t outer,
                   int n, std::size_t inner, const std::vector<Kernel1D>& kernels) {
  const std::size_t total = outer * static_cast<std::size_t>(n) * inner;
  if (in.size() != total) throw std::logic_error("convolve_axis: size mismatch");
  if (kernels.size() != 1 && kernels.size() != static_cast<std::size_t>(std::max(n, 0)))
    throw std::logic_error("convolve_axis: one kernel, or one per source pixel");
  if (out.capacity() < total)
    out = large_vector<double>(total);
  else
    out.assign(total, 0.0);
  if (n <= 0 || total == 0) return;
  auto kernel_of = [&](int j) -> const Kernel1D& { return kernels[kernels.size() == 1 ? 0 : j]; };
  int reach = 0;  // the widest kernel bounds the sources a target can receive from
  for (const auto& k : kernels) reach = std::max(reach, k.radius);
  std::vector<double> inv_norm(n);
  for (int j = 0; j < n; ++j) inv_norm[j] = 1.0 / kernel_of(j).sum;
  const long long targets = static_cast<long long>(outer) * n;
#pragma omp parallel for schedule(static)
  for (long long t = 0; t < targets; ++t) {
    const std::size_t o = static_cast<std::size_t>(t / n);
    const int k = static_cast<int>(t % n);
    double* dst = out.data() + (o * n + k) * inner;
    for (int j = std::max(0, k - reach); j <= std::min(n - 1, k + reach); ++j) {
      const double w = kernel_of(j).at(k - j) * inv_norm[j];
      if (w == 0.0) continue;
      const double* src = in.data() + (o * n + j) * inner;
#pragma omp simd
      for (std::size_t i = 0; i < inner; ++i) dst[i] += w * src[i];
    }
  }
}

namespace {

// Lanes per block (held in double): enough contiguous values for the vector units and whole cache
// lines, few enough that a block (n x lanes) stays within ~1 MB (in L2 or close by) for the axes of
// a cube.
std::size_t lanes_for(int n, std::size_t available) {
  const std::size_t budget =
      (std::size_t(1) << 20) / sizeof(double) / static_cast<std::size_t>(std::max(n, 1));
  return std::max<std::size_t>(
      1, std::min<std::size_t>({available, 256, std::max<std::size_t>(budget, 8)}));
}

}  // namespace

namespace {

// The weights of the convolution along the axis, w(k, j) = K_j(k - j) / K_j.sum, tabulated per
// target k over the sources j = k - reach .. k + reach: row k, entry j - k + reach + kAxisRows - 1
// (vector_kernels.h's padded taps: kAxisRows - 1 zeros at each end, and zero rows past the axis
// up to n + kAxisRows - 1; 0 where j is off the axis). With `transpose`, the table of the
// transposed map (the adjoint, reverse mode): row j holds w(k, j) for the targets
// k = j - reach .. j + reach, so that the same loop that convolves applies the correlation with
// the same taps, edges (zero padding) included.
struct AxisWeights {
  int reach = 0;
  std::vector<double> weight;
};

AxisWeights axis_weights(int n, const std::vector<Kernel1D>& kernels, bool transpose) {
  auto kernel_of = [&](int j) -> const Kernel1D& { return kernels[kernels.size() == 1 ? 0 : j]; };
  AxisWeights t;
  for (const auto& k : kernels) t.reach = std::max(t.reach, k.radius);
  const std::size_t padded = axis_padded_taps(t.reach);
  const std::size_t offset = kAxisRows - 1 + static_cast<std::size_t>(t.reach);
  t.weight.assign((static_cast<std::size_t>(n) + kAxisRows - 1) * padded, 0.0);
  for (int k = 0; k < n; ++k)
    for (int j = std::max(0, k - t.reach); j <= std::min(n - 1, k + t.reach); ++j) {
      // The very product convolve_axis forms per tap.
      const double w = kernel_of(j).at(k - j) * (1.0 / kernel_of(j).sum);
      if (transpose)
        t.weight[j * padded + (k - j + offset)] = w;
      else
        t.weight[k * padded + (j - k + offset)] = w;
    }
  return t;
}

// The weights of kernels that act on lanes rather than on source pixels (a PSF whose width
// changes with wavelength, each plane a lane): every kernel is the same at every pixel of the axis,
// so a tap's weight, w(k, j) = K(k - j) / K.sum, depends on k - j only, and is tabulated per kernel
// over the widest kernel's taps (0 beyond a narrower one's). Lane i (an inner index) takes kernel
// kernel_of_plane[i % kernel_of_plane.size()].
struct LaneWeights {
  int reach = 0;
  std::size_t taps = 1;
  std::vector<double> weight;        // [kernel][tap], tap t is the source j = k - reach + t
  std::vector<int> kernel_of_plane;  // one entry per plane (a period of the inner index)
};

LaneWeights lane_weights(const std::vector<Kernel1D>& kernels,
                         const std::vector<int>& kernel_of_plane, bool transpose) {
  LaneWeights t;
  for (const auto& k : kernels) t.reach = std::max(t.reach, k.radius);
  t.taps = 2 * static_cast<std::size_t>(t.reach) + 1;
  t.weight.assign(kernels.size() * t.taps, 0.0);
  for (std::size_t q = 0; q < kernels.size(); ++q)
    for (int d = -t.reach; d <= t.reach; ++d) {
      // Tap t = j - k + reach, j - k = d. The forward's weight for target k from source j is
      // K(k - j); the transpose's (target j from source k) is K(j - k). The very product
      // convolve_axis forms.
      const double w = kernels[q].at(transpose ? d : -d) * (1.0 / kernels[q].sum);
      t.weight[q * t.taps + static_cast<std::size_t>(d + t.reach)] = w;
    }
  t.kernel_of_plane = kernel_of_plane;
  return t;
}

// Lanes at a time in a block's sweep along the axis: the rows a band's targets read (its taps'
// sources and weights, ~25 kB for the PSF) stay in the L1 cache from one group of targets to the
// next, where a sweep of all of the block's lanes read them from L2 each time (a PSF pass 0.63 s
// -> 0.51 s on MUSE-WFM).
constexpr std::size_t kBandLanes = 8 * kAxisLanes;

// out[o, k, i] = sum over j of table(k, j) in[o, j, i], in place, for a float cube or a double
// cotangent: each sum made in double (sources ascending, from 0) and rounded once to T. With
// `by_lane`, the weights are those of each lane's kernel instead of the table's (a zero weight
// beyond a narrower kernel's reach adds nothing to its sum). Along a contiguous axis (inner 1:
// spectra, the LSF) each row is convolved as it lies (convolve_contiguous); otherwise a block of
// lanes (neighbouring inner indices) is gathered and kAxisRows targets are summed at a time
// (convolve_rows_by_*).
template <class T>
void apply_axis_weights(std::vector<T>& data, std::size_t outer, int n, std::size_t inner,
                        const AxisWeights& table, const LaneWeights* by_lane = nullptr) {
  const int reach = by_lane ? by_lane->reach : table.reach;
  const std::size_t padded = axis_padded_taps(reach);
  const auto n_size = static_cast<std::size_t>(n);
  if (inner == 1) {
    // The weights tap-major for convolve_contiguous, wt[t * stride + k] = w(k, k - reach + t),
    // over the targets rounded up to its vectors (0 past the axis). Every lane of a by_lane
    // convolution is inner index 0 here, of kernel kernel_of_plane[0].
    const std::size_t taps = 2 * static_cast<std::size_t>(reach) + 1;
    const std::size_t stride =
        (n_size + kContiguousTargets - 1) / kContiguousTargets * kContiguousTargets;
    std::vector<double> wt(taps * stride, 0.0);
    for (std::size_t t = 0; t < taps; ++t)
      for (std::size_t k = 0; k < n_size; ++k)
        wt[t * stride + k] =
            by_lane ? by_lane->weight[static_cast<std::size_t>(by_lane->kernel_of_plane[0]) *
                                          by_lane->taps +
                                      t]
                    : table.weight[k * padded + t + kAxisRows - 1];
#pragma omp parallel
    {
      // The row's sources shifted by reach, zeros beyond its ends (and past the vectors).
      std::vector<double> source(stride + taps - 1, 0.0), sums(stride);
#pragma omp for schedule(static)
      for (long long o = 0; o < static_cast<long long>(outer); ++o) {
        T* row = data.data() + static_cast<std::size_t>(o) * n_size;
        if constexpr (std::is_same_v<T, float>)
          widen(source.data() + reach, row, n_size);
        else
          std::copy(row, row + n_size, source.data() + reach);
        convolve_contiguous(sums.data(), source.data(), stride, taps, wt.data());
        if constexpr (std::is_same_v<T, float>)
          narrow(row, sums.data(), n_size);
        else
          std::copy(sums.begin(), sums.begin() + n, row);
      }
    }
    return;
  }
  const std::size_t width_max = lanes_for(n, inner);
  // The block's rows (and the weights' and sums'): a whole number of the kernels' vectors, and an
  // odd number of cache lines, so that the rows a target's taps read fall in different sets of
  // the L1 cache (256 lanes, 32 lines, put every row in the same two sets: bench_cube_passes'
  // psf 1.29 s against 1.21 s).
  // The lanes past a block's width hold whatever an earlier block left (finite values), summed
  // and never stored.
  const std::size_t lanes =
      (width_max + 2 * kAxisLanes - 1) / (2 * kAxisLanes) * (2 * kAxisLanes) + kAxisLanes;
  const std::size_t per_row = (inner + width_max - 1) / width_max;
  const auto blocks = static_cast<long long>(outer * per_row);
#pragma omp parallel
  {
    std::vector<double> block(n_size * lanes, 0.0), sums(kAxisRows * lanes);
    // Each lane's weights, tap by padded tap (by_lane only; the padding's taps 0).
    std::vector<double> lane_weight(by_lane ? padded * lanes : 0, 0.0);
#pragma omp for schedule(static)
    for (long long b = 0; b < blocks; ++b) {
      // Lane l of this block is the axis at base[l + j * inner], its inner index i0 + l.
      const std::size_t o = static_cast<std::size_t>(b) / per_row;
      const std::size_t i0 = static_cast<std::size_t>(b) % per_row * width_max;
      const std::size_t width = std::min(width_max, inner - i0);
      T* base = data.data() + o * n_size * inner + i0;
      for (std::size_t j = 0; j < n_size; ++j) {
        if constexpr (std::is_same_v<T, float>)
          widen(block.data() + j * lanes, base + j * inner, width);
        else
          std::copy(base + j * inner, base + j * inner + width, block.data() + j * lanes);
      }
      if (by_lane) {
        const std::size_t period = by_lane->kernel_of_plane.size();
        for (std::size_t l = 0; l < width; ++l) {
          const double* w =
              by_lane->weight.data() +
              static_cast<std::size_t>(by_lane->kernel_of_plane[(i0 + l) % period]) * by_lane->taps;
          for (std::size_t t = 0; t < by_lane->taps; ++t)
            lane_weight[(t + kAxisRows - 1) * lanes + l] = w[t];
        }
      }
      for (std::size_t l0 = 0; l0 < width; l0 += kBandLanes) {
        const std::size_t band = std::min(kBandLanes, width - l0);
        for (int k0 = 0; k0 < n; k0 += kAxisRows) {
          if (by_lane)
            convolve_rows_by_lane(sums.data() + l0, block.data() + l0, lanes, band, n, k0, reach,
                                  lane_weight.data() + l0);
          else
            convolve_rows_by_target(sums.data() + l0, block.data() + l0, lanes, band, n, k0, reach,
                                    table.weight.data());
          // Each sum in double, rounded once to the cube's float (a no-op for a double
          // cotangent).
          for (int k = k0; k < std::min(n, k0 + kAxisRows); ++k) {
            const double* sum = sums.data() + static_cast<std::size_t>(k - k0) * lanes + l0;
            T* target = base + static_cast<std::size_t>(k) * inner + l0;
            if constexpr (std::is_same_v<T, float>)
              narrow(target, sum, band);
            else
              std::copy(sum, sum + band, target);
          }
        }
      }
    }
  }
}

template <class T>
void along_axis(std::vector<T>& data, std::size_t outer, int n, std::size_t inner,
                const std::vector<Kernel1D>& kernels, bool transpose, const char* what) {
  const std::size_t total = outer * static_cast<std::size_t>(std::max(n, 0)) * inner;
  if (data.size() != total) throw std::logic_error(std::string(what) + ": size mismatch");
  if (kernels.size() != 1 && kernels.size() != static_cast<std::size_t>(std::max(n, 0)))
    throw std::logic_error(std::string(what) + ": one kernel, or one per source pixel");
  if (n <= 0 || total == 0) return;
  apply_axis_weights(data, outer, n, inner, axis_weights(n, kernels, transpose));
}

template <class T>
void along_axis_by_lane(std::vector<T>& data, std::size_t outer, int n, std::size_t inner,
                        const std::vector<Kernel1D>& kernels,
                        const std::vector<int>& kernel_of_plane, bool transpose) {
  const std::size_t total = outer * static_cast<std::size_t>(std::max(n, 0)) * inner;
  if (data.size() != total) throw std::logic_error("convolve_axis_by_lane: size mismatch");
  if (kernel_of_plane.empty() || kernels.empty() ||
      std::any_of(kernel_of_plane.begin(), kernel_of_plane.end(),
                  [&](int q) { return q < 0 || static_cast<std::size_t>(q) >= kernels.size(); }))
    throw std::logic_error("convolve_axis_by_lane: a kernel index per plane, within the kernels");
  if (n <= 0 || total == 0) return;
  const LaneWeights by_lane = lane_weights(kernels, kernel_of_plane, transpose);
  apply_axis_weights(data, outer, n, inner, AxisWeights{}, &by_lane);
}

}  // namespace

void convolve_axis_in_place(std::vector<float>& data, std::size_t outer, int n, std::size_t inner,
                            const std::vector<Kernel1D>& kernels) {
  along_axis(data, outer, n, inner, kernels, false, "convolve_axis_in_place");
}

void convolve_axis_in_place(std::vector<double>& data, std::size_t outer, int n, std::size_t inner,
                            const std::vector<Kernel1D>& kernels) {
  along_axis(data, outer, n, inner, kernels, false, "convolve_axis_in_place");
}

void correlate_axis_in_place(std::vector<double>& data, std::size_t outer, int n, std::size_t inner,
                             const std::vector<Kernel1D>& kernels) {
  along_axis(data, outer, n, inner, kernels, true, "correlate_axis_in_place");
}

void convolve_axis_in_place_by_lane(std::vector<float>& data, std::size_t outer, int n,
                                    std::size_t inner, const std::vector<Kernel1D>& kernels,
                                    const std::vector<int>& kernel_of_plane) {
  along_axis_by_lane(data, outer, n, inner, kernels, kernel_of_plane, false);
}

void convolve_axis_in_place_by_lane(std::vector<double>& data, std::size_t outer, int n,
                                    std::size_t inner, const std::vector<Kernel1D>& kernels,
                                    const std::vector<int>& kernel_of_plane) {
  along_axis_by_lane(data, outer, n, inner, kernels, kernel_of_plane, false);
}

void correlate_axis_in_place_by_lane(std::vector<double>& data, std::size_t outer, int n,
                                     std::size_t inner, const std::vector<Kernel1D>& kernels,
                                     const std::vector<int>& kernel_of_plane) {
  along_axis_by_lane(data, outer, n, inner, kernels, kernel_of_plane, true);
}

}  // namespace ifusim
