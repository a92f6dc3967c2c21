#include "io/ssp/fits_file.h"

#include <fitsio.h>

#include <sstream>

#include "core/config_error.h"

namespace ifusim::fits {
namespace {

std::string status_text(int status) {
  char text[FLEN_STATUS] = {0};
  fits_get_errstatus(status, text);
  std::string message = text;
  char line[FLEN_ERRMSG] = {0};
  // The error stack carries the detail (e.g. "could not open the named file").
  if (fits_read_errmsg(line)) message += std::string("; ") + line;
  fits_clear_errmsg();
  return message;
}

fitsfile* as_fits(void* p) {
  return static_cast<fitsfile*>(p);
}

}  // namespace

File::File(const std::string& path) : path_(path) {
  fitsfile* f = nullptr;
  int status = 0;
  if (fits_open_file(&f, path.c_str(), READONLY, &status)) {
    if (f) {
      int ignored = 0;
      fits_close_file(f, &ignored);
    }
    throw InputError(path + ": cannot open FITS file (" + status_text(status) + ")");
  }
  fptr_ = f;
}

File::~File() {
  if (fptr_) {
    int status = 0;
    fits_close_file(as_fits(fptr_), &status);
  }
}

bool File::has_key(const std::string& key) const {
  char card[FLEN_CARD];
  int status = 0;
  fits_read_card(as_fits(fptr_), key.c_str(), card, &status);
  fits_clear_errmsg();
  return status == 0;
}

double File::key_double(const std::string& key) const {
  double value = 0.0;
  int status = 0;
  if (fits_read_key(as_fits(fptr_), TDOUBLE, key.c_str(), &value, nullptr, &status))
    throw InputError(path_ + ": header keyword " + key + ": expected a number (" +
                     status_text(status) + ")");
  return value;
}

long File::key_long(const std::string& key) const {
  long value = 0;
  int status = 0;
  if (fits_read_key(as_fits(fptr_), TLONG, key.c_str(), &value, nullptr, &status))
    throw InputError(path_ + ": header keyword " + key + ": expected an integer (" +
                     status_text(status) + ")");
  return value;
}

std::string File::key_string(const std::string& key) const {
  char value[FLEN_VALUE] = {0};
  int status = 0;
  if (fits_read_key(as_fits(fptr_), TSTRING, key.c_str(), value, nullptr, &status))
    throw InputError(path_ + ": header keyword " + key + ": expected a string (" +
                     status_text(status) + ")");
  return value;
}

std::optional<double> File::optional_double(const std::string& key) const {
  if (!has_key(key)) return std::nullopt;
  return key_double(key);
}

std::vector<long> File::image_shape() const {
  int status = 0, naxis = 0;
  if (fits_get_img_dim(as_fits(fptr_), &naxis, &status))
    throw InputError(path_ + ": primary HDU: cannot read NAXIS (" + status_text(status) + ")");
  if (naxis < 1)
    throw InputError(path_ + ": primary HDU: expected an image (NAXIS >= 1), found NAXIS = " +
                     std::to_string(naxis));
  std::vector<long> shape(static_cast<std::size_t>(naxis));
  if (fits_get_img_size(as_fits(fptr_), naxis, shape.data(), &status))
    throw InputError(path_ + ": primary HDU: cannot read NAXISn (" + status_text(status) + ")");
  return shape;
}

std::vector<double> File::read_image() const {
  const auto shape = image_shape();
  long n = 1;
  for (long d : shape) n *= d;
  std::vector<double> data(static_cast<std::size_t>(n));
  int status = 0, anynul = 0;
  double nulval = 0.0;
  if (n > 0 && fits_read_img(as_fits(fptr_), TDOUBLE, 1, n, &nulval, data.data(), &anynul, &status))
    throw InputError(path_ + ": primary HDU: cannot read the image data (" + status_text(status) +
                     ")");
  return data;
}

std::vector<double> linear_wavelength_axis(const File& file, long n_pixels) {
  const double crval = file.key_double("CRVAL1");
  const double cdelt = file.key_double("CDELT1");
  const double crpix = file.optional_double("CRPIX1").value_or(1.0);
  if (!(cdelt > 0.0)) {
    std::ostringstream os;
    os << file.path() << ": header keyword CDELT1: expected a positive wavelength step in "
       << "Angstrom, found " << cdelt;
    throw InputError(os.str());
  }
  std::vector<double> wave(static_cast<std::size_t>(n_pixels));
  for (long k = 0; k < n_pixels; ++k)
    wave[static_cast<std::size_t>(k)] = crval + cdelt * (static_cast<double>(k) + 1.0 - crpix);
  return wave;
}

}  // namespace ifusim::fits
