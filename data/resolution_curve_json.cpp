#include "data/resolution_curve_json.h"

#include <utility>
#include <vector>

namespace ifusim {

ResolutionCurve parse_resolution_curve(JsonParams& p, const std::string& key,
                                       const std::string& value_key, bool allow_zero) {
  if (!p.has(key) || !p.raw(key).is_object()) {
    const double fwhm = p.number(key);
    p.require(allow_zero ? fwhm >= 0 : fwhm > 0, key,
              std::string(allow_zero ? "a number >= 0" : "a number > 0") +
                  " or {\"wavelength_angstrom\": [...], \"" + value_key + "\": [...]}",
              fwhm);
    return ResolutionCurve(fwhm);
  }
  JsonParams table = p.object(key);
  std::vector<double> wavelength = table.numbers("wavelength_angstrom", 0, 2);
  std::vector<double> fwhm = table.numbers(value_key, wavelength.size());
  for (std::size_t i = 0; i < wavelength.size(); ++i) {
    table.require(wavelength[i] > (i ? wavelength[i - 1] : 0.0), "wavelength_angstrom",
                  "wavelengths > 0, strictly increasing", table.raw("wavelength_angstrom"));
    table.require(fwhm[i] > 0, value_key, "FWHM values > 0", table.raw(value_key));
  }
  table.finish();
  return ResolutionCurve(std::move(wavelength), std::move(fwhm));
}

ResolutionCurve parse_fraction_curve(JsonParams& p, const std::string& key,
                                     const std::string& value_key) {
  const std::string expected = "a fraction in [0, 1] or {\"wavelength_angstrom\": [...], \"" +
                               value_key + "\": [fractions in [0, 1]]}";
  if (!p.has(key) || !p.raw(key).is_object()) {
    const double value = p.number(key);
    p.require(value >= 0.0 && value <= 1.0, key, expected, value);
    return ResolutionCurve(value);
  }
  JsonParams table = p.object(key);
  std::vector<double> wavelength = table.numbers("wavelength_angstrom", 0, 2);
  std::vector<double> values = table.numbers(value_key, wavelength.size());
  for (std::size_t i = 0; i < wavelength.size(); ++i) {
    table.require(wavelength[i] > (i ? wavelength[i - 1] : 0.0), "wavelength_angstrom",
                  "wavelengths > 0, strictly increasing", table.raw("wavelength_angstrom"));
    table.require(values[i] >= 0.0 && values[i] <= 1.0, value_key, "fractions in [0, 1]",
                  table.raw(value_key));
  }
  table.finish();
  return ResolutionCurve(std::move(wavelength), std::move(values));
}

nlohmann::json to_json(const ResolutionCurve& curve, const std::string& value_key) {
  if (curve.constant()) return curve.fwhm.front();
  return {{"wavelength_angstrom", curve.wavelength_angstrom}, {value_key, curve.fwhm}};
}

}  // namespace ifusim
