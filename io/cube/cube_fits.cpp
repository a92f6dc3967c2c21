// FITS cubes in the MUSE layout (ESO MUSE pipeline user manual, "DATACUBE" products): an empty
// primary HDU with the provenance, the flux in extension DATA, the variance in extension STAT.
// WCS keywords follow Greisen & Calabretta 2002 (paper I), Calabretta & Greisen 2002 (paper II,
// the TAN projection) and Greisen et al. 2006 (paper III, AWAV/WAVE spectral axes).
#include <fitsio.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numbers>
#include <type_traits>
#include <utility>
#include <variant>

#include "core/config_error.h"
#include "data/host_memory.h"
#include "io/cube/cube_io.h"
#include "io/cube/plane_blocks.h"
#include "io/temp_file.h"

namespace ifusim {
namespace {

constexpr double kDeg = std::numbers::pi / 180.0;
// The transpose buffer: 256 Ki values, 1 MiB in float (2 in double). At 1 << 22 a small cube
// (MUSE's 25 x 25 x 3721, 2.3 M voxels) was copied whole, 9.3 MB beside it, and that copy was the
// whole process's peak memory at 1e5 stars (issue 22); a large cube's blocks still hold whole
// planes (2 of MUSE-WFM's 90,000 spaxels, 0.7 MB a cfitsio write).
constexpr std::size_t kChunkElements = std::size_t{1} << 18;

std::string fits_message(int status) {
  char text[FLEN_STATUS] = {0};
  fits_get_errstatus(status, text);
  std::string out = text;
  char line[FLEN_ERRMSG];
  std::string detail;
  while (fits_read_errmsg(line)) detail = line;  // the last one is usually the most specific
  if (!detail.empty()) out += "; " + detail;
  return out;
}

struct Closer {
  void operator()(fitsfile* f) const {
    int status = 0;
    fits_close_file(f, &status);
  }
};
using FitsPtr = std::unique_ptr<fitsfile, Closer>;

// Throws InputError("<file>: <what>: <cfitsio's message>") for a non-zero status.
// A full disk or a file-size limit is named as the system says it (cfitsio only says that the
// write failed).
void check(int status, const std::string& file, const std::string& what) {
  if (status == 0) return;
  const int system_error = errno;
  throw InputError(file + ": " + what + ": " + fits_message(status) +
                   detail::write_refused_reason(system_error));
}

// FITS headers hold printable ASCII only: escape anything else (and the backslash) C-style so
// that a provenance value (a JSON config with newlines, UTF-8 names) survives unchanged.
std::string escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c < 32 || c > 126) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string unescape(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '\\') {
      out += '\\';
      ++i;
    } else if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] == 'x') {
      out += static_cast<char>(std::stoi(s.substr(i + 2, 2), nullptr, 16));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string provenance_key(const char* kind, std::size_t i) {
  char buf[FLEN_KEYWORD];
  std::snprintf(buf, sizeof buf, "PROV%s%03zu", kind, i + 1);
  return buf;
}

class Writer {
 public:
  Writer(fitsfile* f, std::string file) : f_(f), file_(std::move(file)) {}
  void str(const char* key, const std::string& value, const char* comment) {
    fits_write_key_str(f_, key, value.c_str(), comment, &status_);
    check(status_, file_, std::string("cannot write keyword ") + key);
  }
  void longstr(const std::string& key, const std::string& value, const char* comment) {
    fits_write_key_longstr(f_, key.c_str(), value.c_str(), comment, &status_);
    check(status_, file_, "cannot write keyword " + key);
  }
  // 17 significant digits: every double survives the header's text form unchanged.
  void dbl(const char* key, double value, const char* comment) {
    fits_write_key_dbl(f_, key, value, -17, comment, &status_);
    check(status_, file_, std::string("cannot write keyword ") + key);
  }
  void comment(const std::string& text) {
    fits_write_comment(f_, text.c_str(), &status_);
    check(status_, file_, "cannot write a COMMENT");
  }
  void lng(const char* key, long value, const char* comment) {
    fits_write_key_lng(f_, key, value, comment, &status_);
    check(status_, file_, std::string("cannot write keyword ") + key);
  }

 private:
  fitsfile* f_;
  std::string file_;
  int status_ = 0;
};

void write_wcs(Writer& w, const Cube& cube, int naxis) {
  for (const auto& card : cube_wcs_cards(cube, naxis)) {
    if (const auto* text = std::get_if<std::string>(&card.value))
      w.str(card.key.c_str(), *text, card.comment.c_str());
    else
      w.dbl(card.key.c_str(), std::get<double>(card.value), card.comment.c_str());
  }
}

// Writes one image extension of voxel values value(i) (i spaxel-major), transposing from
// spaxel-major in chunks of wavelength planes so that memory stays bounded. The values are
// converted here to the image's type (T: float for FLOAT_IMG, double for DOUBLE_IMG, int for
// LONG_IMG), once, so that cfitsio only swaps their bytes (handed doubles for a FLOAT_IMG it
// converted each value again, with its own scaling checks).
template <class T, class Value>
void write_image_of(fitsfile* f, const std::string& file, const Cube& cube, Value&& value,
                    const char* extname, const std::string& unit, const char* description) {
  constexpr int bitpix = std::is_same_v<T, float>    ? FLOAT_IMG
                         : std::is_same_v<T, double> ? DOUBLE_IMG
                                                     : LONG_IMG;
  constexpr int datatype = std::is_same_v<T, float>    ? TFLOAT
                           : std::is_same_v<T, double> ? TDOUBLE
                                                       : TINT;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int>);
  const auto& s = cube.shape;
  long naxes[3] = {s.nx, s.ny, s.n_wave};
  int status = 0;
  fits_create_img(f, bitpix, 3, naxes, &status);
  check(status, file, std::string("cannot create extension ") + extname);
  Writer w(f, file);
  w.str("EXTNAME", extname, description);
  if (!unit.empty()) w.str("BUNIT", unit, "");
  write_wcs(w, cube, 3);

  const std::size_t n_spaxels = s.n_spaxels();
  detail::for_each_plane_block_of<T>(
      s, kChunkElements, std::forward<Value>(value), [&](int k0, int k1, T* block) {
        long first[3] = {1, 1, k0 + 1};
        fits_write_pix(f, datatype, first, static_cast<LONGLONG>((k1 - k0) * n_spaxels), block,
                       &status);
        check(status, file, std::string("cannot write the pixels of ") + extname);
      });
}

