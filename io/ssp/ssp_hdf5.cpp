#include "io/ssp/ssp_hdf5.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <sstream>

#include "core/config_error.h"
#include "io/hdf5.h"

namespace ifusim {

namespace {

void check_ascending(const std::vector<double>& v, const std::string& where,
                     const std::string& what, std::size_t min_size) {
  if (v.size() < min_size)
    throw InputError(where + ": " + what + ": expected at least " + std::to_string(min_size) +
                     " value(s), found " + std::to_string(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i]))
      throw InputError(where + ": " + what + "[" + std::to_string(i) + "] is not finite");
    if (i > 0 && !(v[i] > v[i - 1]))
      throw InputError(where + ": " + what + ": expected strictly ascending values, element " +
                       std::to_string(i) + " is not greater than element " + std::to_string(i - 1));
  }
}

}  // namespace

void validate_ssp_grid(const SspGrid& grid, const std::string& where) {
  check_ascending(grid.age_gyr, where, "age_gyr", 1);
  check_ascending(grid.metallicity, where, "metallicity", 1);
  check_ascending(grid.wavelength_angstrom, where, "wavelength_angstrom", 2);
  if (grid.age_gyr.front() < 0.0) throw InputError(where + ": age_gyr: expected ages >= 0");
  if (!(grid.metallicity.front() > 0.0 && grid.metallicity.back() < 1.0))
    throw InputError(where + ": metallicity: expected mass fractions in (0, 1)");
  if (!(grid.wavelength_angstrom.front() > 0.0))
    throw InputError(where + ": wavelength_angstrom: expected positive wavelengths");
  const std::size_t expected = grid.n_age() * grid.n_metallicity() * grid.n_wave();
  if (grid.flux.size() != expected)
    throw InputError(where + ": flux: expected n_age * n_z * n_wave = " + std::to_string(expected) +
                     " values, found " + std::to_string(grid.flux.size()));
  for (std::size_t i = 0; i < grid.flux.size(); ++i)
    if (!std::isfinite(grid.flux[i]))
      throw InputError(where + ": flux: element " + std::to_string(i) + " is not finite");
  const ResolutionCurve& r = grid.resolution_fwhm_angstrom;
  if (r.fwhm.empty() || r.fwhm.size() != r.wavelength_angstrom.size())
    throw InputError(where + ": resolution: expected as many FWHM values as wavelengths, found " +
                     std::to_string(r.fwhm.size()) + " and " +
                     std::to_string(r.wavelength_angstrom.size()));
  for (std::size_t i = 0; i < r.fwhm.size(); ++i) {
    if (!(r.fwhm[i] > 0.0) || !std::isfinite(r.fwhm[i]))
      throw InputError(where + ": resolution_fwhm_angstrom[" + std::to_string(i) +
                       "]: expected a finite FWHM > 0");
    if (!r.constant() && !(r.wavelength_angstrom[i] > (i ? r.wavelength_angstrom[i - 1] : 0.0)))
      throw InputError(where + ": resolution wavelength_angstrom: expected wavelengths > 0, " +
                       "strictly ascending (element " + std::to_string(i) + ")");
  }
  if (!(grid.z_solar > 0.0 && grid.z_solar < 1.0))
    throw InputError(where + ": z_solar: expected a mass fraction in (0, 1)");
  if (grid.wavelength_medium != "air" && grid.wavelength_medium != "vacuum")
    throw InputError(where + ": wavelength_medium: expected \"air\" or \"vacuum\", found \"" +
                     grid.wavelength_medium + "\"");
}

SspGrid read_ssp_hdf5(const std::string& path) {
  h5::File f(path);
  SspGrid g;
  g.age_gyr = f.read<double>("age_gyr");
  g.metallicity = f.read<double>("metallicity");
  g.wavelength_angstrom = f.read<double>("wavelength_angstrom");
  const auto shape = f.shape("flux");
  const std::vector<hsize_t> expected = {g.age_gyr.size(), g.metallicity.size(),
                                         g.wavelength_angstrom.size()};
  if (shape != expected) {
    std::ostringstream os;
    os << f.describe("flux") << ": expected shape (n_age, n_z, n_wave) = (" << expected[0] << ", "
       << expected[1] << ", " << expected[2] << ")";
    throw InputError(os.str());
  }
  g.flux = f.read<float>("flux");
  g.name = f.string_attribute("name");
  g.source = f.string_attribute("source");
  // A curve in the group "resolution" (format 2); a constant, as format 1 stored it, in the root
  // attribute resolution_fwhm_angstrom.
  if (f.exists("resolution"))
    g.resolution_fwhm_angstrom = ResolutionCurve(f.read<double>("resolution/wavelength_angstrom"),
                                                 f.read<double>("resolution/fwhm_angstrom"));
  else
    g.resolution_fwhm_angstrom = f.attribute<double>("resolution_fwhm_angstrom");
  g.z_solar = f.attribute<double>("z_solar");
  g.wavelength_medium = f.string_attribute("wavelength_medium");
  const std::string unit = f.string_attribute("flux_unit");
  if (unit != kSspFluxUnit)
    throw InputError(f.describe() + " attribute flux_unit = \"" + unit + "\": expected \"" +
                     kSspFluxUnit + "\"");
  const std::string zdef = f.string_attribute("metallicity_definition");
  if (zdef != kSspMetallicityDefinition)
    throw InputError(f.describe() + " attribute metallicity_definition = \"" + zdef +
                     "\": expected \"" + kSspMetallicityDefinition + "\"");
  validate_ssp_grid(g, path);
  return g;
}

void write_ssp_hdf5(const SspGrid& grid, const std::string& path) {
  validate_ssp_grid(grid, "SSP grid '" + grid.name + "' to write to " + path);
  const std::string tmp = path + ".tmp";
  try {
    {
      h5::File f(tmp, h5::File::Mode::truncate);
      f.write<double>("age_gyr", grid.age_gyr, {grid.n_age()});
      f.write<double>("metallicity", grid.metallicity, {grid.n_metallicity()});
      f.write<double>("wavelength_angstrom", grid.wavelength_angstrom, {grid.n_wave()});
      f.write<float>("flux", grid.flux, {grid.n_age(), grid.n_metallicity(), grid.n_wave()},
                     /*compress=*/true);
      f.set_string_attribute("name", grid.name);
      f.set_string_attribute("source", grid.source);
      const ResolutionCurve& r = grid.resolution_fwhm_angstrom;
      if (r.constant()) {
        f.set_attribute<double>("resolution_fwhm_angstrom", r.fwhm.front());
      } else {
        f.create_group("resolution");
        f.write<double>("resolution/wavelength_angstrom", r.wavelength_angstrom,
                        {r.wavelength_angstrom.size()});
        f.write<double>("resolution/fwhm_angstrom", r.fwhm, {r.fwhm.size()});
      }
      f.set_attribute<double>("z_solar", grid.z_solar);
      f.set_string_attribute("wavelength_medium", grid.wavelength_medium);
      f.set_string_attribute("flux_unit", kSspFluxUnit);
      f.set_string_attribute("metallicity_definition", kSspMetallicityDefinition);
      f.set_attribute<std::int32_t>("format_version", kSspFormatVersion);
      f.set_string_attribute("age_unit", "Gyr");
      f.set_string_attribute("wavelength_unit", "Angstrom");
    }
    std::filesystem::rename(tmp, path);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
}

}  // namespace ifusim
