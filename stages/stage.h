#pragma once
// The contract every stage keeps (docs/design.md, "Stages"). A run is one loop:
//
//   passes over the particles -> each block deposited by the particle stages -> one reduction
//   (psum) -> the cube stages on the reduced cube -> outputs
//
// - A particle stage (StageKind::particle) may ask for a pass over the stars or the gas first
//   (pass / observe / end_pass: a centre, bounds, kNN lengths, dust screens), then run() on every
//   block of particles: it derives fields of the block (stars.spaxel_index, stars.dust_av) or
//   deposits the block into the partial results it declared on its first block (declare_partial:
//   fixed-point arrays, the spectral histogram, moments). A held galaxy is one block; a streamed
//   galaxy many; a run across processes each process's share of them.
// - The reduction (StageKind::reduction: psum) sums every partial result over the devices and
//   processes, exactly, and lets each make what it stands for (the cube, maps). The run loop
//   does it between the particle and the cube stages whether or not the config lists psum.
// - A cube stage (StageKind::cube) transforms the reduced cube and its maps (flux, psf, lsf,
//   aperture_mask, noise).
//
// A stage describes itself: its registry entry (StageEntry: name, summary, kind, the run-config
// keys its parameters inherit, its quick-looks, whether it crops the margin or may repeat), and
// the stage made from its parameters (what it needs and provides, with units; its memory; its
// margin). Parameters are parsed and validated when the stage is made, before anything runs.
// Stages are listed explicitly in pipeline/registry.cpp, and the runner knows none by name.
#include <any>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/collectives/reductions.h"
#include "data/cotangent.h"
#include "data/datacube.h"
#include "data/galaxy_data.h"
#include "data/mesh.h"
#include "data/telescope.h"
#include "stages/resources.h"

namespace ifusim {

// How far beyond the telescope's field (spaxels, on each side) and band (wavelength pixels, at
// each end) the run simulates, so that the PSF and the LSF can bring in light from just outside;
// a stage that crops the margin (StageEntry::crops_margin) cuts it off again.
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
  // by the pipeline; the stage that crops it sets it back to none.
  CubeMargin margin;
  // The wavelength grid's first pixel centre, margin included.
  double simulated_wave_start_angstrom() const {
    return axes.wavelength_angstrom(-margin.wavelengths);
  }
  // The simulated band's bins (margin included; bin 0 is the first simulated one).
  WaveGrid simulated_grid() const {
    return WaveGrid{simulated_wave_start_angstrom(), axes.wave_step_angstrom, axes.wave_log10_step};
  }
};

// What stages make for later stages besides particle fields and maps: the spaxel grid the stars
// were placed on ("spaxels"), the dust's attenuation curve ("dust_attenuation"), ... Each is
// stored under the name the stage lists in provides() and read, typed, by the stages that list
// it in needs(); a missing product or the wrong type is a logic error naming it (the needs are
// checked against the provides before anything runs).
class Products {
 public:
  template <class T>
  void put(const std::string& name, T value) {
    values_[name] = std::move(value);
  }
  template <class T>
  const T* find(const std::string& name) const {
    const auto it = values_.find(name);
    if (it == values_.end()) return nullptr;
    const T* value = std::any_cast<T>(&it->second);
    if (!value) throw std::logic_error("product \"" + name + "\" is not a " + typeid(T).name());
    return value;
  }
  template <class T>
  const T& get(const std::string& name) const {
    const T* value = find<T>(name);
    if (!value) throw std::logic_error("product \"" + name + "\" has not been made yet");
    return *value;
  }

 private:
  std::map<std::string, std::any> values_;
};

struct RunState;

// A partial result a particle stage declares: device-local sums that only mean something once
// reduced over the mesh, and what the total becomes (the cube, maps, ...). The reduction reduces
// every one in the order they were declared, so the run loop knows nothing of what a stage
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
// A value new_partials_epoch has never returned in this process.
std::uint64_t new_partials_epoch();