// A held array (flux or variance): float32, as the cube holds it (data/datacube.h).
void write_image(fitsfile* f, const std::string& file, const Cube& cube,
                 const std::vector<float>& values, const char* extname, const std::string& unit,
                 const char* description) {
  const float* v = values.data();
  auto value = [v](std::size_t i) { return v[i]; };
  write_image_of<float>(f, file, cube, value, extname, unit, description);
}

// A 1-D image extension of one value per wavelength plane (MaNGA's WAVE, SPECRES).
void write_spectrum_extension(fitsfile* f, const std::string& file, const std::string& extname,
                              const std::vector<double>& values, const std::string& unit,
                              const char* description) {
  long n = static_cast<long>(values.size());
  int status = 0;
  fits_create_img(f, DOUBLE_IMG, 1, &n, &status);
  check(status, file, "cannot create extension " + extname);
  Writer w(f, file);
  w.str("EXTNAME", extname, description);
  if (!unit.empty()) w.str("BUNIT", unit, "");
  long first = 1;
  fits_write_pix(f, TDOUBLE, &first, n, const_cast<double*>(values.data()), &status);
  check(status, file, "cannot write the pixels of " + extname);
}

// A 1-D image extension of one value per wavelength plane, read back; empty where the file has
// no such extension.
std::vector<double> read_spectrum_extension(fitsfile* raw, const std::string& path,
                                            const char* extname, const CubeShape& shape) {
  int status = 0;
  fits_movnam_hdu(raw, IMAGE_HDU, const_cast<char*>(extname), 0, &status);
  if (status == BAD_HDU_NUM) {
    fits_clear_errmsg();
    return {};
  }
  const std::string name = extname;
  check(status, path, "cannot open extension " + name);
  long n = 0;
  int naxis = 0, any_null = 0;
  fits_get_img_dim(raw, &naxis, &status);
  fits_get_img_size(raw, 1, &n, &status);
  check(status, path, "cannot read the size of " + name);
  if (naxis != 1 || n != shape.n_wave) {
    std::string message = path + ": extension " + name;
    message += " should hold one value per wavelength (" + std::to_string(shape.n_wave) + ")";
    throw InputError(message);
  }
  std::vector<double> values(static_cast<std::size_t>(n));
  long first = 1;
  fits_read_pix(raw, TDOUBLE, &first, n, nullptr, values.data(), &any_null, &status);
  check(status, path, "cannot read the pixels of " + name);
  return values;
}

// A Gaussian LSF of the given FWHM pixelised by a pixel of the given width (a top hat, variance
// width^2 / 12, added to the Gaussian's sigma^2), and back: MaNGA's SPECRES (post-pixel) and
// PRESPECRES (pre-pixel) as the DRP data model defines them (Law et al. 2021, AJ 161, 52).
constexpr double kFwhmPerSigmaSquared = 8.0 * std::numbers::ln2;  // (2 sqrt(2 ln 2))^2
double post_pixel_fwhm(double fwhm, double width) {
  return std::sqrt(fwhm * fwhm + kFwhmPerSigmaSquared * width * width / 12.0);
}
double pre_pixel_fwhm(double post_fwhm, double width) {
  return std::sqrt(
      std::max(post_fwhm * post_fwhm - kFwhmPerSigmaSquared * width * width / 12.0, 0.0));
}

