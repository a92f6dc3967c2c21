#include "io/cube/cube_io.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

#include "core/config_error.h"

namespace ifusim {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

enum class Format { fits, hdf5 };

Format format_of(const std::string& path, bool reading) {
  const std::string p = lower(path);
  for (const char* ext : {".fits", ".fit", ".fts"}) {
    if (ends_with(p, ext)) return Format::fits;
    if (reading && ends_with(p, std::string(ext) + ".gz")) return Format::fits;
  }
  if (ends_with(p, ".h5") || ends_with(p, ".hdf5")) return Format::hdf5;
  throw InputError(path + ": unknown cube file type, expected a name ending in .fits, .fit, .fts" +
                   std::string(reading ? " (or .gz of those)" : "") + ", .h5 or .hdf5");
}

// One factor of a unit string: a name ("cm") with a power ("2", "**2", "**(-1)"). The scale
// factor "10**(-20)" is a factor named "10".
struct UnitFactor {
  char op;  // '*' or '/' (the operator before it; '*' for the first)
  std::string name;
  long power;
};

bool parse_int(const std::string& s, long& out) {
  if (s.empty()) return false;
  std::size_t i = (s[0] == '+' || s[0] == '-') ? 1 : 0;
  if (i == s.size()) return false;
  for (std::size_t j = i; j < s.size(); ++j)
    if (!std::isdigit(static_cast<unsigned char>(s[j]))) return false;
  out = std::stol(s);
  return true;
}

bool parse_factor(const std::string& text, char op, UnitFactor& f) {
  f.op = op;
  f.power = 1;
  const std::size_t star = text.find("**");
  std::string name = text, power;
  if (star != std::string::npos) {
    name = text.substr(0, star);
    power = text.substr(star + 2);
    if (power.size() >= 2 && power.front() == '(' && power.back() == ')')
      power = power.substr(1, power.size() - 2);
    if (!parse_int(power, f.power)) return false;
  } else {
    // FITS style trailing power: "cm2", "s-1".
    std::size_t end = name.size();
    while (end > 0 && (std::isdigit(static_cast<unsigned char>(name[end - 1])) ||
                       name[end - 1] == '-' || name[end - 1] == '+'))
      --end;
    if (end < name.size() && end > 0) {
      if (!parse_int(name.substr(end), f.power)) return false;
      name = name.substr(0, end);
    }
  }
  if (name.empty()) return false;
  const bool is_ten = name == "10";
  for (char c : name)
    if (!std::isalpha(static_cast<unsigned char>(c)) && c != '_' && !is_ten) return false;
  if (is_ten && star == std::string::npos) return false;  // a bare number is not a unit
  f.name = name;
  return true;
}

}  // namespace

std::string squared_unit(const std::string& unit) {
  return powered_unit(unit, 2);
}

std::string inverse_squared_unit(const std::string& unit) {
  return powered_unit(unit, -2);
}

std::string powered_unit(const std::string& unit, int exponent) {
  if (unit.empty()) return unit;
  std::vector<UnitFactor> factors;
  bool ok = true;
  char op = '*';
  bool in_denominator = false;  // inside "/( ... )"
  std::string token;
  // Split at '*' (but not "**"), '/' and spaces, keeping parenthesised powers together.
  auto flush = [&] {
    if (token.empty()) return;
    UnitFactor f;
    ok = ok && parse_factor(token, in_denominator ? '/' : op, f);
    factors.push_back(f);
    token.clear();
    op = '*';
  };
  for (std::size_t i = 0; i < unit.size() && ok; ++i) {
    const char c = unit[i];
    if (c == '*' && i + 1 < unit.size() && unit[i + 1] == '*') {
      token += "**";
      ++i;
    } else if (c == '*' || c == ' ') {
      flush();
    } else if (c == '/') {
      flush();
      ok = ok && !in_denominator;  // "a/(b/c)": outside the grammar
      op = '/';
    } else if (c == '(' && token.empty() && op == '/' && !in_denominator) {
      in_denominator = true;  // "a/(b*c)": every factor up to ')' divides
    } else if (c == ')' && in_denominator) {
      flush();
      in_denominator = false;
    } else if (c == '(') {
      // Otherwise only as a power's parentheses, "**(-20)".
      const std::size_t close = unit.find(')', i);
      if (!ends_with(token, "**") || close == std::string::npos) {
        ok = false;
        break;
      }
      token += unit.substr(i, close - i + 1);
      i = close;
    } else {
      token += c;
    }
  }
  flush();
  if (!ok || in_denominator || factors.empty() || factors.front().op == '/') {
    std::string out = "(" + unit;
    out += ")**";
    if (exponent < 0) out += '(';
    out += std::to_string(exponent);
    if (exponent < 0) out += ')';
    return out;
  }
  // Written in the FITS standard's form with a single solidus (section 4.3 of FITS 4.0, which
  // astropy's FITS format parses without warning): numerator, then the denominator grouped.
  // A negative exponent swaps numerator and denominator: every power below is then positive.
  const bool inverse = exponent < 0;
  auto power = [&](const UnitFactor& f) {
    // The number's own power keeps its sign ("10**(-20)" to the -2 is "10**40").
    const long p = (f.name == "10" ? exponent : std::abs(exponent)) * f.power;
    // Appended piece by piece: GCC 12 misreports a temporary concatenation here (-Wrestrict).
    std::string out = f.name;
    out += "**";
    if (p < 0) out += '(';
    out += std::to_string(p);
    if (p < 0) out += ')';
    return out;
  };
  std::string numerator, denominator;
  std::size_t n_denominator = 0;
  for (const auto& f : factors) {
    const bool below = f.name == "10" ? f.op == '/' : (f.op == '/') != inverse;
    std::string& side = below ? denominator : numerator;
    if (!side.empty()) side += '*';
    side += power(f);
    n_denominator += below;
  }
  if (n_denominator == 0) return numerator;
  // Built piece by piece (GCC 12's bogus -Wrestrict on temporary concatenations).
  std::string out = numerator.empty() ? std::string(1, '1') : numerator;
  out += '/';
  if (n_denominator > 1) out += '(';
  out += denominator;
  if (n_denominator > 1) out += ')';
  return out;
}

