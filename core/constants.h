#pragma once
// Every physical constant ifusim uses, each defined once here with its source; the other values
// are derived from these with the arithmetic shown (each a single operation on a defining value,
// so that every double is the one the code used before it had this header; tests/test_constants.cpp
// checks them bit for bit). Constants of a file format (IllustrisTNG's unit definitions,
// io/tng/tng_fields.h) and the parameters of a physical model (calibrations, abundances) stay
// with their code.
//
// Sources:
// - CODATA 2018: Tiesinga et al. 2021, Rev. Mod. Phys. 93, 025010 (c, h, k_B exact since SI
//   2019).
// - IAU 2012 Resolution B2: the astronomical unit, exactly 149 597 870 700 m.
// - IAU 2015 Resolution B2: the parsec, exactly 648 000 / pi au.
// - IAU 2015 Resolution B3: nominal solar values (L_sun, GM_sun).
// - IAU: the Julian year, exactly 365.25 days of 86 400 s.
#include <numbers>

namespace ifusim {

// Speed of light in vacuum (CODATA 2018, exact): 299 792 458 m/s.
inline constexpr double kSpeedOfLightKms = 299792.458;

// Astronomical unit (IAU 2012 Resolution B2, exact).
inline constexpr double kMPerAu = 149597870700.0;
// Parsec (IAU 2015 Resolution B2): 648 000 / pi au, to the double nearest.
inline constexpr double kMPerParsec = 3.0856775814913673e16;
static_assert(kMPerParsec == kMPerAu * 648000.0 / std::numbers::pi);
inline constexpr double kCmPerParsec = kMPerParsec * 1e2;
inline constexpr double kCmPerKpc = kMPerParsec * 1e5;
inline constexpr double kCmPerMpc = kMPerParsec * 1e8;
inline constexpr double kKmPerMpc = kMPerParsec * 1e3;

// Nominal solar mass: GM_sun = 1.3271244e20 m^3 s^-2 (IAU 2015 Resolution B3) over
// G = 6.67430e-11 m^3 kg^-1 s^-2 (CODATA 2018), 1.98841e30 kg to the six digits G supports.
inline constexpr double kSolarMassG = 1.98841e33;
// Nominal solar luminosity (IAU 2015 Resolution B3): 3.828e26 W.
inline constexpr double kSolarLuminosityErgPerS = 3.828e33;

// Planck constant (CODATA 2018, exact since SI 2019): 6.62607015e-34 J s.
inline constexpr double kPlanckJS = 6.62607015e-34;
inline constexpr double kPlanckErgS = kPlanckJS * 1e7;

// Boltzmann constant (CODATA 2018, exact since SI 2019).
inline constexpr double kBoltzmannJPerK = 1.380649e-23;
inline constexpr double kBoltzmannErgPerK = kBoltzmannJPerK * 1e7;
// Atomic mass unit and proton mass (CODATA 2018).
inline constexpr double kAtomicMassKg = 1.66053906660e-27;
inline constexpr double kProtonMassG = 1.67262192369e-24;

// Julian year (IAU): 365.25 d of 86 400 s.
inline constexpr double kJulianYearS = 365.25 * 86400.0;
inline constexpr double kSecondsPerGyr = kJulianYearS * 1e9;

// 2.5 log10(e) = 2.5 / ln(10): magnitudes per unit optical depth (A = 2.5 log10(e) tau).
inline constexpr double kMagPerOpticalDepth = 2.5 / std::numbers::ln10;

}  // namespace ifusim
