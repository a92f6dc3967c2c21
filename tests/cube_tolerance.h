#pragma once
// Tolerances for values read from a cube, which holds its voxels as float32 (data/datacube.h):
// each sum is made in double and rounded once as it lands in the cube, and the stages after psum
// (flux, psf, lsf, noise, ...) each round their result once more. float32 rounds to within 2^-24
// (6.0e-8) of a value; a few roundings stay within 3e-7.
namespace ifusim::test {

inline constexpr double kFloatRounding = 0x1.0p-24;  // one rounding to float32, relative
inline constexpr double kCubeValue = 3e-7;           // a cube value after a few stages, relative

}  // namespace ifusim::test
