#pragma once
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "data/resolution_curve.h"

namespace ifusim {

enum class ApertureShape { square, circular, hexagonal };

// The most spaxels a grid may have on a side: spaxel indices iy * n + ix are int32
// (stars.spaxel_index), and floor(sqrt(2^31 - 1)) = 46340.
inline constexpr int kMaxSpaxelsSide = 46340;

// A fibre-fed IFU's bundle (MaNGA, SAMI): `n_fibres` circular fibres of core diameter
// `core_diameter_arcsec` on a hexagonal lattice of pitch `pitch_arcsec` (centre to centre), centred
// on the field, and the dither offsets of the bundle's exposures. n_fibres is a centred hexagonal
// number 1 + 3 r (r + 1) (r rings around the central fibre: 19, 37, 61, 91, 127), as MaNGA's
// bundles (Drory et al. 2015, AJ 149, 77). data/fibre_bundle.h gives the fibres' positions; the
// fibres stage (stages/fibres) observes the sky-plane cube with them.
struct FibreBundle {
  int n_fibres = 0;
  double core_diameter_arcsec = 0.0;
  double pitch_arcsec = 0.0;
  // One exposure per entry (x east-west along the grid's x axis, y along its y axis), arcsec.
  std::vector<double> dither_x_arcsec = {0.0};
  std::vector<double> dither_y_arcsec = {0.0};
};

// An IFU: its field, spaxels, wavelength coverage and resolution. Presets are JSON files in
// configs/telescopes/; a run config may also describe its own.
struct Telescope {
  std::string name;
  double fov_arcsec = 0.0;     // side of the square grid; diameter of a circular aperture;
                               // corner-to-corner width of a hexagonal one
  double spaxel_arcsec = 0.0;  // side of a square spaxel
  ApertureShape aperture = ApertureShape::square;
  double wave_start_angstrom = 0.0;  // centre of the first pixel
  double wave_end_angstrom = 0.0;    // the grid stops before this (exclusive, as numpy.arange)
  double wave_step_angstrom = 0.0;
  std::string wavelength_medium = "air";
  ResolutionCurve lsf_fwhm_angstrom;  // line-spread function (observed frame)
  ResolutionCurve psf_fwhm_arcsec;    // typical seeing or diffraction limit, used when a run's PSF
                                      // stage gives none
  std::optional<FibreBundle> fibres;  // fibre-fed IFUs only (telescope.fibres)

  // Spaxels per side: fov / spaxel, rounded when it is within 1e-6 of an integer, else up.
  int n_spaxels_side() const {
    const double r = fov_arcsec / spaxel_arcsec;
    return std::abs(r - std::round(r)) < 1e-6 ? static_cast<int>(std::round(r))
                                              : static_cast<int>(std::ceil(r));
  }
  int n_wave() const {
    return static_cast<int>(
        std::ceil((wave_end_angstrom - wave_start_angstrom) / wave_step_angstrom - 1e-9));
  }
};

}  // namespace ifusim