struct RunState {
  explicit RunState(const Mesh& run_mesh) : mesh(run_mesh) {}
  const Mesh& mesh;
  GalaxyData data;  // the block of particles held now (all of a held galaxy)
  Observation observation;
  CubeShape spaxels;  // the cube's shape: set by the spaxel stage (n_wave = 0 until spectra)
  Products products;  // what stages made for later stages (Products)
  // Declared by the particle stages, reduced (and emptied) by the reduction.
  std::vector<std::unique_ptr<PartialResult>> partials;
  // Per-spaxel maps made along the way, by name ("velocity_mass_kms", "dispersion_light_kms",
  // ...): they go into the cube's files beside it.
  std::map<std::string, SkyMap> maps;
  std::optional<Cube> cube;  // the reduced cube, after the reduction
  // Names the partials declared since the last reduction (PartialHandle): a value no other
  // RunState and no earlier reduction of this one had, as a state's address may be reused.
  std::uint64_t partials_epoch = new_partials_epoch();

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

// A particle stage's hold on a partial result it declares: the first block of a run's deposit
// declares it, every later block adds to it, and the reduction takes it (after which a new
// deposit declares a new one). The stage keeps the handle as its own state.
template <class P>
class PartialHandle {
 public:
  // The partial declared in `state` since its last reduction, or nullptr.
  P* get(const RunState& state) const {
    return epoch_ == state.partials_epoch ? partial_ : nullptr;
  }
  P& declare(RunState& state, std::unique_ptr<P> partial) {
    partial_ = partial.get();
    epoch_ = state.partials_epoch;
    state.partials.push_back(std::move(partial));
    return *partial_;
  }

 private:
  P* partial_ = nullptr;
  std::uint64_t epoch_ = 0;  // never an epoch's value
};

// The reduction: every partial result of the run reduced over the mesh (and the processes), in
// the order they were declared, then emptied. What the psum stage and the run loop call.
void reduce_partials(RunState& state);

// What a dry run knows before any particle is read (ifusim plan, and the check ifusim run makes
// first): the particle counts, the spaxels and wavelengths, the template grid.
struct PlanContext {
  const Mesh* mesh = nullptr;
  std::size_t n_stars = 0, n_gas = 0;
  std::size_t n_block_stars = 0;  // the stars held at once: n_stars, or a streamed block
  std::size_t n_spaxels = 0;
  int n_wave = 0;
  int n_ssp_nodes = 0;
  // The products the run's stages provide ("stars.dust_av" where a dust stage gives the stars
  // an A_V).
  std::set<std::string> provided;
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

// Something a stage makes: a particle field it derives for every block (Provided::field), a
// product for later stages ("spaxels"), or a stage of the cube ("cube", "cube_flux"), with its
// unit ("" for none) and what it is.
struct Provided {
  std::string name;
  std::string unit;
  std::string what;
  // A particle field: its element type and bytes per particle (for the plan); else 0.
  const char* field_type = nullptr;
  std::size_t field_bytes = 0;

  template <class T>
  static Provided field(const FieldKey<T>& key, std::string what) {
    return {key.full_name(), key.unit, std::move(what), type_name<T>(), sizeof(T)};
  }
  bool is_field() const { return field_bytes > 0; }
};

enum class StageKind {
  particle,   // passes over the particles, then deposits every block
  reduction,  // psum: the barrier between the particle and the cube stages
  cube,       // transforms the reduced cube and maps
};
const char* to_string(StageKind kind);  // "particle", "reduction", "cube"

class Stage {
 public:
  virtual ~Stage() = default;
  virtual std::string name() const = 0;
  // Names of what the stage reads and makes: particle fields ("stars.spaxel_index") and products
  // ("spaxels", "partial_cube", "cube"). A run's stage order is checked against them, and
  // against the field table, before anything runs.
  virtual std::vector<std::string> needs() const = 0;
  virtual std::vector<Provided> provides() const = 0;
  // A particle stage: every block of particles (a held galaxy's one block, a streamed galaxy's
  // blocks: its gas in one block of its own, then its stars). A cube stage: once, on the cube.
  virtual void run(RunState& state) = 0;

  // A particle stage that needs something of all the particles before it can act on any asks
  // for a pass over the stars (orient: their inertia tensor) or over the gas (dust: its
  // screens): the run loop shows it every block of those particles, as the stages before it left
  // the block, then calls end_pass. `input`: what the blocks bring.
  enum class Pass { none, stars, gas };
  virtual Pass pass(const StreamedInput& /*input*/) const { return Pass::none; }
  virtual void observe(RunState& /*block*/) {}
  virtual void end_pass(RunState& /*state*/) {}
  // What the stage holds at its peak, for the plan (nothing by default).
  virtual std::vector<MemoryItem> memory_estimate(const PlanContext&) const { return {}; }
  // How far its kernel reaches beyond the field and the band (none by default): the run
  // simulates the sum over its stages (Observation::margin).
  virtual CubeMargin margin(const Observation&) const { return {}; }

