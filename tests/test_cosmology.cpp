#include <catch2/catch.hpp>

#include "data/cosmology.h"

using namespace ifusim;

TEST_CASE("flat LCDM times and distances match published values", "[cosmology]") {
  const Cosmology planck;  // h = 0.6774, Om = 0.3089
  // Reference values from astropy 5.2 FlatLambdaCDM(H0=67.74, Om0=0.3089, Tcmb0=0).
  CHECK(planck.cosmic_time_gyr(1.0) == Approx(13.802718).epsilon(1e-5));
  // Matter-dominated limit: t -> 2 / (3 H0 sqrt(Om)) a^1.5 for small a.
  const double a = 1e-3;
  CHECK(planck.cosmic_time_gyr(a) ==
        Approx(2.0 / (3.0 * std::sqrt(0.3089)) * std::pow(a, 1.5) * planck.hubble_time_gyr())
            .epsilon(1e-4));
  CHECK(planck.comoving_distance_mpc(1.0) == Approx(3396.2110).epsilon(1e-6));
  CHECK(planck.angular_diameter_distance_mpc(1.0) == Approx(3396.2110 / 2).epsilon(1e-6));
  CHECK(planck.luminosity_distance_mpc(1.0) == Approx(3396.2110 * 2).epsilon(1e-6));
  CHECK(planck.kpc_per_arcsec(0.3) == Approx(275.641536 / 60).epsilon(1e-6));
  CHECK(planck.comoving_distance_mpc(0.0) == 0.0);
}
