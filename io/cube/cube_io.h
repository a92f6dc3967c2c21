#pragma once
// Reading and writing reduced cubes (data/datacube.h) as FITS and HDF5 files. The layouts are
// described in docs/outputs.md. Writers write to "<path>.tmp" and rename it at the end, so a
// failed write leaves no file behind; data and variance are stored as float32, as the cube holds
// them (data/datacube.h); maps as float32 where that holds them (fits_in_float32), else float64.
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "data/datacube.h"

namespace ifusim {

// FITS, MUSE-like: an empty primary HDU holding the run's provenance, an image extension DATA
// (NAXIS1 = x, NAXIS2 = y, NAXIS3 = wavelength) with the full WCS and BUNIT, and an extension STAT
// with the variance (same WCS, BUNIT squared) when the cube has one.
void write_cube_fits(const Cube& cube, const std::string& path);
// Reads a cube written by write_cube_fits, or any 3D image with a celestial TAN WCS and a linear
// wavelength axis (in extension DATA, else in the primary HDU). Throws InputError naming the file
// and keyword when something is missing or not as expected.
Cube read_cube_fits(const std::string& path);

// The cube's world coordinate system as FITS header cards (the ones write_cube_fits writes):
// the celestial TAN axes 1 and 2 and, for naxis 3, the linear wavelength axis 3.
struct FitsCard {
  std::string key;
  std::variant<std::string, double> value;
  std::string comment;
};
std::vector<FitsCard> cube_wcs_cards(const Cube& cube, int naxis);

// HDF5: /data and /variance as (n_wave, ny, nx) float32, /wavelength_angstrom, the axes as
// attributes of the root, and /provenance with one string attribute per key.
void write_cube_hdf5(const Cube& cube, const std::string& path);
Cube read_cube_hdf5(const std::string& path);

// By extension: .fits, .fit, .fts (optionally .gz, reading only) or .h5, .hdf5.
void write_cube(const Cube& cube, const std::string& path);
Cube read_cube(const std::string& path);

// The unit of a variance: `unit` squared, in the FITS form with one solidus that astropy.units
// parses without warning ("10**(-20)*erg/(s*cm**2*Angstrom)" and "10**(-20)*erg/s/cm**2/Angstrom"
// -> "10**(-40)*erg**2/(s**2*cm**4*Angstrom**2)"). Units outside the product/quotient grammar
// come back as "(unit)**2". Empty stays empty.
std::string squared_unit(const std::string& unit);
// The unit of an inverse variance (MaNGA's IVAR): `unit` to the power -2 in the same form
// ("10**(-20)*erg/(s*cm**2*Angstrom)" -> "10**40*s**2*cm**4*Angstrom**2/erg**2"); both are
// powered_unit(unit, exponent) for exponent 2 and -2.
std::string inverse_squared_unit(const std::string& unit);
std::string powered_unit(const std::string& unit, int exponent);

// Whether float32 holds every value without overflow or underflow: each is NaN, zero, or of a
// magnitude in float32's normal range. A variance in the square of a unit of 1 erg/s/cm2/A
// (~1e-40) would underflow, so such an array is written as float64 instead.
// fits_in_float32_of asks it of n values made by value(i) (MaNGA's IVAR, made a block at a time
// as it is written, never held whole); on all threads: 3.3e8 values on MUSE-WFM (~0.4 s a pass on
// one thread).
bool fits_in_float32(const std::vector<double>& values);
template <class Value>
bool fits_in_float32_of(std::size_t n, Value value) {
  constexpr double lo = std::numeric_limits<float>::min(), hi = std::numeric_limits<float>::max();
  const long long count = static_cast<long long>(n);
  long long outside = 0;
#pragma omp parallel for schedule(static) reduction(+ : outside)
  for (long long i = 0; i < count; ++i) {
    const double v = value(static_cast<std::size_t>(i));
    const double a = std::abs(v);
    outside += !(std::isnan(v) || a == 0.0 || (a >= lo && a <= hi));
  }
  return outside == 0;
}

// Checks a cube before it is written: sizes of data/variance against the shape, a positive
// spaxel size and wavelength step, a known medium, unique provenance keys. Throws
// std::invalid_argument naming `what` (the destination) and the problem.
void validate_cube(const Cube& cube, const std::string& what);

}  // namespace ifusim
