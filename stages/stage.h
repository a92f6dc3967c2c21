#pragma once
// The contract every stage keeps: parameters parsed and validated from JSON when the stage is
// made (nothing runs until every stage of a run is made), then run() on the run's state, using
// shard_map for per-device work. Stages are listed explicitly in pipeline/registry.cpp.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "data/collectives/reductions.h"
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
  // Who declared it (the stage) and what it is ("mass moments"): a streamed run gives a stage its
  // stars block by block, and each block adds to the partials the first one declared
  // (find_partial).
  const void* owner = nullptr;
  std::string name;
};

// The common case: one fixed-point array (data/fixed_point.h) and what to do with its total.
class PartialArray final : public PartialResult {
 public:
  using OnTotal = std::function<void(RunState& state, std::vector<double> total)>;
  PartialArray(ShardedArray<std::int64_t> sums, FixedPointScale scale, OnTotal on_total)
      : sums_(std::move(sums)), scale_(scale), on_total_(std::move(on_total)) {}
  void reduce(RunState& state) override;
  ShardedArray<std::int64_t>& sums() { return sums_; }
  const FixedPointScale& scale() const { return scale_; }

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
  // Set with it: no star's A_V exceeds this (the deepest screen), in any block of the stars.
  double dust_av_bound_mag = 0.0;

  // Bounds over all the galaxy's stars (GalaxyData::star_bounds): set by the pipeline before
  // the first stage; measured on the stars held now where a test runs stages by hand.
  const StarBounds& star_bounds() {
    if (!data.star_bounds) data.star_bounds = measure_star_bounds(mesh, data.stars);
    return *data.star_bounds;
  }
  // Whether the stars held are a block of a streamed galaxy, not all of it.
  bool stars_are_a_block() const {
    return data.star_bounds && data.stars.count() < data.star_bounds->count;
  }
};

// The partial `name` that `owner` declared in this run and psum has not reduced yet, or nullptr.
template <class P>
P* find_partial(const RunState& state, const void* owner, const std::string& name) {
  for (const auto& p : state.partials)
    if (p->owner == owner && p->name == name) return dynamic_cast<P*>(p.get());
  return nullptr;
}

// Declares a partial of `owner`, named `name`, and returns it.
template <class P>
P& declare_partial(RunState& state, const void* owner, std::string name, std::unique_ptr<P> p) {
  p->owner = owner;
  p->name = std::move(name);
  P& out = *p;
  state.partials.push_back(std::move(p));
  return out;
}

// What a dry run knows before any particle is read (ifusim plan, and the check ifusim run makes
// first): the particle counts, the spaxels and wavelengths, the template grid.
struct PlanContext {
  const Mesh* mesh = nullptr;
  std::size_t n_stars = 0, n_gas = 0;
  std::size_t n_block_stars = 0;  // the stars held at once: n_stars, or a streamed block
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

// What the blocks of a streamed galaxy (or the stars a run holds) bring beyond the fields every
// source gives: the optional Stars fields of the input ("smoothing_length_kpc": a TNG file's
// StellarHsml).
struct StreamedInput {
  std::set<std::string> optional_star_fields;
  // Those the stars held have for every star.
  static StreamedInput of(const Stars& stars) {
    StreamedInput input;
    if (stars.count() > 0 && stars.smoothing_length_kpc.rows() == stars.count())
      input.optional_star_fields.insert("smoothing_length_kpc");
    return input;
  }
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

  // Streaming (input.stream_block_stars, docs/streaming.md): the galaxy's stars come in blocks
  // and never all at once; its gas comes in one block of its own, before them. The stages
  // before the first that does not stream run on every block; the rest run once, after. A stage
  // that streams acts on each particle on its own, given the tables of the run and what its
  // passes found, and adds each block to the partials its first block declared (find_partial).
  // `input`: what the blocks bring.
  virtual bool streams(const StreamedInput& /*input*/) const { return false; }
  virtual std::string why_not_streamed() const { return "it works on the whole galaxy"; }
  // A stage that needs something of all the particles before it can act on any asks for a
  // pass over the stars (orient: their inertia tensor) or over the gas (dust: its screens): the
  // pipeline shows it every block of those particles, as the stages before it left the block,
  // then calls end_pass. A run that holds the galaxy makes the same calls once, with all of it,
  // just before run(). A streamed run holds the gas (one block, on process 0) and streams the
  // stars.
  // `input`: what the blocks bring (the stars held, for a run that holds them).
  enum class Pass { none, stars, gas };
  virtual Pass pass(const StreamedInput& /*input*/) const { return Pass::none; }
  virtual void observe(RunState& /*block*/) {}
  virtual void end_pass(RunState& /*state*/) {}
  // What the stage holds at its peak, for the plan (nothing by default).
  virtual std::vector<MemoryItem> memory_estimate(const PlanContext&) const { return {}; }
  // How far its kernel reaches beyond the field and the band (none by default): the run
  // simulates the sum over its stages (Observation::margin).
  virtual CubeMargin margin(const Observation&) const { return {}; }
};

// What the pipeline does with a stage of a run that holds all its galaxy: the stage's pass over
// the stars, if it needs one, then run().
inline void run_stage(Stage& stage, RunState& state) {
  if (stage.pass(StreamedInput::of(state.data.stars)) != Stage::Pass::none) {
    state.star_bounds();
    stage.observe(state);
    stage.end_pass(state);
  }
  stage.run(state);
}

}  // namespace ifusim
