#pragma once
// Host-side helpers shared by the stages that act on the whole reduced cube after psum (psf,
// lsf): pixel-integrated Gaussian weights and a 1-D convolution along one axis of a host array.
// These run once on the host with OpenMP, not through the per-device kernels.
//
// Edges, as on the sky: the convolution is zero-padded. Each kernel is normalised to a total of 1
// over its whole (truncated) extent, so a source inside keeps all of its light and a source near
// an edge loses the part of its kernel beyond it. The run simulates a margin around the field and
// the band as wide as the kernels reach (Stage::margin) and aperture_mask crops it afterwards, so
// the light the field receives from just outside it is there, and what leaves it is lost.
#include <cstddef>
#include <string>
#include <vector>

#include "stages/stage.h"

namespace ifusim {

// A 1-D kernel on integer pixel offsets -radius..radius: weights[d + radius].
struct Kernel1D {
  int radius = 0;
  std::vector<double> weights;
  double sum = 1.0;  // of the weights before any cap on the radius: the kernel's total
  double at(int d) const { return (d < -radius || d > radius) ? 0.0 : weights[d + radius]; }
};

// Half-width (in units of sigma) at which a Gaussian falls to `peak_fraction` of its peak:
// exp(-x^2 / 2) = f  ->  x = sqrt(-2 ln f). For f = 1e-6, x = 5.26 (2.23 FWHM).
double gaussian_truncation_sigmas(double peak_fraction);

// A Gaussian of standard deviation `sigma_pixels` centred on a pixel's centre, integrated over
// each target pixel (differences of erf, not samples at pixel centres):
//   w(d) = [erf((d + 1/2) / (sigma sqrt 2)) - erf((d - 1/2) / (sigma sqrt 2))] / 2,
// truncated at |d| <= ceil(sigma * gaussian_truncation_sigmas(peak_fraction)), and at
// `max_radius` pixels (a kernel wider than the array reaches nothing more). sigma = 0 gives the
// identity.
Kernel1D gaussian_pixel_kernel(double sigma_pixels, double peak_fraction, int max_radius);

// A convolving stage's check that it runs before aperture_mask: after it the margin is gone and
// NaN voxels (spaxels outside the aperture) would spread over the cube. Throws ConfigError
// naming `what`.
void refuse_cropped_cube(const RunState& state, const std::string& what);

// Zero-padded convolution along the middle axis of a host array laid out as (outer, n, inner),
// row-major: out[o, k, i] = sum_j in[o, j, i] K(k - j) / K.sum (see above). `in` and `out` must
// not alias.
void convolve_axis(const std::vector<double>& in, std::vector<double>& out, std::size_t outer,
                   int n, std::size_t inner, const Kernel1D& kernel);
// The same with a kernel per SOURCE pixel j (kernels[j], n of them): each pixel's light is spread
// with the response at its own wavelength (an LSF that varies with wavelength).
void convolve_axis(const std::vector<double>& in, std::vector<double>& out, std::size_t outer,
                   int n, std::size_t inner, const std::vector<Kernel1D>& kernels);

// The same convolution in place on a float cube (data/datacube.h), with a buffer per thread of at
// most ~1 MB instead of a second cube (1.3 GB on MUSE-WFM). Each block is gathered into double
// and summed there, so each output is bitwise convolve_axis's sum (the same sum in the same
// order, sources j ascending, starting from 0) of the float input, rounded once to float. The axis
// is gathered into the buffer a block of "lanes" at a time (neighbouring inner indices), several
// targets summed at once in vector registers; along a contiguous axis (inner 1) each row is
// convolved where it lies, its neighbouring targets summed at once. The weights
// w(k, j) = K_j(k - j) / K_j.sum are tabulated once per run, not looked up per tap.
void convolve_axis_in_place(std::vector<float>& data, std::size_t outer, int n, std::size_t inner,
                            const std::vector<Kernel1D>& kernels);
// The same on a double cube (a tangent, forward mode), each sum unrounded.
void convolve_axis_in_place(std::vector<double>& data, std::size_t outer, int n, std::size_t inner,
                            const std::vector<Kernel1D>& kernels);
// The transpose of convolve_axis_in_place (the adjoint, reverse mode, docs/gradients.md): the
// correlation with the same weights, out[o, j, i] = sum_k in[o, k, i] K_j(k - j) / K_j.sum, zero
// outside the axis as the forward's padding is. The same weight table, transposed, and the same
// loop.
void correlate_axis_in_place(std::vector<double>& data, std::size_t outer, int n, std::size_t inner,
                             const std::vector<Kernel1D>& kernels);

// The same in place with a kernel per LANE instead of per source pixel: lane i (an inner index)
// is convolved along the axis with kernels[kernel_of_plane[i % kernel_of_plane.size()]], the
// same kernel at every pixel of the axis (a PSF whose width changes with wavelength: the inner
// index runs over wavelength planes, or over (x, plane)). The weights are K(k - j) / K.sum as
// above, each output's sum is made in double over the widest kernel's taps (sources ascending,
// a narrower kernel's taps beyond its reach weigh 0) and rounded once: the same values as
// convolving each group of planes that share a kernel on its own, without gathering them.
void convolve_axis_in_place_by_lane(std::vector<float>& data, std::size_t outer, int n,
                                    std::size_t inner, const std::vector<Kernel1D>& kernels,
                                    const std::vector<int>& kernel_of_plane);
void convolve_axis_in_place_by_lane(std::vector<double>& data, std::size_t outer, int n,
                                    std::size_t inner, const std::vector<Kernel1D>& kernels,
                                    const std::vector<int>& kernel_of_plane);
// Its transpose (the adjoint): the correlation with each lane's kernel.
void correlate_axis_in_place_by_lane(std::vector<double>& data, std::size_t outer, int n,
                                     std::size_t inner, const std::vector<Kernel1D>& kernels,
                                     const std::vector<int>& kernel_of_plane);

}  // namespace ifusim