// MaNGA's DRP bits used here (MANGA_DRP3PIXMASK, SDSS-IV DR17 bitmasks): NOCOV (bit 0, no
// coverage) and DONOTUSE (bit 10).
constexpr std::int32_t kMangaNoCoverage = 1, kMangaDoNotUse = 1 << 10;

// The MaNGA DRP's LOGCUBE layout (Law et al. 2016, AJ 152, 83, sec. 9; the DRP data model):
// FLUX, IVAR (1 / variance, 0 where there is no measurement), MASK (NOCOV | DONOTUSE where
// there is none: outside the aperture), WAVE (the planes' centres) and SPECRES (lambda / FWHM
// of the LSF, as the DAP reads it: Westfall et al. 2019, AJ 158, 231). Unlike MaNGA's files, FLUX
// stays NaN where there is no measurement (MaNGA writes 0 there and relies on the mask).
void write_manga_extensions(fitsfile* f, const std::string& file, const Cube& cube) {
  write_image(f, file, cube, cube.data, "FLUX", cube.unit, "flux");
  const float* data = cube.data.data();
  if (!cube.variance.empty()) {
    // IVAR is made a block of planes at a time as it is written (a whole-cube array of it would
    // be 1.3 GB on MUSE-WFM), float32 where every value fits (1 / a tiny float variance may not).
    const float* var = cube.variance.data();
    auto ivar = [data, var](std::size_t i) {
      const double v = var[i];
      return v > 0 && std::isfinite(v) && !std::isnan(data[i]) ? 1.0 / v : 0.0;
    };
    const std::string ivar_unit = inverse_squared_unit(cube.unit);
    if (fits_in_float32_of(cube.variance.size(), ivar))
      write_image_of<float>(f, file, cube, ivar, "IVAR", ivar_unit, "inverse variance of FLUX");
    else
      write_image_of<double>(f, file, cube, ivar, "IVAR", ivar_unit, "inverse variance of FLUX");
  }
  write_image_of<int>(
      f, file, cube,
      [data](std::size_t i) { return std::isnan(data[i]) ? kMangaNoCoverage | kMangaDoNotUse : 0; },
      "MASK", "", "MANGA_DRP3PIXMASK bits: 1 NOCOV, 1024 DONOTUSE");
  std::vector<double> wave(static_cast<std::size_t>(cube.shape.n_wave));
  for (int k = 0; k < cube.shape.n_wave; ++k) wave[k] = cube.axes.wavelength_angstrom(k);
  write_spectrum_extension(
      f, file, "WAVE", wave, "Angstrom",
      cube.axes.wavelength_medium == "air" ? "wavelength in air" : "wavelength in vacuum");
  if (!cube.lsf_fwhm_angstrom.empty()) {
    // The MaNGA DRP's data model (DR15-DR17 LOGCUBE): SPECRES is the median resolution
    // R = lambda / FWHM of the LSF *after* pixelisation, PRESPECRES that of the pre-pixel LSF
    // (PREDISP / DISP, the same as 1-sigma widths in Angstrom, are per spaxel cubes and are not
    // written); mangadap reads R = lambda / FWHM from either (Westfall et al. 2019; Law et al.
    // 2021, AJ 161, 52, on pre- versus post-pixel LSFs). The cube's LSF (the telescope's
    // lsf_fwhm_angstrom) is the kernel the lsf stage applies before the flux-conserving binning:
    // the pre-pixel one (post_pixel_fwhm adds the pixel). SPECRESD and PRESPECRESD are the
    // standard deviation of SPECRES and PRESPECRES across the fibres that feed the cube: the
    // simulated instrument has one LSF curve for every fibre (and every spaxel), so they are 0.
    std::vector<double> pre(wave.size()), post(wave.size());
    for (std::size_t k = 0; k < wave.size(); ++k) {
      const double fwhm = cube.lsf_fwhm_angstrom[k];
      pre[k] = wave[k] / fwhm;
      post[k] = wave[k] / post_pixel_fwhm(fwhm, cube.axes.width_angstrom(static_cast<int>(k)));
    }
    write_spectrum_extension(f, file, "SPECRES", post, "",
                             "median spectral resolution lambda/FWHM (post-pixel)");
    std::vector<double>& spread = post;  // no longer needed: the spreads' zeros (one LSF)
    std::fill(spread.begin(), spread.end(), 0.0);
    write_spectrum_extension(f, file, "SPECRESD", spread, "",
                             "sd of SPECRES across fibres (0: one LSF)");
    write_spectrum_extension(f, file, "PRESPECRES", pre, "",
                             "median spectral resolution lambda/FWHM (pre-pixel)");
    write_spectrum_extension(f, file, "PRESPECRESD", spread, "",
                             "sd of PRESPECRES across fibres (0: one LSF)");
  }
}

