#pragma once
// Nebular emission lines of the star-forming gas (docs/emission_lines.md): every gas cell with
// StarFormationRate > 0 adds its lines to the cube, Doppler-shifted by its line-of-sight
// velocity and spread over the spaxels like the stars (footprint.h). Hot gas that forms no stars
// emits nothing in this model: TNG's star-forming cells are the ones on the effective equation of
// state of the dense, cold ISM (Springel & Hernquist 2003), where H II regions form.
//
// Luminosities:
// - L(H-alpha) = SFR x 10^41.297 erg/s (SFR in Msun/yr) for the Chabrier (2003) IMF that TNG and
//   both SSP libraries use: Kennicutt & Evans 2012 (ARA&A 50, 531, Table 1) give 10^41.27 for a
//   Kroupa IMF, and the same light means 0.63 / 0.67 = 0.94 times the Kroupa SFR for Chabrier
//   (Madau & Dickinson 2014, ARA&A 52, 415, section 3.1: Salpeter SFRs x 0.63 for Chabrier,
//   x 0.67 for Kroupa), so 10^41.27 x 0.67 / 0.63.
// - Other Balmer lines, Case B at T = 10^4 K and n_e = 100 cm^-3 (Osterbrock & Ferland 2006,
//   Table 4.2): H-alpha / H-beta = 2.86, H-gamma / H-beta = 0.468, H-delta / H-beta = 0.259.
// - Forbidden lines from the cell's oxygen abundance 12 + log(O/H): from GFM_Metals where the
//   input has them (O/H by number = (X_O / 15.999) / (X_H / 1.008)), else 8.69 + log10(Z / 0.0134)
//   (the solar values of Asplund et al. 2009, ARA&A 47, 481). With x = 12 + log(O/H) - 8.69,
//   the strong-line calibrations of Curti et al. 2020 (MNRAS 491, 944, Table 2) give
//     log([O II] 3726+3729 / H-beta) = 0.435 - 1.362 x - 5.655 x^2 - 4.851 x^3 - 0.478 x^4
//                                      + 0.736 x^5                                        (R2)
//     log([O III] 5007 / H-beta)     = -0.277 - 3.549 x - 3.593 x^2 - 0.981 x^3            (R3)
//     log([N II] 6584 / H-alpha)     = -0.489 + 1.513 x - 2.554 x^2 - 5.293 x^3 - 2.867 x^4 (N2)
//     log([S II] 6716+6731 / H-alpha) = -0.442 - 0.360 x - 6.271 x^2 - 8.339 x^3 - 3.559 x^4 (S2)
//   with x clamped to the calibration sample's 7.6 <= 12 + log(O/H) <= 8.85. Fixed doublet
//   ratios: [O III] 5007 / 4959 = 2.98 and [N II] 6584 / 6548 = 3.05 (Storey & Zeippen 2000,
//   MNRAS 312, 813). The density-sensitive doublets [O II] 3729 / 3726 and [S II] 6716 / 6731
//   are split at the electron density n_e (default 100 cm^-3) by R(n_e) = a (b + n_e) / (c + n_e)
//   at 10^4 K (Sanders et al. 2016, ApJ 816, 23, eq. 7: [O II] a = 0.3771, b = 2468, c = 638.4;
//   [S II] a = 0.4315, b = 2107, c = 627.1). [O I] 6300 has no strong-line calibration against
//   O/H: it is a fixed log([O I] 6300 / H-alpha), -1.5 by default, typical of star-forming
//   galaxies in the [O I] diagnostic diagram (Kewley et al. 2006, MNRAS 372, 961).
// - A user's HDF5 table of line ratios can replace the forbidden lines' relations
//   (LineRatioTable, docs/emission_lines.md).
//
// Wavelengths: rest wavelengths in vacuum; each line lands at lambda_vac (1 + z)(1 + v_los / c),
// converted to the telescope's medium at that observed wavelength (data/wavelength.h).
//
// Profile: a Gaussian of sigma^2 = k T / m_atom + sigma_turbulent^2 in velocity (T = 10^4 K, the
// temperature of photoionised gas: the star-forming cells' TNG temperature is that of the
// effective equation of state, not a physical one; m_atom the emitting atom's mass), integrated
// exactly over every observed bin as differences of erf. The bins within +-8 sigma of the centre
// are touched, the first and last taking the tails beyond, so each line's light is conserved to
// rounding at any resolution. The lines are deposited already broadened by the templates' own
// resolution at their wavelength (Observation::template_fwhm_angstrom, scaled by 1 + z), added in
// quadrature: the LSF stage removes that from the instrument's before convolving the whole cube,
// so lines and continuum both end with the instrument's resolution. Where the templates are
// coarser than the instrument (which the LSF stage cannot sharpen), by the instrument's
// (Observation::telescope_lsf_fwhm_angstrom) instead: min(templates, instrument), so that lines
// always end at the instrument's resolution and the continuum at max(templates, instrument).
//
// Dust: with a dust stage, a cell's lines are dimmed by the gas in front of it (gas.dust_av, the
// stars' screen) plus the birth clouds of its H II regions (Charlot & Fall 2000: the dust stage's
// birth_cloud_tau_v), with the lines' own curve (the dust stage's line_curve, Milky-Way-type by
// default) at the line's rest wavelength.
//
// Partial result (one per memory space, integer fixed point like the stars' cube, so the cube is
// bitwise identical for any device count): per spaxel, each line's own window of observed bins
// (the bins its centre can reach for the data's exact max |v_los|, +-8 sigma): O(N_gas x lines x
// bins touched) work, spaxels x (sum of windows) memory, never N_gas x n_lambda. Its total adds
// into the cube, and gives each line's luminosity map (the flux stage makes it erg/s/cm^2), and the
// H-alpha-weighted mean velocity and dispersion of the gas (the cells' line widths included).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/constants.h"  // kSpeedOfLightKms
#include "core/json_params.h"
#include "data/buffer.h"
#include "data/dispatch.h"
#include "data/emission_line_list.h"
#include "data/hd.h"
#include "data/line_ratio_table.h"
#include "data/wavelength_axis.h"
#include "stages/common/dust_curves.h"
#include "stages/common/footprint.h"
#include "stages/stage.h"

