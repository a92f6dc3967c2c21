#include "io/ssp/miles.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "core/config_error.h"
#include "io/ssp/fits_file.h"

namespace ifusim {
namespace fs = std::filesystem;

double basti_metallicity_from_mh(double mh) {
  const double r = kBastiSolarZOverX * std::pow(10.0, mh);
  return (1.0 - kBastiPrimordialHelium) * r / (1.0 + (1.0 + kBastiHeliumEnrichment) * r);
}

namespace {

struct MilesFile {
  std::string file_name;
  std::string prefix, mh_token, age_token, suffix;  // name = prefix Z mh_token T age_token suffix
  double mh = 0.0;
  double age_gyr = 0.0;
};

// Wavelength-grid keywords that every file of a library must share exactly.
struct WaveHeader {
  long n_pixels = 0;
  double crval1 = 0.0, cdelt1 = 0.0, crpix1 = 1.0;
};

}  // namespace

SspGrid read_miles_directory(const std::string& directory) {
  std::error_code ec;
  if (!fs::exists(directory, ec)) throw InputError(directory + ": MILES SSP directory not found");
  if (!fs::is_directory(directory, ec))
    throw InputError(directory + ": expected a directory of MILES SSP FITS files");

  // e.g. Mch1.30 | Z | m | 0.25 | T | 00.0300 | _iTp0.00_baseFe .fits
  static const std::regex name_re(R"(^(.*)Z([mp])([0-9]+\.[0-9]+)T([0-9]+\.[0-9]+)(.*)\.fits$)");
  std::vector<MilesFile> files;
  for (const auto& entry : fs::directory_iterator(directory)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".fits") continue;  // READMEs and the like
    std::smatch m;
    if (!std::regex_match(name, m, name_re))
      throw InputError((fs::path(directory) / name).string() +
                       ": cannot parse the MILES file name: expected "
                       "<prefix>Z<m|p><[M/H]>T<age in Gyr><suffix>.fits, e.g. "
                       "Mch1.30Zm0.25T00.0300_iTp0.00_baseFe.fits");
    MilesFile f;
    f.file_name = name;
    f.prefix = m[1];
    f.mh_token = std::string(m[2]) + std::string(m[3]);
    f.age_token = m[4];
    f.suffix = m[5];
    f.mh = (m[2] == "m" ? -1.0 : 1.0) * std::stod(m[3]);
    f.age_gyr = std::stod(m[4]);
    if (!(f.age_gyr > 0.0))
      throw InputError((fs::path(directory) / name).string() +
                       ": file name gives age T = " + f.age_token + " Gyr, expected > 0");
    files.push_back(std::move(f));
  }
  if (files.empty())
    throw InputError(directory + ": no MILES SSP files (*.fits named ...Z<m|p><[M/H]>T<age>...)");
  std::sort(files.begin(), files.end(),
            [](const MilesFile& a, const MilesFile& b) { return a.file_name < b.file_name; });

  // One library per directory: the IMF prefix and isochrone/[alpha/Fe] suffix must agree.
  for (const auto& f : files)
    if (f.prefix != files[0].prefix || f.suffix != files[0].suffix)
      throw InputError(directory + ": files " + files[0].file_name + " and " + f.file_name +
                       " belong to different MILES libraries (prefix/suffix differ); expected "
                       "one IMF, isochrone set and [alpha/Fe] per directory");

  // Axes: unique ages and [M/H], each keeping the token used in file names.
  std::map<double, std::string> ages, mhs;
  for (const auto& f : files) {
    ages.emplace(f.age_gyr, f.age_token);
    mhs.emplace(f.mh, f.mh_token);
  }
  std::map<std::pair<double, double>, const MilesFile*> by_node;
  for (const auto& f : files) {
    auto [it, inserted] = by_node.emplace(std::make_pair(f.age_gyr, f.mh), &f);
    if (!inserted)
      throw InputError(directory + ": files " + it->second->file_name + " and " + f.file_name +
                       " both give age " + f.age_token + " Gyr and [M/H] " + f.mh_token);
  }
  for (const auto& [age, age_token] : ages)
    for (const auto& [mh, mh_token] : mhs)
      if (!by_node.count({age, mh}))
        throw InputError(directory + ": incomplete MILES grid: missing " + files[0].prefix + "Z" +
                         mh_token + "T" + age_token + files[0].suffix + ".fits (age " + age_token +
                         " Gyr, [M/H] " + mh_token + "); expected every age x [M/H] of the " +
                         std::to_string(ages.size()) + " x " + std::to_string(mhs.size()) +
                         " grid");

  SspGrid grid;
  grid.name = fs::path(directory).lexically_normal().filename().string();
  if (grid.name.empty())
    grid.name = fs::path(directory).lexically_normal().parent_path().filename();
  grid.source = directory;
  grid.resolution_fwhm_angstrom = kMilesResolutionFwhmAngstrom;
  grid.z_solar = kBastiSolarMetallicity;
  grid.wavelength_medium = "air";
  for (const auto& a : ages) grid.age_gyr.push_back(a.first);
  // basti_metallicity_from_mh is increasing in [M/H], so the order of the map is kept.
  for (const auto& z : mhs) grid.metallicity.push_back(basti_metallicity_from_mh(z.first));

  WaveHeader ref;
  std::string ref_file;
  std::size_t i_age = 0;
  for (const auto& [age, age_token] : ages) {
    std::size_t i_z = 0;
    for (const auto& [mh, mh_token] : mhs) {
      const MilesFile& f = *by_node.at({age, mh});
      const std::string path = (fs::path(directory) / f.file_name).string();
      fits::File fits(path);
      const auto shape = fits.image_shape();
      long n_rows = 1;
      for (std::size_t d = 1; d < shape.size(); ++d) n_rows *= shape[d];
      if (n_rows != 1)
        throw InputError(path + ": primary HDU: expected one spectrum (NAXIS = 1), found " +
                         std::to_string(shape.size()) + " axes");
      WaveHeader h;
      h.n_pixels = shape[0];
      h.crval1 = fits.key_double("CRVAL1");
      h.cdelt1 = fits.key_double("CDELT1");
      h.crpix1 = fits.optional_double("CRPIX1").value_or(1.0);
      if (ref_file.empty()) {
        ref = h;
        ref_file = f.file_name;
        grid.wavelength_angstrom = fits::linear_wavelength_axis(fits, h.n_pixels);
        grid.flux.resize(ages.size() * mhs.size() * static_cast<std::size_t>(h.n_pixels));
      } else {
        auto mismatch = [&](const char* key, double a, double b) {
          if (a == b) return;
          std::ostringstream os;
          os.precision(12);
          os << path << ": header keyword " << key << " = " << a << " differs from " << b << " in "
             << ref_file << "; expected one wavelength grid for the whole library " << directory;
          throw InputError(os.str());
        };
        mismatch("NAXIS1", static_cast<double>(h.n_pixels), static_cast<double>(ref.n_pixels));
        mismatch("CRVAL1", h.crval1, ref.crval1);
        mismatch("CDELT1", h.cdelt1, ref.cdelt1);
        mismatch("CRPIX1", h.crpix1, ref.crpix1);
      }
      const auto data = fits.read_image();
      float* out = grid.flux.data() + (i_age * mhs.size() + i_z) * grid.n_wave();
      for (std::size_t k = 0; k < data.size(); ++k) out[k] = static_cast<float>(data[k]);
      ++i_z;
    }
    ++i_age;
  }
  return grid;
}

}  // namespace ifusim
