#pragma once
#include <string>

namespace ifusim {

// Flat Lambda-CDM (radiation neglected). Planck 2015 (Planck Collaboration XIII 2016, A&A 594,
// A13, TT,TE,EE+lowP+lensing+ext: H0 = 67.74 km/s/Mpc, Omega_m = 0.3089) is the default, as
// IllustrisTNG uses.
struct Cosmology {
  std::string name = "Planck2015";
  double hubble_param = 0.6774;  // h = H0 / (100 km/s/Mpc)
  double omega_matter = 0.3089;
  double omega_lambda = 0.6911;

  double hubble_time_gyr() const;  // 1 / H0
  // Cosmic time since the Big Bang at scale factor a, exact for flat matter + Lambda:
  // t(a) = 2 / (3 H0 sqrt(OL)) asinh(sqrt(OL / Om) a^(3/2))  (e.g. Peebles 1993, eq. 13.20).
  double cosmic_time_gyr(double scale_factor) const;
  // Distances in Mpc (Hogg 1999, astro-ph/9905116): comoving (line of sight), angular diameter
  // D_A = D_C / (1 + z), luminosity D_L = D_C (1 + z).
  double comoving_distance_mpc(double redshift) const;
  double angular_diameter_distance_mpc(double redshift) const;
  double luminosity_distance_mpc(double redshift) const;
  // Proper transverse size of one arcsecond at that redshift.
  double kpc_per_arcsec(double redshift) const;
};

}  // namespace ifusim
