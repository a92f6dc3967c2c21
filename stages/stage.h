#pragma once
// The contract every stage keeps: parameters parsed and validated from JSON when the stage is
// made (nothing runs until every stage of a run is made), then run() on the run's state, using
// shard_map for per-device work. Stages are listed explicitly in pipeline/registry.cpp.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/datacube.h"
#include "data/galaxy_data.h"
#include "data/mesh.h"
#include "data/telescope.h"
#include "stages/dust/dust_curves.h"
#include "stages/spaxel_grid/grid.h"

namespace ifusim {

// How far beyond the telescope's field (spaxels, on each side) and band (wavelength pixels, at
// each end) the run simulates, so that the PSF and the LSF can bring in light from just outside;
// aperture_mask crops it.
struct CubeMargin {
  int spaxels = 0;
  int wavelengths = 0;
};

// How the galaxy is observed: set up by the pipeline from the run config before any stage runs.
struct Observation {
  double redshift = 0.0;  // the galaxy's observed (cosmological) redshift
  Cosmology cosmology;
  double luminosity_distance_mpc = 0.0;
  double kpc_per_arcsec = 0.0;  // proper kpc per arcsec at `redshift`
  Telescope telescope;
  CubeAxes axes;  // spaxel size, observed wavelength grid, sky position
  ResolutionCurve telescope_lsf_fwhm_angstrom;  // the instrument's line-spread function (observed)
  ResolutionCurve template_fwhm_angstrom;       // the SSP library's own resolution (rest frame)
  std::uint64_t seed = 0;                       // for anything random (noise)
  // What the run simulates beyond the field and the band: the sum of the stages' margin(), set
  // by the pipeline; aperture_mask crops it and sets it back to none.
  CubeMargin margin;
  // The wavelength grid's first pixel centre, margin included.
  double simulated_wave_start_angstrom() const {
    return axes.wavelength_angstrom(-margin.wavelengths);
  }
};

struct RunState;

// A partial result a stage leaves for the psum stage: device-local sums that only mean something
// once reduced over the mesh, and what the total becomes (the cube, maps, ...). The psum stage
// reduces every one in the order they were declared, so the runner knows nothing of what a stage
// accumulates.
class PartialResult {
 public:
  virtual ~PartialResult() = default;
  virtual void reduce(RunState& state) = 0;
};

// The common case: one fixed-point array (data/fixed_point.h) and what to do with its total.
class PartialArray final : public PartialResult {
 public:
  using OnTotal = std::function<void(RunState& state, std::vector<double> total)>;
  PartialArray(ShardedArray<std::int64_t> sums, FixedPointScale scale, OnTotal on_total)
      : sums_(std::move(sums)), scale_(scale), on_total_(std::move(on_total)) {}
  void reduce(RunState& state) override;

 private:
  ShardedArray<std::int64_t> sums_;
  FixedPointScale scale_;
  OnTotal on_total_;
};

// What a run carries from stage to stage.
//
// Units through the run: the partial cube and, after psum, the cube hold luminosity density
// per observed-frame Angstrom (L_sun / A): each star's rest-frame spectrum is redshifted and
// resampled conserving its energy, so the (1 + z)(1 + v/c) stretch is already applied. The flux
// stage divides by 4 pi D_L^2 to give erg / s / cm^2 / A.
struct RunState {
  explicit RunState(const Mesh& run_mesh) : mesh(run_mesh) {}
  const Mesh& mesh;
  GalaxyData data;
  Observation observation;
  CubeShape spaxels;       // set by the spaxel stage (n_wave = 0 until spectra)
  SpaxelGrid spaxel_grid;  // the grid behind `spaxels` (set with it)
  // Declared by the stages that accumulate per device, reduced (and emptied) by psum.
  std::vector<std::unique_ptr<PartialResult>> partials;
  // Per-spaxel maps made along the way, by name ("velocity_mass_kms", "dispersion_light_kms",
  // ...): they go into the cube's files beside it.
  std::map<std::string, SkyMap> maps;
  std::optional<Cube> cube;  // the reduced cube, after psum
  DustCurve dust_curve;      // set by the dust stage with stars.dust_av
};

// What a dry run knows before any particle is read (ifusim plan, and the check ifusim run makes
// first): the particle counts, the spaxels and wavelengths, the template grid.
struct PlanContext {
  const Mesh* mesh = nullptr;
  std::size_t n_stars = 0, n_gas = 0;
  std::size_t n_spaxels = 0;
  int n_wave = 0;
  int n_ssp_nodes = 0;
  bool dust = false;        // a dust stage gives the stars an A_V
  Observation observation;  // without the galaxy's cosmology (distances and scales are 0)
  std::size_t n_voxels() const { return n_spaxels * static_cast<std::size_t>(n_wave); }
};

// One thing a stage holds at its peak: bytes in every device memory space (each GPU; the host
// for cpu devices), or in host memory once (the reduced cube and what works on it). `setting`
// names the config key that makes it smaller, if one does.
struct MemoryItem {
  std::string what;
  std::size_t bytes = 0;
  bool per_memory_space = true;
  std::string setting;
};

class Stage {
 public:
  virtual ~Stage() = default;
  virtual std::string name() const = 0;
  // Names of what the stage reads and writes ("stars.spaxel_index", "partial_cube", "cube"),
  // so that a run's stage order is checked before anything runs.
  virtual std::vector<std::string> needs() const = 0;
  virtual std::vector<std::string> provides() const = 0;
  virtual void run(RunState& state) const = 0;
  // What the stage holds at its peak, for the plan (nothing by default).
  virtual std::vector<MemoryItem> memory_estimate(const PlanContext&) const { return {}; }
  // How far its kernel reaches beyond the field and the band (none by default): the run
  // simulates the sum over its stages (Observation::margin).
  virtual CubeMargin margin(const Observation&) const { return {}; }
};

}  // namespace ifusim