// A map as a 2-D image extension (NAXIS1 = x, NAXIS2 = y) with the cube's celestial WCS.
void write_map(fitsfile* f, const std::string& file, const Cube& cube, const std::string& extname,
               const SkyMap& map) {
  long naxes[2] = {cube.shape.nx, cube.shape.ny};
  int status = 0;
  fits_create_img(f, fits_in_float32(map.values) ? FLOAT_IMG : DOUBLE_IMG, 2, naxes, &status);
  check(status, file, "cannot create extension " + extname);
  Writer w(f, file);
  w.str("EXTNAME", extname, "");
  w.comment(map.description);
  if (!map.unit.empty()) w.str("BUNIT", map.unit, "");
  write_wcs(w, cube, 2);
  long first[2] = {1, 1};
  fits_write_pix(f, TDOUBLE, first, static_cast<LONGLONG>(map.values.size()),
                 const_cast<double*>(map.values.data()), &status);
  check(status, file, "cannot write the pixels of " + extname);
}

// A spatial correlation matrix as the binary table MaNGA's DRP writes (GCORREL, ...: the upper
// triangle in coordinate form; data/datacube.h, SpatialCorrelation), so that its readers
// (mangadap's Covariance.from_fits, Marvin) read ours: columns INDXI_C1, INDXI_C2, INDXJ_C1,
// INDXJ_C2 (32-bit integers, 0-based x and y of the two spaxels) and RHOIJ (double); keywords
// COVSHAPE ("(N, N)", N the spaxels of a plane), BBWAVE and BBINDEX (0-based plane).
void write_correlation(fitsfile* f, const std::string& file, const Cube& cube,
                       const std::string& extname, const SpatialCorrelation& c) {
  char n_i_x[] = "INDXI_C1", n_i_y[] = "INDXI_C2", n_j_x[] = "INDXJ_C1", n_j_y[] = "INDXJ_C2",
       n_rho[] = "RHOIJ", f_int[] = "1J", f_dbl[] = "1D";
  char* names[] = {n_i_x, n_i_y, n_j_x, n_j_y, n_rho};
  char* forms[] = {f_int, f_int, f_int, f_int, f_dbl};
  int status = 0;
  fits_create_tbl(f, BINARY_TBL, static_cast<LONGLONG>(c.rho.size()), 5, names, forms, nullptr,
                  extname.c_str(), &status);
  check(status, file, "cannot create extension " + extname);
  const std::string n = std::to_string(cube.shape.n_spaxels());
  std::string shape = "(";
  shape += n;
  shape += ", ";
  shape += n;
  shape += ")";
  Writer w(f, file);
  w.str("COVSHAPE", shape, "shape of the correlation matrix");
  w.dbl("BBWAVE", c.wavelength_angstrom, "[Angstrom] band's wavelength");
  w.lng("BBINDEX", c.plane, "0-based wavelength plane of the matrix");
  w.comment("upper triangle of the spaxels' noise correlation matrix (MaNGA DRP format)");
  const auto rows = static_cast<LONGLONG>(c.rho.size());
  int column = 1;
  for (const auto* indices : {&c.i_x, &c.i_y, &c.j_x, &c.j_y})
    fits_write_col(f, TINT, column++, 1, 1, rows, const_cast<int*>(indices->data()), &status);
  fits_write_col(f, TDOUBLE, column, 1, 1, rows, const_cast<double*>(c.rho.data()), &status);
  check(status, file, "cannot write the rows of " + extname);
}

// Optional keyword: false when absent, InputError when present but not a number.
bool read_double(fitsfile* f, const std::string& file, const char* key, double& out) {
  int status = 0;
  fits_read_key(f, TDOUBLE, key, &out, nullptr, &status);
  if (status == KEY_NO_EXIST) return false;
  check(status, file, std::string("keyword ") + key + " should be a number");
  return true;
}

double require_double(fitsfile* f, const std::string& file, const char* key, const char* why) {
  double v = 0;
  if (!read_double(f, file, key, v))
    throw InputError(file + ": keyword " + key + " missing (" + why + ")");
  return v;
}

