#include "io/sky/sky_tables.h"

#include <fitsio.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/config_error.h"

namespace ifusim {

namespace {

struct FitsCloser {
  void operator()(fitsfile* f) const {
    int status = 0;
    fits_close_file(f, &status);
  }
};

std::string fits_error(int status) {
  char text[FLEN_STATUS];
  fits_get_errstatus(status, text);
  return text;
}

// The 1-D image of the current HDU as doubles.
std::vector<double> read_vector(fitsfile* f, const std::string& file, const std::string& what) {
  int status = 0, naxis = 0;
  long n = 0;
  fits_get_img_dim(f, &naxis, &status);
  if (status == 0 && naxis == 1) fits_get_img_size(f, 1, &n, &status);
  if (status != 0 || naxis != 1 || n < 2)
    throw InputError(file + ": " + what + ": expected a 1-D image of at least 2 values" +
                     (status ? " (" + fits_error(status) + ")" : ""));
  std::vector<double> out(static_cast<std::size_t>(n));
  long first = 1;
  int any_null = 0;
  fits_read_pix(f, TDOUBLE, &first, n, nullptr, out.data(), &any_null, &status);
  if (status != 0) throw InputError(file + ": " + what + ": " + fits_error(status));
  return out;
}

}  // namespace

SkySpectrum read_sky_spectrum(const std::string& file) {
  fitsfile* raw = nullptr;
  int status = 0;
  fits_open_file(&raw, file.c_str(), READONLY, &status);
  if (status != 0)
    throw InputError(file + ": cannot open the sky spectrum (" + fits_error(status) + ")");
  const std::unique_ptr<fitsfile, FitsCloser> f(raw);
  SkySpectrum sky;
  sky.file = file;
  sky.flux = read_vector(f.get(), file, "HDU 0 (the sky's flux)");
  char extname[] = "WAVELENGTH";
  fits_movnam_hdu(f.get(), ANY_HDU, extname, 0, &status);
  if (status != 0)
    throw InputError(file + ": expected an HDU named WAVELENGTH (vacuum wavelengths in A)");
  sky.wavelength_vacuum_angstrom = read_vector(f.get(), file, "HDU WAVELENGTH");
  if (sky.wavelength_vacuum_angstrom.size() != sky.flux.size())
    throw InputError(file + ": HDU WAVELENGTH has " +
                     std::to_string(sky.wavelength_vacuum_angstrom.size()) + " values, the flux " +
                     std::to_string(sky.flux.size()) + ": expected one wavelength per flux value");
  for (std::size_t i = 0; i < sky.flux.size(); ++i) {
    const double w = sky.wavelength_vacuum_angstrom[i];
    if (!std::isfinite(w) || (i > 0 && !(w > sky.wavelength_vacuum_angstrom[i - 1])))
      throw InputError(file + ": HDU WAVELENGTH: expected finite wavelengths in increasing order");
    if (!std::isfinite(sky.flux[i]))
      throw InputError(file + ": HDU 0: expected finite flux values (value " + std::to_string(i) +
                       " is not)");
  }
  return sky;
}

ExtinctionCurve read_extinction_curve(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw InputError(file + ": cannot open the extinction table");
  ExtinctionCurve curve;
  curve.file = file;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    double w = 0.0, k = 0.0;
    if (!(fields >> w)) continue;  // a blank or comment line
    std::string rest;
    if (!(fields >> k) || (fields >> rest) || !std::isfinite(w) || !std::isfinite(k) || k < 0.0)
      throw InputError(file + ": line " + std::to_string(number) +
                       ": expected two numbers, a wavelength (A) and an extinction >= 0 "
                       "(mag per airmass)");
    if (!curve.wavelength_angstrom.empty() && !(w > curve.wavelength_angstrom.back()))
      throw InputError(file + ": line " + std::to_string(number) +
                       ": expected wavelengths in increasing order");
    curve.wavelength_angstrom.push_back(w);
    curve.mag_per_airmass.push_back(k);
  }
  if (curve.wavelength_angstrom.size() < 2)
    throw InputError(file + ": expected at least two rows of wavelength and extinction");
  return curve;
}

}  // namespace ifusim
