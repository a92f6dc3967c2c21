#pragma once
// Attenuation curves A_lambda / A_V, each evaluated in the variable its paper defines. Both run
// inside the spectral kernel (host and device).
#include <cmath>

#include "data/hd.h"

namespace ifusim {

enum class DustCurveKind : int { none = 0, ccm89 = 1, calzetti00 = 2 };

struct DustCurve {
  DustCurveKind kind = DustCurveKind::none;
  double r_v = 3.1;  // A_V / E(B-V): 3.1 for the Milky Way (CCM89), 4.05 for Calzetti 2000
};

// The product "dust_attenuation" of a dust stage, beside the A_V it gives every star and gas
// cell (stars.dust_av, gas.dust_av): the curve that turns A_V into A_lambda for the stars, a
// bound on every star's A_V in any block of the galaxy (the deepest screen plus the birth
// clouds'), and for the nebular lines their own curve and the birth clouds' A_V added to the
// screen in front of every line-emitting cell (stages/dust/dust.h: Charlot & Fall 2000).
struct DustAttenuation {
  DustCurve curve;
  double av_bound_mag = 0.0;
  DustCurve line_curve;            // none: the lines use `curve`
  double line_extra_av_mag = 0.0;  // the birth clouds' A_V in front of the lines
  // The curve the lines are attenuated with.
  const DustCurve& curve_for_lines() const {
    return line_curve.kind == DustCurveKind::none ? curve : line_curve;
  }
};

// Cardelli, Clayton & Mathis 1989, ApJ 345, 245, eqs. 2-5, in x = 1 / lambda (micron^-1):
// A_lambda / A_V = a(x) + b(x) / R_V. Defined for 0.3 <= x <= 10; beyond, the infrared power law
// (x < 0.3) and the far-UV cubic at x = 10 (x > 10) are used.
IFUSIM_HD inline double ccm89_ratio(double x, double r_v) {
  double a = 0.0, b = 0.0;
  if (x < 1.1) {
    const double p = pow(x, 1.61);
    a = 0.574 * p;
    b = -0.527 * p;
  } else if (x < 3.3) {
    const double y = x - 1.82;
    a = 1 +
        y * (0.17699 +
             y * (-0.50447 +
                  y * (-0.02427 + y * (0.72085 + y * (0.01979 + y * (-0.77530 + y * 0.32999))))));
    b = y * (1.41338 +
             y * (2.28305 +
                  y * (1.07233 + y * (-5.38434 + y * (-0.62251 + y * (5.30260 + y * -2.09002))))));
  } else if (x < 8.0) {
    double fa = 0.0, fb = 0.0;
    if (x >= 5.9) {
      const double u = x - 5.9;
      fa = -0.04473 * u * u - 0.009779 * u * u * u;
      fb = 0.2130 * u * u + 0.1207 * u * u * u;
    }
    a = 1.752 - 0.316 * x - 0.104 / ((x - 4.67) * (x - 4.67) + 0.341) + fa;
    b = -3.090 + 1.825 * x + 1.206 / ((x - 4.62) * (x - 4.62) + 0.263) + fb;
  } else {
    const double u = (x < 10.0 ? x : 10.0) - 8.0;
    a = -1.073 - 0.628 * u + 0.137 * u * u - 0.070 * u * u * u;
    b = 13.670 + 4.257 * u - 0.420 * u * u + 0.374 * u * u * u;
  }
  return a + b / r_v;
}

// Calzetti et al. 2000, ApJ 533, 682, eq. 4, in lambda (micron): k(lambda), with
// A_lambda / A_V = k / R_V (R_V = 4.05). Defined for 0.12-2.2 micron; the same polynomials are
// extended beyond, and k is kept >= 0.
IFUSIM_HD inline double calzetti00_ratio(double lambda_micron, double r_v) {
  const double l = lambda_micron, il = 1.0 / l;
  const double k =
      l < 0.63 ? 2.659 * (-2.156 + 1.509 * il - 0.198 * il * il + 0.011 * il * il * il) + r_v
               : 2.659 * (-1.857 + 1.040 * il) + r_v;
  return k > 0 ? k / r_v : 0.0;
}

// A_lambda / A_V at a rest-frame wavelength in Angstrom (>= 0).
IFUSIM_HD inline double attenuation_ratio(const DustCurve& curve, double lambda_angstrom) {
  const double micron = lambda_angstrom * 1e-4;
  double r = 0.0;
  if (curve.kind == DustCurveKind::ccm89)
    r = ccm89_ratio(1.0 / micron, curve.r_v);
  else if (curve.kind == DustCurveKind::calzetti00)
    r = calzetti00_ratio(micron, curve.r_v);
  return r > 0 ? r : 0.0;
}

}  // namespace ifusim