bool read_string(fitsfile* f, const std::string& file, const char* key, std::string& out) {
  int status = 0;
  char* value = nullptr;
  fits_read_key_longstr(f, key, &value, nullptr, &status);
  if (status == KEY_NO_EXIST) return false;
  check(status, file, std::string("keyword ") + key + " should be a string");
  out = value ? value : "";
  fits_free_memory(value, &status);
  return true;
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The pixel step of axis i: CDELTi, else CDi_i; a rotated grid is refused.
double axis_step(fitsfile* f, const std::string& file, int i) {
  for (int j = 1; j <= 3; ++j) {
    if (j == i) continue;
    for (const char* kind : {"CD", "PC"}) {
      const std::string key = kind + std::to_string(i) + "_" + std::to_string(j);
      double v = 0;
      if (read_double(f, file, key.c_str(), v) && v != 0)
        throw InputError(file + ": keyword " + key + " = " + std::to_string(v) +
                         ": rotated or skewed grids are not supported (expected 0)");
    }
  }
  double v = 0;
  const std::string cdelt = "CDELT" + std::to_string(i),
                    cd = "CD" + std::to_string(i) + "_" + std::to_string(i);
  if (read_double(f, file, cd.c_str(), v)) return v;
  if (read_double(f, file, cdelt.c_str(), v)) {
    const std::string pc = "PC" + std::to_string(i) + "_" + std::to_string(i);
    double scale = 1;
    if (read_double(f, file, pc.c_str(), scale)) v *= scale;
    return v;
  }
  throw InputError(file + ": neither " + cdelt + " nor " + cd + " found (the pixel step of axis " +
                   std::to_string(i) + ")");
}

void read_image(fitsfile* f, const std::string& file, const CubeShape& s, const char* extname,
                std::vector<float>& values) {
  int status = 0;
  int naxis = 0;
  long naxes[3] = {0, 0, 0};
  fits_get_img_dim(f, &naxis, &status);
  fits_get_img_size(f, 3, naxes, &status);
  check(status, file, std::string("cannot read the image size of ") + extname);
  if (naxis != 3 || naxes[0] != s.nx || naxes[1] != s.ny || naxes[2] != s.n_wave)
    throw InputError(file + ": extension " + extname + " should be a " + to_string(s) +
                     " image like the data");
  // Read as float32, the cube's type (cfitsio converts a DOUBLE_IMG, and fails naming the
  // extension where a value is beyond float's range).
  values = large_vector<float>(s.n_voxels());
  const std::size_t n_spaxels = s.n_spaxels();
  const std::size_t planes = std::clamp<std::size_t>(kChunkElements / n_spaxels, 1, s.n_wave);
  std::vector<float> buffer(planes * n_spaxels);
  for (int k0 = 0; k0 < s.n_wave; k0 += static_cast<int>(planes)) {
    const int k1 = std::min<int>(s.n_wave, k0 + static_cast<int>(planes));
    long first[3] = {1, 1, k0 + 1};
    int any_null = 0;
    // No null value: blank (NaN) pixels come back as NaN, which `compare` counts.
    fits_read_pix(f, TFLOAT, first, static_cast<LONGLONG>((k1 - k0) * n_spaxels), nullptr,
                  buffer.data(), &any_null, &status);
    check(status, file, std::string("cannot read the pixels of ") + extname);
    for (std::size_t sp = 0; sp < n_spaxels; ++sp)
      for (int k = k0; k < k1; ++k)
        values[sp * s.n_wave + k] = buffer[static_cast<std::size_t>(k - k0) * n_spaxels + sp];
  }
}

// Every named 2-D image extension: a map of the field (its name in lower case).
void read_maps(fitsfile* f, const std::string& file, Cube& cube) {
  int status = 0, n_hdus = 0;
  fits_get_num_hdus(f, &n_hdus, &status);
  check(status, file, "cannot count the HDUs");
  for (int i = 2; i <= n_hdus; ++i) {
    int type = 0, naxis = 0;
    fits_movabs_hdu(f, i, &type, &status);
    check(status, file, "cannot open HDU " + std::to_string(i));
    fits_get_img_dim(f, &naxis, &status);
    std::string extname;
    if (type != IMAGE_HDU || naxis != 2 || !read_string(f, file, "EXTNAME", extname)) continue;
    long naxes[2] = {0, 0};
    fits_get_img_size(f, 2, naxes, &status);
    check(status, file, "cannot read the image size of " + extname);
    if (naxes[0] != cube.shape.nx || naxes[1] != cube.shape.ny)
      throw InputError(file + ": extension " + extname + " should be a " +
                       std::to_string(cube.shape.nx) + " x " + std::to_string(cube.shape.ny) +
                       " map of the cube's field");
    std::string name = extname;
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    SkyMap& map = cube.maps[name];
    read_string(f, file, "BUNIT", map.unit);
    int n_keys = 0;
    fits_get_hdrspace(f, &n_keys, nullptr, &status);
    for (int k = 1; k <= n_keys && status == 0; ++k) {
      char key[FLEN_KEYWORD] = {0}, value[FLEN_VALUE] = {0}, comment[FLEN_COMMENT] = {0};
      fits_read_keyn(f, k, key, value, comment, &status);
      if (std::strcmp(key, "COMMENT") == 0) map.description += comment;
    }
    check(status, file, "cannot read the header of " + extname);
    map.values.assign(cube.shape.n_spaxels(), 0.0);
    long first[2] = {1, 1};
    int any_null = 0;
    fits_read_pix(f, TDOUBLE, first, static_cast<LONGLONG>(map.values.size()), nullptr,
                  map.values.data(), &any_null, &status);
    check(status, file, "cannot read the pixels of " + extname);
  }
}

}  // namespace

