#pragma once
// Datacubes. Voxels are stored spaxel-major: element (spaxel, k) at spaxel * n_wave + k, with
// spaxel = iy * nx + ix, so that one star's spectrum lands in contiguous memory.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/fixed_point.h"
#include "data/sharded_array.h"
#include "data/wavelength_axis.h"

namespace ifusim {

struct CubeShape {
  int nx = 0;
  int ny = 0;
  int n_wave = 0;
  std::size_t n_spaxels() const { return static_cast<std::size_t>(nx) * ny; }
  std::size_t n_voxels() const { return n_spaxels() * static_cast<std::size_t>(n_wave); }
  bool operator==(const CubeShape&) const = default;
};
// "nx x ny x n_wave", for messages.
inline std::string to_string(const CubeShape& s) {
  return std::to_string(s.nx) + " x " + std::to_string(s.ny) + " x " + std::to_string(s.n_wave);
}

// Per-device partial sums in 64-bit fixed point (see fixed_point.h), Partial(particles) until
// psum reduces them and leaves every device the same, replicated total.
struct PartialCube {
  CubeShape shape;
  FixedPointScale scale;
  ShardedArray<std::int64_t> sums;  // rows = n_voxels, one component
};

// Where a cube's pixels lie: on the sky (a tangent-plane grid of square spaxels centred on the
// reference position) and in wavelength (a linear or logarithmic grid in the observed frame,
// data/wavelength_axis.h).
struct CubeAxes {
  double spaxel_arcsec = 0.0;
  double wave_start_angstrom = 0.0;       // centre of the first wavelength pixel
  double wave_step_angstrom = 0.0;        // linear grids; 0 on a logarithmic one
  double wave_log10_step = 0.0;           // > 0: a logarithmic grid, dlog10(lambda) per pixel
  std::string wavelength_medium = "air";  // FITS AWAV for air, WAVE for vacuum
  double ra_deg = 0.0;                    // sky position of the cube's centre
  double dec_deg = 0.0;
  bool is_log() const { return wave_log10_step > 0.0; }
  // Centre of pixel k (k < 0 or beyond the band: the run's margin).
  double wavelength_angstrom(int k) const {
    return is_log() ? log_grid_centre(wave_start_angstrom, wave_log10_step, k)
                    : wave_start_angstrom + k * wave_step_angstrom;
  }
  // Lower edge of pixel k (its upper edge is edge_angstrom(k + 1)), see wavelength_axis.h.
  double edge_angstrom(int k) const {
    return is_log() ? log_grid_edge(wave_start_angstrom, wave_log10_step, k)
                    : wave_start_angstrom - 0.5 * wave_step_angstrom + k * wave_step_angstrom;
  }
  // Width of pixel k in Angstrom: the step of a linear grid.
  double width_angstrom(int k) const {
    return is_log() ? edge_angstrom(k + 1) - edge_angstrom(k) : wave_step_angstrom;
  }
};

// An image of the cube's field: one value per spaxel (ny * nx, spaxel order iy * nx + ix), NaN
// where undefined (no light, outside the aperture). Written beside the cube as a named 2-D image
// extension and an HDF5 dataset under /maps.
struct SkyMap {
  std::string unit;  // BUNIT, e.g. "km/s"
  std::string description;
  std::vector<double> values;
};

// The correlation matrix of the noise of a cube's spaxels at one wavelength plane, in coordinate
// form: the upper triangle (i <= j, spaxel order iy * nx + ix), the diagonal's ones included,
// only the non-zero elements. This is how MaNGA's DRP stores the spatial correlation of its
// cubes (the GCORREL, RCORREL, ICORREL, ZCORREL extensions: columns INDXI_C1, INDXI_C2,
// INDXJ_C1, INDXJ_C2, RHOIJ, keywords BBWAVE, BBINDEX; Law et al. 2016, AJ 152, 83, sec. 9.3;
// Westfall et al. 2019, AJ 158, 231, sec. 6): C1 is the x (first FITS axis) index, C2 the y one.
struct SpatialCorrelation {
  double wavelength_angstrom = 0.0;  // BBWAVE: the band's wavelength
  int plane = 0;                     // BBINDEX: the wavelength plane it was computed at
  std::vector<int> i_x, i_y, j_x, j_y;
  std::vector<double> rho;
};

// The reduced cube on the host. Its voxels are float32, what the FITS and HDF5 files hold: on
// MUSE-WFM (3.3e8 voxels) a double cube and variance were 5.4 GB, the run's peak, and the stages
// after psum (psf, lsf, noise, writing) are bound by the bytes they move over them (issue 22,
// docs/benchmarks.md). Sums stay in double where they are made (psum's fixed point, the binned
// product's rows, the convolutions' taps, the noise model) and are rounded once, as they land.
struct Cube {
  CubeShape shape;
  CubeAxes axes;
  // Key / value pairs written into file headers: the run's config, version, snapshot, ...
  std::vector<std::pair<std::string, std::string>> provenance;
  std::vector<float> data;           // n_voxels, spaxel-major
  std::vector<float> variance;       // empty until a noise stage fills it
  std::string unit;                  // BUNIT, e.g. "Msun" or "10**(-20)*erg/(s*cm**2*Angstrom)"
  std::string fits_layout = "muse";  // Telescope::fits_layout
  // The instrument's LSF FWHM (Angstrom) at each plane's centre, n_wave values or none: the
  // "manga" layout writes it as PRESPECRES (lambda / FWHM) and, with the pixel added, SPECRES.
  std::vector<double> lsf_fwhm_angstrom;
  // By name (lower case, the HDF5 dataset's; the FITS EXTNAME is its upper case):
  // "white_light", "velocity_light_kms", ...
  std::map<std::string, SkyMap> maps;
  // By FITS EXTNAME ("GCORREL", ...): written as binary tables (fibre-fed IFUs, stages/fibres).
  std::map<std::string, SpatialCorrelation> correlations;
  float at(int ix, int iy, int k) const {
    return data[(static_cast<std::size_t>(iy) * shape.nx + ix) * shape.n_wave + k];
  }
};

// The mean over the band of each spaxel's values (the white-light image, in the cube's unit):
// ny * nx values, y outer; NaN for a spaxel outside the aperture (aperture_mask's NaN). Each
// spaxel's values are summed in kSpaxelMeanParts interleaved partial sums (k mod parts), added in
// order at the end: one sum's chain of dependent additions made MUSE-WFM's image (3.3e8 voxels)
// take 0.5 s on one thread, bound by the adder's latency. On all threads; the values do not
// depend on their number.
inline constexpr std::size_t kSpaxelMeanParts = 8;
std::vector<double> spaxel_means(const Cube& cube);

}  // namespace ifusim
