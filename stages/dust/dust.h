#pragma once
// Dust (optional stage, RUBIX's calc_dusty_ifu): every star's light is attenuated by the dust in
// the gas in front of it along the line of sight. The spectral stage applies the attenuation;
// this stage gives each star its A_V (stars.dust_av) and sets the curve (the product
// "dust_attenuation").
//
// Model (docs/dust.md):
// - Screen. The gas particles are the screen. A star in spaxel s at depth z_star (the line of
//   sight +z points away from the observer, so gas in front has z_gas < z_star) sees the dust
//   surface density Sigma_dust = sum over gas with z_gas < z_star of w_s m_gas DGR(Z_gas) /
//   A_spaxel, w_s the gas particle's footprint weight in s (stages/common/footprint.h):
//   1 in its own spaxel without smoothing; with smoothing "kernel" its kernel's share of s, the
//   kernel's width from the cell radius (3 m / (4 pi rho))^(1/3). Gas is assigned to spaxels with
//   the stars' own grid (the product "spaxels", aperture and smoothing
//   included);
//   A_spaxel = spaxel_size_kpc^2.
// - A star's A_V. Without smoothing, the screen of its own spaxel at its depth. With smoothing,
//   its light is spread over its footprint, each part behind that spaxel's screen; the star gets
//   the A_V that dims its V-band light in the field by as much as the spaxels do together,
//   10^(-0.4 A_V) = sum_s w_s 10^(-0.4 A_V,s) / sum_s w_s (the spectral stage applies one A_V a
//   star: exact at V, an approximation at other wavelengths where the A_V,s differ).
// - Which gas: star-forming or colder than cold_temperature_k (8000 K), see DustCarriers.
// - Dust-to-gas ratio. DGR = f_dm * Z_gas: a fixed fraction of the metals is in dust (Dwek 1998,
//   ApJ 501, 643; Remy-Ruyer et al. 2014, A&A 563, A31 find DGR roughly proportional to Z
//   near solar metallicity). Default f_dm = 0.4: DGR = 0.0054 at Z = 0.0134 (Asplund et al.
//   2009), 0.008 at Z = 0.02.
// - Extinction. tau_V = kappa_V Sigma_dust and A_V = 2.5 log10(e) tau_V = 1.086 tau_V, with the
//   V-band mass extinction coefficient of Milky Way dust kappa_V = 2.62e4 cm^2 per g of dust:
//   Draine (2003, ARA&A 41, 241) renormalised Weingartner & Draine (2001) R_V = 3.1 model,
//   table kext_albedo_WD_MW_3.1_60_D03: C_ext/H = 4.896e-22 cm^2 at V (0.547 micron) and
//   M_dust/H = 1.870e-26 g. Sigma_dust in Msun/kpc^2 times 2.0885e-10 is g/cm^2.
// - Check against the Milky Way: N_H / A_V = 1.87e21 cm^-2 mag^-1 (Bohlin, Savage & Drake 1978,
//   N_H / E(B-V) = 5.8e21, R_V = 3.1). This model gives N_H / A_V = X / (1.086 kappa_V f_dm Z
//   m_H): 1.84e21 for Z = 0.02, X = 0.70 and 2.9e21 for Z = 0.0134, X = 0.738 (the Draine
//   model's dust-to-gas ratio 1/124 corresponds to f_dm = 0.6 at Z = 0.0134).
// - Curves: Cardelli, Clayton & Mathis 1989 with R_V (default 3.1) or Calzetti et al. 2000
//   (default R_V = 4.05), stages/common/dust_curves.h, evaluated at the rest wavelength.
// - Birth clouds (Charlot & Fall 2000, ApJ 539, 718, CF00): stars younger than t_BC
//   (birth_cloud_age_myr, default 10 Myr, CF00's lifetime of the birth clouds) are still inside
//   the molecular clouds they formed in, and so are the H II regions whose nebular lines the
//   emission_lines stage makes (every cell with SFR > 0): both see, on top of the diffuse screen
//   above, the optical depth tau_V^BC (birth_cloud_tau_v, default 1.0), A_V^BC = 1.086 tau_V^BC.
//   CF00's fit to the starbursts of Calzetti's sample (their section 4) has a total
//   tau_V = 1.5 of which the ISM holds mu = 0.3, so tau_V^BC = (1 - mu) 1.5 = 1.05, here 1.0.
//   tau_V^BC is a fixed number, not a multiple of the screen: the screen is
//   the simulation's own ISM (its mu follows from the gas), and the clouds are below the
//   resolution of the simulation's cells. birth_cloud_tau_v = 0 turns them off.
//   A young star's A_V is screen + A_V^BC (stars.dust_av), the lines' is the cell's screen
//   (gas.dust_av) + A_V^BC (the product's line_extra_av_mag).
// - The lines' curve (line_curve): the nebular lines are attenuated by a foreground screen of
//   Milky-Way-type dust, Calzetti's curve being for the stellar continuum (Calzetti 2001, PASP
//   113, 1449, section 4; Calzetti et al. 2000, section 2): default ccm89 with line_r_v = 3.1,
//   whatever the stars' curve. The Balmer decrement's E(B-V)_gas and the continuum's
//   E(B-V)_stars then come out with the observed ratio, 0.44 (Calzetti et al. 2000) to about
//   0.5-0.7 (Kreckel et al. 2013, ApJ 771, 62; Kashino et al. 2013, ApJL 777, L8), where the
//   screen's A_V is comparable to A_V^BC or larger; a thinner screen gives a smaller ratio
//   (docs/observation_model.md).
//
// Devices: on the host, the gas deposits in the grid (one per gas particle and spaxel of its
// footprint) are sorted by (spaxel, z) and each spaxel's A_V is accumulated front to back
// (double, one fixed order); these tables are replicated on every device and a kernel over the
// stars binary-searches the depths of each spaxel of its footprint: O((N_star F_star + N_gas
// F_gas) log N_gas) with F the footprint sizes, no float atomics, so A_V is identical for any
// number of devices.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/constants.h"  // kSolarMassG, kCmPerKpc, kMagPerOpticalDepth
#include "core/json_params.h"
#include "data/buffer.h"
#include "data/dispatch.h"
#include "data/hd.h"
#include "stages/common/dust_curves.h"
#include "stages/common/footprint.h"
#include "stages/stage.h"

