#pragma once
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "data/resolution_curve.h"
#include "data/wavelength_axis.h"

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
  double wave_step_angstrom = 0.0;   // linear sampling; 0 when log10_step is given
  double wave_log10_step = 0.0;      // > 0: logarithmic sampling, dlog10(lambda) per pixel
  std::string wavelength_medium = "air";
  // How the FITS cube is laid out (docs/outputs.md): "muse" (DATA, STAT: the ESO MUSE
  // pipeline's DATACUBE) or "manga" (FLUX, IVAR, MASK, WAVE, SPECRES: the MaNGA DRP's LOGCUBE).
  std::string fits_layout = "muse";
  ResolutionCurve lsf_fwhm_angstrom;  // line-spread function (observed frame)
  ResolutionCurve psf_fwhm_arcsec;    // typical seeing or diffraction limit, used when a run's PSF
                                      // stage gives none
  // For the noise stage's exposure model (stages/noise/exposure.h); 0 / empty where the preset has
  // no such data. The telescope's unobstructed collecting area (m^2); the end-to-end throughput
  // (telescope + instrument + detector, no atmosphere: a fraction in [0, 1]) against observed
  // wavelength (a ResolutionCurve as a plain piecewise-linear curve: `fwhm` holds the fractions);
  // the observatory's site ("paranal", "kpno", "apo") for its atmospheric extinction.
  double collecting_area_m2 = 0.0;
  ResolutionCurve throughput = ResolutionCurve(-1.0);  // fwhm < 0: none given
  std::string site;
  bool has_throughput() const { return throughput.min() >= 0.0; }
  std::optional<FibreBundle> fibres;  // fibre-fed IFUs only (telescope.fibres)

  // Spaxels per side: fov / spaxel, rounded when it is within 1e-6 of an integer, else up.
  int n_spaxels_side() const {
    const double r = fov_arcsec / spaxel_arcsec;
    return std::abs(r - std::round(r)) < 1e-6 ? static_cast<int>(std::round(r))
                                              : static_cast<int>(std::ceil(r));
  }
  int n_wave() const {
    return wavelength_grid_size(wave_start_angstrom, wave_end_angstrom, wave_step_angstrom,
                                wave_log10_step);
  }
};

}  // namespace ifusim
