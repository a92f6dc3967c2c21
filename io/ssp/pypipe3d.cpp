#include "io/ssp/pypipe3d.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "core/config_error.h"
#include "io/ssp/fits_file.h"

namespace ifusim {
namespace fs = std::filesystem;

ResolutionCurve mastar_resolution_fwhm_angstrom() {
  return ResolutionCurve({3700.0, 6000.0, 6000.001, 9000.0},
                         {3700.0 / 1560.0, 6000.0 / 2270.0, 6000.0 / 1850.0, 9000.0 / 2650.0});
}

PyPipe3DName parse_pypipe3d_name(const std::string& name, const std::string& where) {
  static const std::regex re(
      R"(^spec_ssp_([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)(Gyr|Myr)?_z([0-9]+)(?:\.spec)?$)");
  std::smatch m;
  if (!std::regex_match(name, m, re))
    throw InputError(where + " = '" + name +
                     "': cannot parse; expected spec_ssp_<age in Gyr>_z<Z digits>.spec, e.g. "
                     "spec_ssp_12.25_z017.spec");
  PyPipe3DName out;
  out.age_gyr = std::stod(m[1]) * (m[2] == "Myr" ? 1e-3 : 1.0);
  out.metallicity = std::stod("0." + std::string(m[3]));
  if (!(out.age_gyr > 0.0) || !(out.metallicity > 0.0))
    throw InputError(where + " = '" + name + "': expected a positive age and metallicity");
  return out;
}

SspGrid read_pypipe3d_fits(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError(path + ": pyPipe3D SSP file not found");
  fits::File file(path);
  const auto shape = file.image_shape();
  if (shape.size() != 2)
    throw InputError(path + ": primary HDU: expected a 2-D image (n_pix x n_ssp), found NAXIS = " +
                     std::to_string(shape.size()));
  const long n_pix = shape[0], n_ssp = shape[1];
  if (n_pix < 2 || n_ssp < 1)
    throw InputError(path + ": primary HDU: expected NAXIS1 >= 2 pixels and NAXIS2 >= 1 spectra");

  std::vector<PyPipe3DName> rows(static_cast<std::size_t>(n_ssp));
  std::vector<double> norm(static_cast<std::size_t>(n_ssp));
  for (long i = 0; i < n_ssp; ++i) {
    const std::string name_key = "NAME" + std::to_string(i), norm_key = "NORM" + std::to_string(i);
    if (!file.has_key(name_key))
      throw InputError(path + ": header keyword " + name_key +
                       " not found; expected one NAMEi "
                       "(spec_ssp_<age>_z<Z>.spec) per image row, i = 0.." +
                       std::to_string(n_ssp - 1));
    if (!file.has_key(norm_key))
      throw InputError(path + ": header keyword " + norm_key +
                       " not found; expected one NORMi "
                       "(L_sun/A per M_sun at WAVENORM) per image row, i = 0.." +
                       std::to_string(n_ssp - 1));
    rows[i] = parse_pypipe3d_name(file.key_string(name_key), path + ": header keyword " + name_key);
    norm[i] = file.key_double(norm_key);
    if (!std::isfinite(norm[i]) || !(norm[i] > 0.0)) {
      std::ostringstream os;
      os << path << ": header keyword " << norm_key << " = " << norm[i]
         << ": expected a positive normalisation";
      throw InputError(os.str());
    }
  }

  std::map<double, std::size_t> ages, zs;
  for (const auto& r : rows) {
    ages.emplace(r.age_gyr, 0);
    zs.emplace(r.metallicity, 0);
  }
  std::size_t idx = 0;
  for (auto& a : ages) a.second = idx++;
  idx = 0;
  for (auto& z : zs) z.second = idx++;
  const std::size_t n_age = ages.size(), n_z = zs.size();

  std::vector<long> row_of_node(n_age * n_z, -1);
  for (long i = 0; i < n_ssp; ++i) {
    const std::size_t node = ages.at(rows[i].age_gyr) * n_z + zs.at(rows[i].metallicity);
    if (row_of_node[node] >= 0)
      throw InputError(path + ": header keywords NAME" + std::to_string(row_of_node[node]) +
                       " and NAME" + std::to_string(i) +
                       " give the same age and metallicity; expected each node once");
    row_of_node[node] = i;
  }
  for (const auto& [age, ia] : ages)
    for (const auto& [z, iz] : zs)
      if (row_of_node[ia * n_z + iz] < 0) {
        std::ostringstream os;
        os << path << ": incomplete SSP grid: no NAMEi for age " << age << " Gyr and Z = " << z
           << "; expected every age x metallicity (" << n_age << " x " << n_z << ")";
        throw InputError(os.str());
      }

  SspGrid grid;
  grid.name = fs::path(path).filename().string();
  for (const char* ext : {".gz", ".fits"})
    if (grid.name.size() > std::strlen(ext) &&
        grid.name.compare(grid.name.size() - std::strlen(ext), std::strlen(ext), ext) == 0)
      grid.name.resize(grid.name.size() - std::strlen(ext));
  grid.source = path;
  grid.z_solar = kCb19SolarMetallicity;
  // MaStar spectra are calibrated in vacuum wavelengths (SDSS DR15 MaStar data model).
  grid.wavelength_medium = "vacuum";
  if (const auto fwhm = file.optional_double("FWHM"))
    grid.resolution_fwhm_angstrom = *fwhm;
  else
    grid.resolution_fwhm_angstrom = mastar_resolution_fwhm_angstrom();
  for (const auto& a : ages) grid.age_gyr.push_back(a.first);
  for (const auto& z : zs) grid.metallicity.push_back(z.first);
  grid.wavelength_angstrom = fits::linear_wavelength_axis(file, n_pix);

  const auto data = file.read_image();  // row-major: row i = spectrum i (NAXIS1 fastest)
  grid.flux.resize(n_age * n_z * static_cast<std::size_t>(n_pix));
  for (std::size_t node = 0; node < n_age * n_z; ++node) {
    const long i = row_of_node[node];
    const double* in = data.data() + static_cast<std::size_t>(i) * n_pix;
    float* out = grid.flux.data() + node * static_cast<std::size_t>(n_pix);
    for (long k = 0; k < n_pix; ++k) out[k] = static_cast<float>(in[k] * norm[i]);
  }
  return grid;
}

}  // namespace ifusim
