#include <catch2/catch.hpp>

#include "core/constants.h"
#include "io/tng/tng_convert.h"
#include "io/tng/tng_fields.h"
#include "stages/dust/dust.h"

using namespace ifusim;

// The values every copy of a constant had before core/constants.h gathered them, bit for bit:
// the cubes must not change.
TEST_CASE("constants: the derived values are the literals the code used before", "[constants]") {
  STATIC_REQUIRE(kSpeedOfLightKms == 299792.458);
  STATIC_REQUIRE(kCmPerParsec == 3.0856775814913673e18);
  STATIC_REQUIRE(kCmPerKpc == 3.0856775814913673e21);
  STATIC_REQUIRE(kCmPerMpc == 3.0856775814913673e24);
  STATIC_REQUIRE(kKmPerMpc == 3.0856775814913673e19);
  STATIC_REQUIRE(kMsunPerKpc2InGPerCm2 ==
                 1.98841e33 / (3.0856775814913673e21 * 3.0856775814913673e21));
  STATIC_REQUIRE(kMagPerOpticalDepth == 1.0857362047581294);
  STATIC_REQUIRE(kBoltzmannErgPerK == 1.380649e-16);
  STATIC_REQUIRE(kBoltzmannJPerK / kAtomicMassKg * 1e-6 == 1.380649e-23 / 1.66053906660e-27 * 1e-6);
  STATIC_REQUIRE(kSecondsPerGyr == 3.15576e16);
  STATIC_REQUIRE(tng::kJulianYearS == 3.15576e7);
}

TEST_CASE("constants: TNG's unit length is its own, not the IAU parsec", "[constants]") {
  STATIC_REQUIRE(tng::kKpcCm == 3.085678e21);
  STATIC_REQUIRE(tng::kKpcCm != kCmPerKpc);
}
