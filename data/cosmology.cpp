#include "data/cosmology.h"

#include <cmath>
#include <numbers>
#include <stdexcept>

#include "core/constants.h"

namespace ifusim {

double Cosmology::hubble_time_gyr() const {
  return kKmPerMpc / (100.0 * hubble_param) / kSecondsPerGyr;
}

double Cosmology::cosmic_time_gyr(double a) const {
  if (!(a > 0)) throw std::invalid_argument("cosmic_time_gyr: scale factor must be > 0");
  const double ol = omega_lambda, om = omega_matter;
  return 2.0 / (3.0 * std::sqrt(ol)) * std::asinh(std::sqrt(ol / om) * std::pow(a, 1.5)) *
         hubble_time_gyr();
}

double Cosmology::comoving_distance_mpc(double z) const {
  if (!(z >= 0)) throw std::invalid_argument("comoving_distance_mpc: redshift must be >= 0");
  // D_C = (c / H0) * integral_0^z dz' / E(z'), E(z) = sqrt(Om (1+z)^3 + OL); composite Simpson
  // on 2048 intervals (relative error far below 1e-9 for the smooth integrand).
  const int n = 2048;
  const double h = z / n;
  auto inv_e = [&](double x) {
    return 1.0 / std::sqrt(omega_matter * std::pow(1.0 + x, 3) + omega_lambda);
  };
  double sum = inv_e(0.0) + inv_e(z);
  for (int i = 1; i < n; ++i) sum += (i % 2 ? 4.0 : 2.0) * inv_e(i * h);
  return kSpeedOfLightKms / (100.0 * hubble_param) * sum * h / 3.0;
}

double Cosmology::angular_diameter_distance_mpc(double z) const {
  return comoving_distance_mpc(z) / (1.0 + z);
}

double Cosmology::luminosity_distance_mpc(double z) const {
  return comoving_distance_mpc(z) * (1.0 + z);
}

double Cosmology::kpc_per_arcsec(double z) const {
  constexpr double kRadPerArcsec = std::numbers::pi / (180.0 * 3600.0);
  return angular_diameter_distance_mpc(z) * 1000.0 * kRadPerArcsec;
}

}  // namespace ifusim