void write_cube_fits(const Cube& cube, const std::string& path) {
  validate_cube(cube, path);
  detail::TempFile temp(path);
  {
    int status = 0;
    fitsfile* raw = nullptr;
    fits_create_file(&raw, temp.path().c_str(), &status);
    check(status, path, "cannot create FITS file " + temp.path());
    FitsPtr f(raw);

    // Primary HDU: no data, the run's provenance.
    fits_create_img(raw, FLOAT_IMG, 0, nullptr, &status);
    check(status, path, "cannot create the primary HDU");
    fits_write_key_longwarn(raw, &status);  // LONGSTRN: values continue over CONTINUE cards
    fits_write_date(raw, &status);
    check(status, path, "cannot write the primary header");
    Writer w(raw, path);
    w.str("ORIGIN", "ifusim", "simulated IFU datacube");
    w.str("IFUSIMV", IFUSIM_VERSION, "ifusim version");
    w.lng("NPROV", static_cast<long>(cube.provenance.size()),
          "provenance entries PROVKnnn/PROVVnnn");
    if (cube.provenance.size() > 999)
      throw std::invalid_argument(path + ": at most 999 provenance entries fit the header, have " +
                                  std::to_string(cube.provenance.size()));
    for (std::size_t i = 0; i < cube.provenance.size(); ++i) {
      w.longstr(provenance_key("K", i), escape(cube.provenance[i].first), "provenance key");
      w.longstr(provenance_key("V", i), escape(cube.provenance[i].second), "provenance value");
    }

    if (cube.fits_layout == "manga")
      write_manga_extensions(raw, path, cube);
    else {
      write_image(raw, path, cube, cube.data, "DATA", cube.unit, "flux");
      if (!cube.variance.empty())
        write_image(raw, path, cube, cube.variance, "STAT", squared_unit(cube.unit),
                    "variance of DATA");
    }
    for (const auto& [name, map] : cube.maps) write_map(raw, path, cube, upper(name), map);
    for (const auto& [name, c] : cube.correlations) write_correlation(raw, path, cube, name, c);

    FitsPtr::pointer released = f.release();
    fits_close_file(released, &status);
    check(status, path, "cannot finish writing " + temp.path());
  }
  temp.commit();
}

