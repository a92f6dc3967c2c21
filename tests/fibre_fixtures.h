#pragma once
// A MaNGA bundle for the fibres stage's tests (test_fibres, test_fibre_exposure).
#include <cmath>
#include <numbers>

#include "stages/fibres/fibres.h"

namespace ifusim::test {

// MaNGA's bundle of n_fibres (19 or 127): 2 arcsec cores at a 2.5 arcsec pitch (Drory et al.
// 2015), three dithers on a triangle of side 2.5 / sqrt(3) = 1.443 arcsec (Law et al. 2015),
// centred; no noise.
inline FibresParams manga_bundle(int n_fibres) {
  FibresParams p;
  p.bundle.n_fibres = n_fibres;
  p.bundle.core_diameter_arcsec = 2.0;
  p.bundle.pitch_arcsec = 2.5;
  const double side = 2.5 / std::sqrt(3.0);
  // An equilateral triangle of side `side` centred on the origin: circumradius side / sqrt(3).
  const double rc = side / std::sqrt(3.0);
  p.bundle.dither_x_arcsec.clear();
  p.bundle.dither_y_arcsec.clear();
  for (double angle_deg : {90.0, 210.0, 330.0}) {
    p.bundle.dither_x_arcsec.push_back(rc * std::cos(angle_deg * std::numbers::pi / 180.0));
    p.bundle.dither_y_arcsec.push_back(rc * std::sin(angle_deg * std::numbers::pi / 180.0));
  }
  return p;
}

}  // namespace ifusim::test
