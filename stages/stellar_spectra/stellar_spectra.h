#pragma once
// The spectral core (exact method): per star, interpolate the SSP grid bilinearly in
// (log age, log Z), scale by initial mass, Doppler-shift by the line-of-sight velocity and the
// galaxy's redshift, resample conserving energy onto the telescope's wavelength bins, and add
// to the device's partial cube, all in one kernel: no spectrum per particle is ever stored
// (memory is O(particles + cube + templates)).
//
// Resampling: each template's spectrum is piecewise constant over its rest-frame pixels; its
// cumulative energy C(lambda) (L_sun per M_sun from the first pixel edge) is tabulated once per
// template. An observed bin [l0, l1] receives C(l1 / D) - C(l0 / D) with
// D = (1 + z)(1 + v_los / c), so the energy a star emits is conserved exactly over the bins
// that cover its shifted spectrum, and the cube holds luminosity per observed Angstrom.
// Line of sight: +z, pointing away from the observer; v_z > 0 recedes (redshift).
//
// Dust (when the dust stage gave each star an A_V): a bin's energy is multiplied by
// 10^(-0.4 A_V A_lambda/A_V) with the curve evaluated at the bin centre's rest-frame wavelength
// (the dust sits in the galaxy); the curves vary little across one bin.
#include <cstdint>
#include <memory>
#include <vector>

#include "data/buffer.h"
#include "data/hd.h"
#include "data/ssp_grid.h"
#include "io/json_params.h"
#include "stages/dispatch.h"
#include "stages/dust/dust_curves.h"
#include "stages/stage.h"

namespace ifusim {

enum class OutsideGrid : int { clamp, zero };

// Templates on the device, ready for the kernel (replicated on every device).
struct SspView {
  int n_age = 0, n_z = 0, n_wave = 0;
  const double* log_age = nullptr;     // log10(age / Gyr), n_age
  const double* log_z = nullptr;       // log10(Z), n_z
  const double* edges = nullptr;       // rest-frame pixel edges, n_wave + 1 (Angstrom)
  const double* cumulative = nullptr;  // per node (i_age * n_z + i_z): n_wave + 1 values
  bool uniform = false;                // edges equally spaced: pixel lookup without search
  double edge0 = 0.0, step = 1.0;
  OutsideGrid outside = OutsideGrid::clamp;
};

// The observed wavelength bins: centres start + k * step, k < n.
struct WaveBins {
  double start_angstrom = 0.0;
  double step_angstrom = 1.0;
  int n = 0;
};

struct StarViews {
  const float* velocity_los_kms;  // v_z
  const float* initial_mass_msun;
  const float* age_gyr;
  const float* metallicity;
  const std::int32_t* spaxel_index;
  const float* dust_av;  // A_V in magnitudes per star, or nullptr without dust
  std::size_t n;
};

// Host-side preparation of the template tables.
struct SspTables {
  std::vector<double> log_age, log_z, edges, cumulative;
  bool uniform = false;
  double max_flux_density = 0.0;  // max |flux| over the grid, L_sun/A per M_sun
};
// `medium` is the telescope's ("air" or "vacuum"): the templates' rest wavelengths are converted
// to it (data/wavelength.h) so that lines land where the instrument measures them.
SspTables make_ssp_tables(const SspGrid& grid, const std::string& medium = "");

struct StellarSpectraParams {
  OutsideGrid outside = OutsideGrid::clamp;
  static StellarSpectraParams from_json(JsonParams params);
};

// The stage reads the templates given to it (the pipeline loads the library named in the run
// config) and the telescope's bins and redshift from state.observation.
std::unique_ptr<Stage> make_stellar_spectra_stage(std::shared_ptr<const SspGrid> grid,
                                                  StellarSpectraParams params);

// The slow, obvious double-precision reference of the same physics, one particle at a time:
// interpolate the full spectrum, shift every pixel edge, and share each pixel's energy among
// the bins it overlaps. Returns the cube (spaxel-major) in L_sun per observed Angstrom.
std::vector<double> reference_stellar_cube(
    const SspGrid& grid, OutsideGrid outside, const std::string& medium, double redshift,
    const WaveBins& bins, std::size_t n_spaxels, const std::vector<float>& velocity_los_kms,
    const std::vector<float>& initial_mass_msun, const std::vector<float>& age_gyr,
    const std::vector<float>& metallicity, const std::vector<std::int32_t>& spaxel_index);

inline constexpr double kSpeedOfLightKms = 299792.458;

}  // namespace ifusim

IFUSIM_DECLARE_BACKENDS(
    void accumulate_stellar_spectra(const Device& device, const ifusim::SspView& ssp,
                                    const ifusim::WaveBins& bins, double redshift,
                                    const ifusim::DustCurve& dust, const ifusim::StarViews& stars,
                                    double counts_per_unit, Span<std::int64_t> cube_sums);
    void accumulate_kinematics(const Device& device, const ifusim::StarViews& stars,
                               Span<const float> mass_msun, double counts_per_unit,
                               Span<std::int64_t> moment_sums);)