  // Reverse mode (issue 27, docs/gradients.md). A cube stage replaces `cotangent`, dL/d the cube
  // its run() made, with dL/d the cube its run() was given (a linear stage: its transpose);
  // `state` is as the forward run left it. False: the stage has no adjoint, and a gradient
  // through it is refused, naming the stage.
  virtual bool adjoint(const RunState& /*state*/, CubeCotangent& /*cotangent*/) const {
    return false;
  }
  // Forward mode, for the adjoint's checks (tests/test_adjoints.cpp: <A x, y> = <x, A^T y> in
  // double, which the float cube run() makes cannot show): replaces `tangent`, a change of the
  // cube run() was given, with the change of the cube it made, in double, with the operator
  // run() applied (remembered by run()). False: not differentiable.
  virtual bool tangent(const RunState& /*state*/, CubeCotangent& /*tangent*/) const {
    return false;
  }

  // Reverse mode for a particle stage, called back to front after the cube stages' adjoints:
  // `reduced` is dL/d the cube the reduction made (the cube stages' adjoints applied), `state` as
  // the forward run left it (the particles held, rotated where orient ran). A stage that
  // deposits adds dL/d each field it reads to `gradients` (keyed like ParticleGradients, in the
  // frame its run() saw them); a stage that transformed a field (orient) maps the gradients of
  // its output back to its input. False: the stage has no particle adjoint.
  virtual bool particle_adjoint(RunState& /*state*/, const CubeCotangent& /*reduced*/,
                                ParticleGradients& /*gradients*/) {
    return false;
  }
};

// A stage's adjoint (or tangent) check that `cotangent` is shaped as the cube its run() made (or
// was given): a std::logic_error naming the stage and both shapes, and one saying that run() has
// not run where `expected` is empty.
void check_cotangent_shape(const std::string& stage, const CubeShape& expected,
                           const CubeCotangent& cotangent);

// A stage run by hand on a galaxy held at once (tests, benchmarks): its pass over the stars or
// the gas, if it asks for one, then run() (the reduction, for the psum stage).
void run_stage(Stage& stage, RunState& state);

// Reverse mode over particle stages run by hand on a held galaxy (tests, benchmarks), after the
// reduction: each one's particle_adjoint from `reduced`, back to front (the last stage run first).
// `stages` are those to differentiate through, in the order they ran (orient, then
// stellar_spectra); one without a particle adjoint is refused, naming it.
ParticleGradients particle_vjp(const std::vector<Stage*>& stages, RunState& state,
                               const CubeCotangent& reduced);

using StageFactory = std::unique_ptr<Stage> (*)(const nlohmann::json& params,
                                                const std::string& path,
                                                const StageResources& resources);

// The StageFactory of a stage made from its parameters alone: `.make = &from_params<&make_x>`.
template <std::unique_ptr<Stage> (*Make)(const nlohmann::json&, const std::string&)>
std::unique_ptr<Stage> from_params(const nlohmann::json& params, const std::string& path,
                                   const StageResources&) {
  return Make(params, path);
}

// A map the run draws as a quick-look picture: the first of `maps` the run made (each with its
// title), to `file`.
struct QuickLook {
  std::string file;                                       // "halpha_flux.png"
  std::vector<std::pair<std::string, std::string>> maps;  // (map name, title)
  bool diverging = false;  // a diverging colour map symmetric about 0 (velocities)
  bool log_scale = false;  // logarithmic colours (fluxes)
};

// A run-config value a stage's parameter takes when the stage's own parameters do not give it:
// `param` of the stage from `run_key`, a key of the run context the pipeline builds from the
// run config ("galaxy.orientation", "ssp.interpolation", "telescope.psf_fwhm_arcsec").
struct InheritedKey {
  std::string param;
  std::string run_key;
  // Whether the run key acts only through a stage that inherits it (galaxy.ebv_mw, through
  // foreground_dust): a run that gives it a value other than `no_effect` needs such a stage in
  // its pipeline, and a stage that gives its own value for `param` must give the same one (one
  // value, one meaning). The runner checks this for every key so marked, naming none itself.
  bool needs_stage = false;
  nlohmann::json no_effect = nullptr;  // the run key's value that changes nothing (E(B-V) = 0)
};

// A stage's registry entry: everything known of it before it is made.
struct StageEntry {
  std::string name;
  std::string summary;
  StageKind kind = StageKind::particle;
  StageFactory make = nullptr;
  std::vector<InheritedKey> inherits = {};
  std::vector<QuickLook> quicklooks = {};
  bool crops_margin = false;  // cuts the run's margin off the cube (CubeMargin)
  bool repeatable = false;    // may be listed more than once in a run
  // Parameter sets that make the stage, one for each branch of its parameters (a Moffat PSF,
  // kernel smoothing, an optional key given): its parameter schema is recorded from its own
  // parsing of them (stage_parameters, ifusim stages). None: the stage's defaults, {}.
  std::vector<nlohmann::json> examples = {};
};

}  // namespace ifusim