bool fits_in_float32(const std::vector<double>& values) {
  const double* v = values.data();
  return fits_in_float32_of(values.size(), [v](std::size_t i) { return v[i]; });
}

void validate_cube(const Cube& cube, const std::string& what) {
  const auto& s = cube.shape;
  auto fail = [&](const std::string& m) { throw std::invalid_argument(what + ": " + m); };
  if (s.nx <= 0 || s.ny <= 0 || s.n_wave <= 0)
    fail("cube shape " + to_string(s) + " has an empty axis");
  if (cube.data.size() != s.n_voxels())
    fail("cube has " + std::to_string(cube.data.size()) + " values, its shape needs " +
         std::to_string(s.n_voxels()));
  if (!cube.variance.empty() && cube.variance.size() != s.n_voxels())
    fail("variance has " + std::to_string(cube.variance.size()) + " values, the shape needs " +
         std::to_string(s.n_voxels()) + " (or none)");
  if (!(cube.axes.spaxel_arcsec > 0) || !std::isfinite(cube.axes.spaxel_arcsec))
    fail("spaxel size must be positive and finite, is " + std::to_string(cube.axes.spaxel_arcsec));
  if (cube.axes.is_log()) {
    if (!(cube.axes.wave_start_angstrom > 0) || !std::isfinite(cube.axes.wave_start_angstrom) ||
        !std::isfinite(cube.axes.wave_log10_step) || cube.axes.wave_step_angstrom != 0)
      fail(
          "a logarithmic wavelength axis needs a finite start > 0, a finite log10 step > 0 and "
          "no linear step");
  } else if (!(cube.axes.wave_step_angstrom > 0) || !std::isfinite(cube.axes.wave_start_angstrom) ||
             !std::isfinite(cube.axes.wave_step_angstrom)) {
    fail("wavelength step must be positive and finite, start finite");
  }
  if (cube.fits_layout != "muse" && cube.fits_layout != "manga")
    fail("FITS layout must be \"muse\" or \"manga\", is \"" + cube.fits_layout + "\"");
  if (!cube.lsf_fwhm_angstrom.empty() &&
      (cube.lsf_fwhm_angstrom.size() != static_cast<std::size_t>(s.n_wave) ||
       !std::all_of(cube.lsf_fwhm_angstrom.begin(), cube.lsf_fwhm_angstrom.end(),
                    [](double f) { return f > 0 && std::isfinite(f); })))
    fail("the LSF FWHM needs one finite value > 0 per wavelength plane (or none)");
  if (cube.axes.wavelength_medium != "air" && cube.axes.wavelength_medium != "vacuum")
    fail("wavelength medium must be \"air\" or \"vacuum\", is \"" + cube.axes.wavelength_medium +
         "\"");
  if (!std::isfinite(cube.axes.ra_deg) || !std::isfinite(cube.axes.dec_deg) ||
      std::abs(cube.axes.dec_deg) > 90)
    fail("RA/Dec of the centre must be finite with |Dec| <= 90 deg");
  std::set<std::string> keys;
  for (const auto& [name, map] : cube.maps) {
    // The FITS EXTNAME is the name in upper case: a short identifier keeps it a plain card.
    const bool identifier =
        !name.empty() && name.size() <= 48 && std::all_of(name.begin(), name.end(), [](char c) {
          return std::islower(static_cast<unsigned char>(c)) ||
                 std::isdigit(static_cast<unsigned char>(c)) || c == '_';
        });
    if (!identifier)
      fail("map name \"" + name + "\" should be 1 to 48 lower-case letters, digits or '_'");
    if (map.values.size() != s.n_spaxels())
      fail("map \"" + name + "\" has " + std::to_string(map.values.size()) +
           " values, the field has " + std::to_string(s.n_spaxels()) + " spaxels");
    if (name == "data" || name == "stat")
      fail("map name \"" + name + "\" is taken by the cube's own extension");
  }
  for (const auto& [k, v] : cube.provenance) {
    if (k.empty()) fail("empty provenance key");
    if (!keys.insert(k).second) fail("provenance key \"" + k + "\" appears twice");
  }
}

void write_cube(const Cube& cube, const std::string& path) {
  if (format_of(path, false) == Format::fits)
    write_cube_fits(cube, path);
  else
    write_cube_hdf5(cube, path);
}

Cube read_cube(const std::string& path) {
  return format_of(path, true) == Format::fits ? read_cube_fits(path) : read_cube_hdf5(path);
}

}  // namespace ifusim