namespace ifusim {

// 1 Msun / kpc^2 in g / cm^2 (the nominal solar mass and the parsec of core/constants.h).
inline constexpr double kMsunPerKpc2InGPerCm2 = kSolarMassG / (kCmPerKpc * kCmPerKpc);

// Which gas cells hold dust: cold_or_star_forming (default) leaves out cells that form no stars
// and are at least cold_temperature_k hot (hot halo gas: dust is sputtered there), as mocks of
// EAGLE with SKIRT do with 8000 K (Trayford et al. 2017, MNRAS 470, 771; Camps et al. 2016,
// MNRAS 462, 1057); all: every cell (RUBIX's screen). Without temperatures in the input every
// cell holds dust (the stage says so).
enum class DustCarriers { cold_or_star_forming, all };

struct DustParams {
  DustCurve curve{DustCurveKind::ccm89, 3.1};
  DustCurve line_curve{DustCurveKind::ccm89, 3.1};  // the nebular lines'
  double birth_cloud_tau_v = 1.0;                   // tau_V^BC (CF00)
  double birth_cloud_age_myr = 10.0;                // t_BC (CF00)
  DustCarriers carriers = DustCarriers::cold_or_star_forming;
  double cold_temperature_k = 8000.0;
  double dust_to_metals = 0.4;        // f_dm: dust mass / metal mass
  double kappa_v_cm2_per_g = 2.62e4;  // V-band extinction cross-section per gram of dust
  static DustParams from_json(JsonParams params);

  // A_V of the birth clouds, 2.5 log10(e) tau_V^BC.
  double birth_cloud_av_mag() const { return kMagPerOpticalDepth * birth_cloud_tau_v; }

