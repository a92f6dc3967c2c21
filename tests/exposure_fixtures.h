#pragma once
// What the exposure-model tests (test_exposure_noise for square spaxels, test_fibre_exposure for
// fibre spectra) share: the data folder's night sky and extinction tables, read once, and a
// flat-throughput exposure with no detector noise unless a test adds it.
#include <string>

#include "data/datacube.h"
#include "data/resolution_curve.h"
#include "io/run_config.h"
#include "io/sky/sky_tables.h"
#include "stages/noise/exposure.h"
#include "stages/stage.h"

namespace ifusim::test {

inline const SkySpectrum& paranal_sky() {
  static const SkySpectrum sky = read_sky_spectrum(data_dir() + "/sky/paranal_sky.fits");
  return sky;
}
inline const ExtinctionCurve& paranal_extinction() {
  static const ExtinctionCurve curve =
      read_extinction_curve(data_dir() + "/sky/paranalextinct.dat");
  return curve;
}
inline const ExtinctionCurve& kpno_extinction() {
  static const ExtinctionCurve curve = read_extinction_curve(data_dir() + "/sky/kpnoextinct.dat");
  return curve;
}

// A constant extinction of `mag_per_airmass` over 3000-11000 A (the tests' bands).
inline ExtinctionCurve flat_extinction(double mag_per_airmass) {
  ExtinctionCurve flat;
  flat.file = "flat";
  flat.wavelength_angstrom = {3000.0, 11000.0};
  flat.mag_per_airmass = {mag_per_airmass, mag_per_airmass};
  return flat;
}

// `collecting_area_m2` and a flat `throughput`, keys named as under `stage_key`
// ("stages.noise", "stages.fibres.noise").
inline ExposureParams flat_exposure(double collecting_area_m2, double throughput, double exposure_s,
                                    int n_exposures, const std::string& stage_key) {
  ExposureParams p;
  p.exposure_s = exposure_s;
  p.n_exposures = n_exposures;
  p.collecting_area_m2 = collecting_area_m2;
  p.throughput = ResolutionCurve(throughput);
  p.dark_e_per_pixel_s = 0.0;
  p.read_noise_e = 0.0;
  p.sky_file_key = stage_key + ".sky_file";
  p.extinction_key = stage_key + ".site";
  return p;
}

// A grid of 1.25 A bins from `start_angstrom`, a 2.5 A LSF, seed 7.
inline Observation exposure_observation(double spaxel_arcsec, double start_angstrom,
                                        const std::string& medium) {
  Observation obs;
  obs.axes.spaxel_arcsec = spaxel_arcsec;
  obs.axes.wave_start_angstrom = start_angstrom;
  obs.axes.wave_step_angstrom = 1.25;
  obs.axes.wavelength_medium = medium;
  obs.telescope_lsf_fwhm_angstrom = 2.5;
  obs.seed = 7;
  return obs;
}

// side x side spaxels, n_wave planes, every voxel `value` (10^-20 cgs / A).
inline Cube flat_cube(int side, int n_wave, double value) {
  Cube cube;
  cube.shape = {side, side, n_wave};
  cube.unit = "10**(-20)*erg/(s*cm**2*Angstrom)";
  cube.data.assign(cube.shape.n_voxels(), value);
  return cube;
}

}  // namespace ifusim::test
