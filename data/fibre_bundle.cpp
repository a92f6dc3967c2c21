#include "data/fibre_bundle.h"

#include <cmath>
#include <numbers>

namespace ifusim {

FibreBundle parse_fibre_bundle(JsonParams p) {
  FibreBundle b;
  const long long n = p.integer("n_fibres");
  // A full hexagon: 1 + 3 r (r + 1) fibres for r rings.
  bool hexagonal = false;
  for (long long r = 0; 1 + 3 * r * (r + 1) <= n; ++r)
    hexagonal = hexagonal || n == 1 + 3 * r * (r + 1);
  p.require(hexagonal && n <= 1 + 3 * 40 * 41, "n_fibres",
            "a centred hexagonal number 1 + 3 r (r + 1) (1, 7, 19, 37, 61, 91, 127, ...)", n);
  b.n_fibres = static_cast<int>(n);
  b.core_diameter_arcsec = p.number("core_diameter_arcsec");
  p.require(b.core_diameter_arcsec > 0.0, "core_diameter_arcsec", "a number > 0 (arcsec)",
            b.core_diameter_arcsec);
  b.pitch_arcsec = p.number("pitch_arcsec");
  p.require(b.pitch_arcsec >= b.core_diameter_arcsec, "pitch_arcsec",
            "a number >= core_diameter_arcsec (the fibres' centre-to-centre spacing: cores cannot "
            "overlap)",
            b.pitch_arcsec);
  if (p.has("dither_x_arcsec") || p.has("dither_y_arcsec")) {
    b.dither_x_arcsec = p.numbers("dither_x_arcsec", 0, 1);
    b.dither_y_arcsec = p.numbers("dither_y_arcsec", b.dither_x_arcsec.size());
  }
  p.finish();
  return b;
}

nlohmann::json to_json(const FibreBundle& b) {
  return {{"n_fibres", b.n_fibres},
          {"core_diameter_arcsec", b.core_diameter_arcsec},
          {"pitch_arcsec", b.pitch_arcsec},
          {"dither_x_arcsec", b.dither_x_arcsec},
          {"dither_y_arcsec", b.dither_y_arcsec}};
}

FibrePositions fibre_positions(const FibreBundle& b) {
  FibrePositions out;
  int rings = 0;
  while (1 + 3 * rings * (rings + 1) < b.n_fibres) ++rings;
  // Axial coordinates (q, r) of a hexagon of radius `rings`: |q|, |r|, |q + r| <= rings; the
  // lattice point is q a1 + r a2 with a1 = (p, 0), a2 = (p / 2, p sqrt(3) / 2).
  for (int r = -rings; r <= rings; ++r)
    for (int q = -rings; q <= rings; ++q) {
      if (std::abs(q + r) > rings) continue;
      out.x_arcsec.push_back(b.pitch_arcsec * (q + 0.5 * r));
      out.y_arcsec.push_back(b.pitch_arcsec * (std::sqrt(3.0) / 2.0) * r);
    }
  return out;
}

double fibre_filling_factor(const FibreBundle& b) {
  return std::numbers::pi * b.core_diameter_arcsec * b.core_diameter_arcsec /
         (2.0 * std::sqrt(3.0) * b.pitch_arcsec * b.pitch_arcsec);
}

}  // namespace ifusim