  // A_V per unit gas surface density (Msun/kpc^2) of metallicity Z.
  double av_per_gas_msun_per_kpc2(double metallicity) const {
    return kMagPerOpticalDepth * kappa_v_cm2_per_g * kMsunPerKpc2InGPerCm2 * dust_to_metals *
           metallicity;
  }
};

StageEntry dust_stage();
std::unique_ptr<Stage> make_dust_stage(const nlohmann::json& params, const std::string& path);

// The gas screens of all spaxels: entries [offsets[s], offsets[s+1]) belong to spaxel s, sorted
// by depth; av_through[k] is the A_V of that spaxel's gas up to and including entry k.
struct DustScreens {
  std::vector<std::int64_t> offsets;  // n_spaxels + 1
  std::vector<float> z_kpc;
  std::vector<double> av_through;
};

// One gas particle's share of the screen of one spaxel of its footprint: its depth and w m Z.
// `row`, the particle's row in the galaxy's gas, breaks ties between equal depths.
struct DustDeposit {
  std::int32_t spaxel;
  float z_kpc;
  double mass_times_z_msun;
  double weight;  // w, the footprint's share of the particle in this spaxel (the adjoint's)
  std::uint64_t row;
};

// Appends the deposits of gas particles i = 0..n-1 (rows first_row + i; depth, mass,
// metallicity) to `deposits`: w m Z in every spaxel of its footprint (a FootprintView over host
// arrays). Throws std::runtime_error naming the field for a negative or non-finite mass or
// metallicity, or a non-finite depth, of a particle that reaches the grid.
void add_dust_deposits(std::vector<DustDeposit>& deposits, std::size_t first_row,
                       std::size_t n_spaxels, const FootprintView& gas_footprint,
                       const std::vector<float>& gas_z_kpc, const std::vector<float>& gas_mass_msun,
                       const std::vector<float>& gas_metallicity);

// The screens of every deposit of the galaxy's gas, given in any order and sorted here (by
// spaxel, depth, row: the order of the screens' entries), so the screens do not depend on how
// the gas was split.
DustScreens make_dust_screens(std::vector<DustDeposit>& deposits, std::size_t n_spaxels,
                              double spaxel_size_kpc, const DustParams& params);

// Reverse mode (docs/gradients.md, "Dust"): given dL/d A_V of the receivers of the screens (one
// footprint, depths and cotangents per particle set: the stars, the gas cells), dL/d (w m Z) of
// every entry of `screens`: each receiver's cotangent, times dA_V/dA_V,s for each spaxel s of its
// footprint, goes to the last entry in front of it, and an entry's own cotangent is the sum over
// the entries behind it in its spaxel (A_V,s at depth z is the sum of those in front). Summed in
// the receivers' row order, so the result does not depend on how they were split.
struct DustReceivers {
  const FootprintView* footprint;
  const std::vector<float>* z_kpc;
  const std::vector<double>* av_cotangent;  // dL/d A_V per particle
};
std::vector<double> dust_entry_cotangents(const DustScreens& screens, double spaxel_size_kpc,
                                          const DustParams& params,
                                          const std::vector<DustReceivers>& receivers);

// What the kernel reads (replicated on every device).
struct DustScreenView {
  const std::int64_t* offsets = nullptr;
  const float* z_kpc = nullptr;
  const double* av_through = nullptr;
};

// The last entry of spaxel s in front of depth z (z_gas < z), or -1 where none is (or s = -1,
// outside the field).
IFUSIM_HD inline std::int64_t screen_entry_in_front(const DustScreenView& v, std::int32_t spaxel,
                                                    float z_kpc) {
  if (spaxel < 0) return -1;
  const std::int64_t first = v.offsets[spaxel];
  std::int64_t lo = first, hi = v.offsets[spaxel + 1];
  while (lo < hi) {  // the first entry not in front (z_gas >= z)
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (v.z_kpc[mid] < z_kpc)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo > first ? lo - 1 : -1;
}

// A_V in front of a star at depth z in spaxel s (-1: outside, 0): the gas of s with z_gas < z.
IFUSIM_HD inline float screen_av(const DustScreenView& v, std::int32_t spaxel, float z_kpc) {
  const std::int64_t entry = screen_entry_in_front(v, spaxel, z_kpc);
  return entry >= 0 ? static_cast<float>(v.av_through[entry]) : 0.0f;
}

}  // namespace ifusim

// The birth clouds in front of the young stars: A_V^BC added to every star younger than
// t_BC (no ages: nothing added, for the gas cells).
namespace ifusim {
struct BirthCloudView {
  const float* age_gyr = nullptr;
  float young_below_gyr = 0.0f;
  float av_mag = 0.0f;
};
}  // namespace ifusim

IFUSIM_DECLARE_BACKENDS(void compute_dust_av(const Device& device,
                                             const ifusim::DustScreenView& screens,
                                             const ifusim::FootprintView& footprint,
                                             const ifusim::BirthCloudView& birth_clouds,
                                             Span<const float> z_kpc, Span<float> dust_av);)
