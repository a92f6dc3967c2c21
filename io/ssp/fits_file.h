#pragma once
// A small RAII wrapper over cfitsio for the SSP readers: opens a FITS file (cfitsio reads
// .fits.gz directly), reads header keywords and the primary image. Every failure throws
// InputError naming the file, the keyword and what was expected.
#include <optional>
#include <string>
#include <vector>

namespace ifusim::fits {

class File {
 public:
  // Throws InputError "<path>: cannot open FITS file (...)" when missing or not FITS.
  explicit File(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  bool has_key(const std::string& key) const;
  // Required keywords: throw InputError naming the keyword when absent or of the wrong type.
  double key_double(const std::string& key) const;
  long key_long(const std::string& key) const;
  std::string key_string(const std::string& key) const;
  std::optional<double> optional_double(const std::string& key) const;

  // Dimensions of the primary image (NAXIS1 first, as in FITS).
  std::vector<long> image_shape() const;
  // The whole primary image as double, in file order (NAXIS1 fastest).
  std::vector<double> read_image() const;

 private:
  void* fptr_ = nullptr;  // fitsfile*, kept opaque so fitsio.h stays out of headers
  std::string path_;
};

// Linear wavelength axis from CRVAL1, CDELT1 and CRPIX1 (FITS WCS: lambda_k = CRVAL1 +
// CDELT1 * (k + 1 - CRPIX1), k counted from 0). CRPIX1 defaults to 1 when absent; CDELT1 must
// be positive.
std::vector<double> linear_wavelength_axis(const File& file, long n_pixels);

}  // namespace ifusim::fits