namespace ifusim {

// L(H-alpha) per unit SFR, Chabrier IMF: 10^41.27 x 0.67 / 0.63 = 10^41.297 erg/s per Msun/yr
// (Kennicutt & Evans 2012 for Kroupa, converted as Madau & Dickinson 2014; see above).
inline constexpr double kHalphaErgPerSPerMsunPerYr = 1.8620871366628676e41 * 0.67 / 0.63;
// Case B Balmer decrement and the calibrations' solar reference (see above).
inline constexpr double kHalphaPerHbeta = 2.86;
inline constexpr double kSolarOxygenAbundance = 8.69;  // 12 + log(O/H), Asplund et al. 2009
inline constexpr double kSolarMetallicity = 0.0134;    // Z, Asplund et al. 2009
inline constexpr double kCurtiOxygenMin = 7.6, kCurtiOxygenMax = 8.85;
// Lines are integrated over +-(this) sigma; the end bins take the Gaussian's tails.
inline constexpr double kLineTruncationSigmas = 8.0;
// A line's profile is made this many bins at a time (a kernel's local table).
inline constexpr int kLineChunkBins = 32;

// The lines the stage can make: kEmissionLines (data/emission_line_list.h). A user's table of
// line ratios: LineRatioTable (data/line_ratio_table.h), read by io/ (io/emission_line_table.h)
// and handed to the stage through StageResources.
//
// The table's ratio for its entry `entry` at (oxygen, log U), bilinear and clamped at the edges.
double line_ratio_to_hbeta(const LineRatioTable& table, std::size_t entry, double oxygen,
                           double log_u);

struct EmissionLineParams {
  std::vector<int> lines;               // indices into kEmissionLines (default: all)
  double turbulent_sigma_kms = 10.0;    // added in quadrature to the thermal width
  double electron_temperature_k = 1e4;  // of the thermal width
  double electron_density_cm3 = 100.0;  // of the [O II] and [S II] doublet ratios
  double log_oi_6300_to_halpha = -1.5;
  std::string line_ratio_file;             // "" for the calibrations
  double log_ionisation_parameter = -3.0;  // where the table has a U axis
  static EmissionLineParams from_json(JsonParams params);
};

// Luminosity over H-alpha's of every line, tabulated on a fine uniform grid of 12 + log(O/H);
// kernels interpolate it linearly (the calibrations are smooth polynomials: at this spacing the
// interpolation is within 3e-6 dex of them).
struct LineRatioGrid {
  double oxygen_min = kCurtiOxygenMin, oxygen_step = 0.0;
  int n_oxygen = 0;
  std::vector<double> ratio_to_halpha;  // [line][oxygen], kNumEmissionLines rows
};
// Ratios from the relations above (and `table` where given), for every line.
LineRatioGrid make_line_ratio_grid(const EmissionLineParams& params, const LineRatioTable* table);
// The relations themselves at one abundance (clamped to the calibrations' range): luminosity
// over H-alpha's for line `index`, for tests and the grid.
double calibrated_ratio_to_halpha(const EmissionLineParams& params, int index, double oxygen);
// [O II] 3729 / 3726 and [S II] 6716 / 6731 at n_e (Sanders et al. 2016, eq. 7).
double oii_doublet_ratio(double electron_density_cm3);
double sii_doublet_ratio(double electron_density_cm3);

StageEntry emission_lines_stage();
// A line_ratio_file is read with resources.load_line_ratio_table.
std::unique_ptr<Stage> make_emission_lines_stage(const nlohmann::json& params,
                                                 const std::string& path,
                                                 const StageResources& resources);

// What the kernel reads: the gas on one device.
struct GasLineViews {
  const float* velocity_los_kms;
  const float* sfr_msun_per_yr;
  const float* metallicity;
  const float* hydrogen_fraction;  // GFM_Metals H, or nullptr: O/H from the metallicity
  const float* oxygen_fraction;    // GFM_Metals O
  const float* dust_av;            // nullptr without dust
  FootprintView footprint;
  std::size_t n;
};

// Where the gradient kernel adds each cell's gradients (docs/gradients.md): dL/d sfr, dL/d v_los
// (at i x velocity_stride: the z of a 3-component row), and dL/d Z or, where O/H comes from
// GFM_Metals, dL/d X_H and dL/d X_O (at i x metals_stride). Host arrays for a cpu device, a
// device's own sums on a GPU.
struct CellLineGradientViews {
  double* sfr_msun_per_yr;
  double* metallicity;
  double* velocity_los_kms;
  std::size_t velocity_stride;
  double* hydrogen_fraction;  // nullptr: O/H from the metallicity
  double* oxygen_fraction;
  std::size_t metals_stride;
  double* dust_av;  // dL/d gas.dust_av; nullptr without a dust stage
};

// One line as the kernel sees it: where its window of observed bins sits in the partial array.
struct LineWindow {
  double vacuum_angstrom = 0.0;
  double sigma_kms = 0.0;          // the cell's own width: thermal and turbulent
  double profile_sigma_kms = 0.0;  // deposited: with min(templates, instrument) (see above)
  double attenuation_ratio = 0.0;  // A_lambda / A_V at the rest wavelength
  int ratio_row = 0;               // row of LineRatioGrid
  int first_bin = 0, n_bins = 0;   // observed bins [first_bin, first_bin + n_bins)
  int offset = 0;                  // its first column in a spaxel's row of the partial array
};

// Everything the kernel needs besides the gas (trivially copyable: passed by value).
struct LineDeposit {
  LineWindow lines[kNumEmissionLines];
  int n_lines = 0;
  int row_columns;                          // sum of the windows: columns per spaxel
  const double* ratio_to_halpha = nullptr;  // LineRatioGrid::ratio_to_halpha on the device
  double oxygen_min = 0.0, oxygen_step = 0.0;
  int n_oxygen = 0;
  double one_plus_z = 1.0;
  bool to_air = false;  // the telescope measures air wavelengths
  WaveGrid grid;        // the simulated bins (data/wavelength_axis.h)
  // grid.edge(k) for k = 0 .. the simulated bins, on the device: the kernels' edges (a
  // logarithmic grid's edge is a pow, and every line of every cell takes a dozen of them).
  const double* bin_edges = nullptr;
  IFUSIM_HD double edge(int k) const { return bin_edges ? bin_edges[k] : grid.edge(k); }
  double halpha_lsun_per_sfr = 0.0;  // L_sun per Msun/yr
  double birth_cloud_av_mag = 0.0;   // added to gas.dust_av (where the dust stage ran)
  double counts_per_unit = 1.0;      // fixed point of the line sums (L_sun / A)
  double moment_counts_per_unit = 1.0;
  int halpha_line = -1;  // the entry of `lines` that weighs the kinematic moments
};

}  // namespace ifusim

IFUSIM_DECLARE_BACKENDS(
    void accumulate_emission_lines(const Device& device, const ifusim::LineDeposit& deposit,
                                   const ifusim::GasLineViews& gas, Span<std::int64_t> line_sums,
                                   Span<std::int64_t> moment_sums);
    void gather_emission_line_gradients(const Device& device, const ifusim::LineDeposit& deposit,
                                        const ifusim::GasLineViews& gas, const double* g_windows,
                                        const ifusim::CellLineGradientViews& out);)