Cube read_cube_fits(const std::string& path) {
  int status = 0;
  fitsfile* raw = nullptr;
  fits_open_file(&raw, path.c_str(), READONLY, &status);
  check(status, path, "cannot open FITS file");
  FitsPtr f(raw);
  Cube cube;

  // Provenance from the primary header.
  long n_prov = 0;
  fits_read_key(raw, TLONG, "NPROV", &n_prov, nullptr, &status);
  if (status == KEY_NO_EXIST) {
    status = 0;
    n_prov = 0;
  }
  check(status, path, "keyword NPROV should be an integer");
  for (long i = 0; i < n_prov; ++i) {
    std::string key, value;
    const std::string kk = provenance_key("K", static_cast<std::size_t>(i)),
                      kv = provenance_key("V", static_cast<std::size_t>(i));
    if (!read_string(raw, path, kk.c_str(), key) || !read_string(raw, path, kv.c_str(), value))
      throw InputError(path + ": NPROV = " + std::to_string(n_prov) + " but " + kk + " or " + kv +
                       " is missing");
    cube.provenance.emplace_back(unescape(key), unescape(value));
  }

  // The flux: extension DATA (MUSE layout), FLUX (MaNGA layout), else the primary HDU.
  const char* flux_extension = "DATA";
  fits_movnam_hdu(raw, IMAGE_HDU, const_cast<char*>("DATA"), 0, &status);
  if (status == BAD_HDU_NUM) {
    status = 0;
    fits_clear_errmsg();
    fits_movnam_hdu(raw, IMAGE_HDU, const_cast<char*>("FLUX"), 0, &status);
    flux_extension = "FLUX";
    cube.fits_layout = "manga";
  }
  if (status == BAD_HDU_NUM) {
    status = 0;
    fits_clear_errmsg();
    flux_extension = "DATA";
    cube.fits_layout = "muse";
    fits_movabs_hdu(raw, 1, nullptr, &status);
  }
  check(status, path, "cannot find the flux (extension DATA or FLUX, or the primary HDU)");
  int naxis = 0;
  long naxes[3] = {0, 0, 0};
  fits_get_img_dim(raw, &naxis, &status);
  check(status, path, "cannot read NAXIS");
  if (naxis != 3)
    throw InputError(path + ": the flux (extension DATA or the primary HDU) has NAXIS = " +
                     std::to_string(naxis) + ", expected 3 (x, y, wavelength)");
  fits_get_img_size(raw, 3, naxes, &status);
  check(status, path, "cannot read NAXISn");
  cube.shape =
      CubeShape{static_cast<int>(naxes[0]), static_cast<int>(naxes[1]), static_cast<int>(naxes[2])};

  std::string ctype1, ctype2, ctype3;
  read_string(raw, path, "CTYPE1", ctype1);
  read_string(raw, path, "CTYPE2", ctype2);
  read_string(raw, path, "CTYPE3", ctype3);
  if (ctype1 != "RA---TAN" || ctype2 != "DEC--TAN")
    throw InputError(path + ": CTYPE1/CTYPE2 are '" + ctype1 + "'/'" + ctype2 +
                     "', expected 'RA---TAN'/'DEC--TAN'");
  const bool log_axis = ctype3 == "AWAV-LOG" || ctype3 == "WAVE-LOG";
  if (ctype3 == "AWAV" || ctype3 == "AWAV-LOG")
    cube.axes.wavelength_medium = "air";
  else if (ctype3 == "WAVE" || ctype3 == "WAVE-LOG")
    cube.axes.wavelength_medium = "vacuum";
  else
    throw InputError(path + ": CTYPE3 is '" + ctype3 +
                     "', expected 'AWAV' or 'WAVE' (linear) or 'AWAV-LOG' or 'WAVE-LOG' "
                     "(logarithmic)");
  for (const char* key : {"CUNIT1", "CUNIT2"}) {
    std::string u;
    if (read_string(raw, path, key, u) && u != "deg")
      throw InputError(path + ": " + key + " is '" + u + "', expected 'deg'");
  }

  const double step1 = axis_step(raw, path, 1), step2 = axis_step(raw, path, 2);
  if (!(step1 < 0) || !(step2 > 0) || std::abs(std::abs(step1) - step2) > 1e-9 * step2)
    throw InputError(
        path + ": pixel steps " + std::to_string(step1) + ", " + std::to_string(step2) +
        " deg: expected square spaxels with RA decreasing with x (CDELT1 = -CDELT2 < 0)");
  cube.axes.spaxel_arcsec = step2 * 3600.0;

  // RA/Dec of the cube's centre: the tangent point when CRPIX is the centre (as written here),
  // else the inverse gnomonic projection of the centre (Calabretta & Greisen 2002, eq. 54, in
  // Snyder's 1987 form).
  const double crval1 = require_double(raw, path, "CRVAL1", "RA of the reference pixel");
  const double crval2 = require_double(raw, path, "CRVAL2", "Dec of the reference pixel");
  const double crpix1 = require_double(raw, path, "CRPIX1", "reference pixel");
  const double crpix2 = require_double(raw, path, "CRPIX2", "reference pixel");
  const double xi = ((cube.shape.nx + 1) / 2.0 - crpix1) * step1 * kDeg;
  const double eta = ((cube.shape.ny + 1) / 2.0 - crpix2) * step2 * kDeg;
  if (xi == 0 && eta == 0) {
    cube.axes.ra_deg = crval1;
    cube.axes.dec_deg = crval2;
  } else {
    // xi grows towards increasing RA (FITS intermediate coordinates).
    const double rho = std::hypot(xi, eta), c = std::atan(rho), d0 = crval2 * kDeg;
    cube.axes.dec_deg =
        std::asin(std::cos(c) * std::sin(d0) + eta * std::sin(c) * std::cos(d0) / rho) / kDeg;
    double ra = crval1 + std::atan2(xi * std::sin(c), rho * std::cos(d0) * std::cos(c) -
                                                          eta * std::sin(d0) * std::sin(c)) /
                             kDeg;
    cube.axes.ra_deg = std::fmod(ra + 360.0, 360.0);
  }

  // The wavelength axis, converted to Angstrom.
  std::string cunit3 = "Angstrom";
  read_string(raw, path, "CUNIT3", cunit3);
  double to_angstrom = 0;
  const std::string u3 = upper(cunit3);
  if (u3 == "ANGSTROM")
    to_angstrom = 1;
  else if (u3 == "NM")
    to_angstrom = 10;
  else if (u3 == "UM")
    to_angstrom = 1e4;
  else if (u3 == "M")
    to_angstrom = 1e10;
  else
    throw InputError(path + ": CUNIT3 is '" + cunit3 + "', expected Angstrom, nm, um or m");
  const double crval3 = require_double(raw, path, "CRVAL3", "wavelength of the reference pixel");
  double crpix3 = 1;
  read_double(raw, path, "CRPIX3", crpix3);
  const double step3 = axis_step(raw, path, 3);
  if (!(step3 > 0))
    throw InputError(path + ": wavelength step " + std::to_string(step3) + " should be positive");
  if (log_axis) {
    // lambda(p) = CRVAL3 exp(CDELT3 (p - CRPIX3) / CRVAL3) (Greisen et al. 2006, table 3).
    if (!(crval3 > 0))
      throw InputError(path + ": CRVAL3 = " + std::to_string(crval3) + " for CTYPE3 '" + ctype3 +
                       "': expected a wavelength > 0");
    cube.axes.wave_log10_step = step3 / (crval3 * std::numbers::ln10);
    cube.axes.wave_start_angstrom =
        crpix3 == 1 ? crval3 * to_angstrom
                    : crval3 * std::exp(step3 * (1 - crpix3) / crval3) * to_angstrom;
  } else {
    cube.axes.wave_step_angstrom = step3 * to_angstrom;
    cube.axes.wave_start_angstrom =
        crpix3 == 1 ? crval3 * to_angstrom : (crval3 + (1 - crpix3) * step3) * to_angstrom;
  }

  read_string(raw, path, "BUNIT", cube.unit);
  read_image(raw, path, cube.shape, flux_extension, cube.data);

  // The variance: STAT, or the inverse of the MaNGA layout's IVAR (0 there: no measurement,
  // NaN here).
  const bool manga = cube.fits_layout == "manga";
  const char* variance_extension = manga ? "IVAR" : "STAT";
  fits_movnam_hdu(raw, IMAGE_HDU, const_cast<char*>(variance_extension), 0, &status);
  if (status == BAD_HDU_NUM) {
    status = 0;
    fits_clear_errmsg();
  } else {
    check(status, path, std::string("cannot open extension ") + variance_extension);
    read_image(raw, path, cube.shape, variance_extension, cube.variance);
    if (manga)
      for (float& v : cube.variance)
        v = v > 0 ? static_cast<float>(1.0 / static_cast<double>(v)) : std::nanf("");
  }
  if (manga) {
    // The pre-pixel LSF's FWHM: lambda / PRESPECRES where the file has it (ifusim's, MaNGA's
    // DR15-DR17 cubes), else from SPECRES (post-pixel) less the pixel's top hat (width^2 / 12 in
    // sigma^2), as write_manga_extensions defines them.
    const std::vector<double> pre = read_spectrum_extension(raw, path, "PRESPECRES", cube.shape);
    const std::vector<double> post = pre.empty()
                                         ? read_spectrum_extension(raw, path, "SPECRES", cube.shape)
                                         : std::vector<double>{};
    for (int k = 0; k < cube.shape.n_wave && !(pre.empty() && post.empty()); ++k) {
      const double lambda = cube.axes.wavelength_angstrom(k);
      cube.lsf_fwhm_angstrom.push_back(
          pre.empty() ? pre_pixel_fwhm(lambda / post[k], cube.axes.width_angstrom(k))
                      : lambda / pre[k]);
    }
  }
  read_maps(raw, path, cube);
  try {
    validate_cube(cube, path);
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
  return cube;
}

std::vector<FitsCard> cube_wcs_cards(const Cube& cube, int naxis) {
  const auto& a = cube.axes;
  const auto& s = cube.shape;
  std::vector<FitsCard> cards = {
      // The tangent point is the cube's centre: between the two middle pixels for an even count.
      {"CTYPE1", "RA---TAN", "gnomonic projection"},
      {"CTYPE2", "DEC--TAN", "gnomonic projection"},
      {"CUNIT1", "deg", ""},
      {"CUNIT2", "deg", ""},
      {"CRPIX1", (s.nx + 1) / 2.0, "the cube's centre"},
      {"CRPIX2", (s.ny + 1) / 2.0, "the cube's centre"},
      {"CRVAL1", a.ra_deg, "[deg] RA of the cube's centre"},
      {"CRVAL2", a.dec_deg, "[deg] Dec of the cube's centre"},
      // East to the left: RA decreases with x, as on the sky seen from Earth.
      {"CDELT1", -a.spaxel_arcsec / 3600.0, "[deg] spaxel size, RA decreasing with x"},
      {"CDELT2", a.spaxel_arcsec / 3600.0, "[deg] spaxel size"},
      {"RADESYS", "ICRS", ""}};
  if (naxis < 3) return cards;
  const bool air = a.wavelength_medium == "air";
  if (a.is_log()) {
    // Logarithmic sampling, Greisen et al. 2006 (paper III), sec. 3.2 and table 3 ("-LOG"):
    // lambda = CRVAL3 exp(w / CRVAL3), w = CDELT3 (p - CRPIX3), so a step of log10_step
    // decades is CDELT3 = CRVAL3 ln(10) log10_step (MaNGA's LOGCUBE writes the same CTYPE3;
    // its CD3_3 is 3621.596 x ln(10) x 1e-4 = 0.8339 A).
    cards.push_back({"CTYPE3", air ? "AWAV-LOG" : "WAVE-LOG",
                     air ? "wavelength in air, logarithmic" : "wavelength in vacuum, logarithmic"});
    cards.push_back({"CUNIT3", "Angstrom", ""});
    cards.push_back({"CRPIX3", 1.0, ""});
    cards.push_back({"CRVAL3", a.wave_start_angstrom, "[Angstrom] centre of the first pixel"});
    cards.push_back({"CDELT3", a.wave_start_angstrom * std::numbers::ln10 * a.wave_log10_step,
                     "[Angstrom] CRVAL3 ln(10) dlog10(lambda)"});
    return cards;
  }
  cards.push_back(
      {"CTYPE3", air ? "AWAV" : "WAVE", air ? "wavelength in air" : "wavelength in vacuum"});
  cards.push_back({"CUNIT3", "Angstrom", ""});
  cards.push_back({"CRPIX3", 1.0, ""});
  cards.push_back({"CRVAL3", a.wave_start_angstrom, "[Angstrom] centre of the first pixel"});
  cards.push_back({"CDELT3", a.wave_step_angstrom, "[Angstrom] linear step"});
  return cards;
}

}  // namespace ifusim
