#include "data/resolution_curve_json.h"

#include <utility>
#include <vector>

namespace ifusim {

namespace {

// `key` as a number or a table {"wavelength_angstrom": [...], value_key: [...]} (wavelengths > 0,
// strictly increasing); every value must pass `valid`. `expected`: the message for a bad number,
// `expected_values` for a bad value in the table.
template <class Valid>
ResolutionCurve parse_curve(JsonParams& p, const std::string& key, const std::string& value_key,
                            const Valid& valid, const std::string& expected,
                            const std::string& expected_values) {
  if (!p.has(key) || !p.raw(key).is_object()) {
    const double value = p.number(key);
    p.require(valid(value), key, expected, value);
    return ResolutionCurve(value);
  }
  JsonParams table = p.object(key);
  std::vector<double> wavelength = table.numbers("wavelength_angstrom", 0, 2);
  std::vector<double> values = table.numbers(value_key, wavelength.size());
  for (std::size_t i = 0; i < wavelength.size(); ++i) {
    table.require(wavelength[i] > (i ? wavelength[i - 1] : 0.0), "wavelength_angstrom",
                  "wavelengths > 0, strictly increasing", table.raw("wavelength_angstrom"));
    table.require(valid(values[i]), value_key, expected_values, table.raw(value_key));
  }
  table.finish();
  return ResolutionCurve(std::move(wavelength), std::move(values));
}

}  // namespace

ResolutionCurve parse_resolution_curve(JsonParams& p, const std::string& key,
                                       const std::string& value_key, bool allow_zero) {
  const std::string expected = std::string(allow_zero ? "a number >= 0" : "a number > 0") +
                               " or {\"wavelength_angstrom\": [...], \"" + value_key + "\": [...]}";
  // A table's values must be > 0 (a zero FWHM is a constant's only).
  const auto scalar_ok = [allow_zero](double v) { return allow_zero ? v >= 0 : v > 0; };
  if (!p.has(key) || !p.raw(key).is_object())
    return parse_curve(p, key, value_key, scalar_ok, expected, "FWHM values > 0");
  return parse_curve(
      p, key, value_key, [](double v) { return v > 0; }, expected, "FWHM values > 0");
}

ResolutionCurve parse_fraction_curve(JsonParams& p, const std::string& key,
                                     const std::string& value_key) {
  const std::string expected = "a fraction in [0, 1] or {\"wavelength_angstrom\": [...], \"" +
                               value_key + "\": [fractions in [0, 1]]}";
  return parse_curve(
      p, key, value_key, [](double v) { return v >= 0.0 && v <= 1.0; }, expected,
      "fractions in [0, 1]");
}

nlohmann::json to_json(const ResolutionCurve& curve, const std::string& value_key) {
  if (curve.constant()) return curve.fwhm.front();
  return {{"wavelength_angstrom", curve.wavelength_angstrom}, {value_key, curve.fwhm}};
}

}  // namespace ifusim
