#pragma once
// fibres: a fibre-fed IFU (MaNGA, SAMI) observing the PSF-convolved sky-plane cube, and its cube
// reconstructed from the fibres' spectra as MaNGA's data reduction pipeline (DRP) does.
//
// 1. Sampling. The telescope's bundle (telescope.fibres, data/telescope.h: n fibres of core
//    diameter d on a hexagonal lattice of pitch p) is centred on the field and placed at each
//    dither offset in turn (MaNGA: three exposures on the vertices of an equilateral triangle of
//    side p / sqrt(3) = 1.44 arcsec, which fill the gaps between fibres; Law et al. 2015, AJ 150,
//    19). Each fibre at each dither position ("fibre exposure") collects the light of the
//    sky-plane cube over its circular core: spaxel s contributes its value times the fraction of
//    its area inside the core, computed exactly (the chord's closed-form integral, clipped to the
//    spaxel; the light is taken as uniform within a spaxel).
// 2. Noise, per fibre spectrum, before anything mixes them: the `noise` object takes the noise
//    stage's parameters (stages/noise) and its model is applied with the noise stage's own code
//    to the fibre spectra. The S/N model (snr, per, background_fraction, reference,
//    reference_threshold, seed: apply_noise) sets S/N and reference level per fibre spectrum.
//    The exposure model ("model": "exposure": apply_exposure_noise, stages/noise/exposure.h)
//    counts photons per fibre exposure: the fibre's source flux (the light of its core), the sky
//    through the core (sky surface brightness x pi r_core^2), dark current and read noise over
//    `pixels_per_voxel` detector pixels per fibre spectral pixel, with the telescope's area,
//    throughput, site extinction and airmass as for a cube; each fibre exposure (one fibre at one
//    dither position) lasts n_exposures x exposure_s. The telescope's collecting_area_m2,
//    throughput and site reach `noise` as they reach the noise stage. Without `noise` no noise
//    is drawn. A run with this stage may not also have a noise stage: both make the
//    cube's variance, and the pipeline refuses that at set-up (noise on the reconstructed cube
//    would be independent between spaxels, which a fibre IFU's is not).
// 3. Reconstruction onto the cube's spaxels (0.5 arcsec for MaNGA), one wavelength plane at a
//    time, with the DRP's modified Shepard's method (Law et al. 2016, AJ 152, 83, sec. 9.1):
//    spaxel t gets the fibre exposures f within r_lim = 1.6 arcsec of its centre, weighted
//    w_tf = exp(-r_tf^2 / (2 sigma^2)), sigma = 0.7 arcsec, normalised to sum 1 over f, and the
//    result is scaled by the spaxel's area over the core's, so that surface brightness is kept:
//      cube_t = (s^2 / (pi d^2 / 4)) sum_f W_tf F_f,   W_tf = w_tf / sum_f' w_tf'.
//    A spaxel with no fibre exposure within r_lim is not covered: NaN (the DRP masks it).
// 4. Errors. The reconstruction is linear, so its covariance is C = a^2 W diag(var_f) W^T
//    (a = s^2 / (pi d^2 / 4)): the cube's variance is its diagonal, and the correlation matrix
//    rho_st = C_st / sqrt(C_ss C_tt) is stored, as the DRP does, at the planes nearest the SDSS
//    g, r, i, z pivot wavelengths (4702, 6175, 7491, 8946 A; Doi et al. 2010, AJ 139, 1628,
//    table 4) that fall inside the band: Cube::correlations "GCORREL", "RCORREL", "ICORREL",
//    "ZCORREL", written as binary tables (io/cube). Without noise, var_f = 1 (the correlation of
//    a constant per-fibre noise).
//
// What stays approximate: every exposure sees the same PSF and transparency (the DRP weights
// exposures and tracks the PSF per exposure), the fibres are on a perfect lattice (real bundles
// have ~0.1 arcsec irregularities, Drory et al. 2015), differential atmospheric refraction, which
// moves the fibres' footprints with wavelength (Law et al. 2016, sec. 9.1), is not modelled, and
// SAMI's cubes are reconstructed by drizzling (Sharp et al. 2015, MNRAS 446, 1551), not by this
// Shepard's method. The stage's maps (white light, velocities) stay those of the sky-plane cube.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_params.h"
#include "data/fibre_bundle.h"
#include "stages/noise/noise.h"
#include "stages/stage.h"

namespace ifusim {

struct FibresParams {
  FibreBundle bundle;                // inherited from telescope.fibres
  double sigma_arcsec = 0.7;         // Law et al. 2016, sec. 9.1
  double radius_limit_arcsec = 1.6;  // idem
  std::optional<NoiseParams> noise;  // per fibre spectrum; none without it
  static FibresParams from_json(JsonParams params);
};

// Where the fibre exposures lie and what they see: centres (arcsec from the field's centre, in
// the cube's x and y) and, for each, the spaxels its core overlaps with the fraction of each
// spaxel's area inside the core.
struct FibreSampling {
  std::vector<double> x_arcsec, y_arcsec;
  std::vector<std::vector<std::pair<std::size_t, double>>> overlap;
  std::size_t size() const { return x_arcsec.size(); }
};
FibreSampling fibre_sampling(const FibresParams& params, const CubeShape& shape,
                             double spaxel_arcsec);

// The fibre spectra: shape {n fibre exposures, 1, n_wave}, in the cube's units per fibre.
Cube fibre_spectra(const FibreSampling& sampling, const Cube& cube);

// The reconstruction's normalised weights W_tf: for each spaxel t of `shape`, the fibre
// exposures within the radius limit and their weights (empty: not covered).
std::vector<std::vector<std::pair<std::size_t, double>>> shepard_weights(
    const FibresParams& params, const FibreSampling& sampling, const CubeShape& shape,
    double spaxel_arcsec);

// What the exposure model needs beyond the stage's parameters: the night sky, the site's
// extinction and the observation (wavelength grid, medium, LSF).
struct FibreExposureInputs {
  const SkySpectrum* sky = nullptr;
  const ExtinctionCurve* extinction = nullptr;
  const Observation* observation = nullptr;
};

// The whole stage on a host cube: samples it with the fibres, draws their noise (seed as
// resolved by the stage), reconstructs it in place, fills its variance (with noise) and its
// correlation matrices. plane_wavelength_angstrom[k] is plane k's wavelength. The exposure model
// needs `exposure` (a flux cube). Returns the number of fibre exposures.
std::size_t apply_fibres(const FibresParams& params, double spaxel_arcsec,
                         const std::vector<double>& plane_wavelength_angstrom,
                         double wave_step_angstrom, int margin_wavelengths, std::uint64_t seed,
                         Cube& cube, const std::string& path = "fibres",
                         const std::vector<double>& plane_width_angstrom = {},
                         const FibreExposureInputs& exposure = {});

// The sky's solid angle one fibre collects: its core, pi (d / 2)^2 arcsec^2.
double fibre_core_arcsec2(const FibreBundle& bundle);

StageEntry fibres_stage();
// The exposure model reads its sky spectrum and extinction table with the resources' loaders (a
// run's); made without them, it refuses to run.
std::unique_ptr<Stage> make_fibres_stage(const nlohmann::json& params, const std::string& path,
                                         const StageResources& resources = {});

}  // namespace ifusim
