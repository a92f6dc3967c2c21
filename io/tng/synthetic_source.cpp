#include "io/tng/synthetic_source.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/config_error.h"
#include "data/collectives/reductions.h"
#include "data/fixed_point.h"
#include "io/tng/tng_convert.h"
#include "io/tng/tng_fields.h"
#include "io/tng/tng_writer.h"

namespace ifusim::tng {
namespace {

// One dataset's column of a generated block, in its stored type (float64 Coordinates, float32
// the rest): what the reader reads from the file, as double.
struct Column {
  const double* f64 = nullptr;
  const float* f32 = nullptr;
  double operator[](std::size_t i) const { return f64 ? f64[i] : static_cast<double>(f32[i]); }
};

// A dataset's column, or nothing where the generator does not make it (StellarHsml: the
// smoothing stage then computes kNN lengths, as for a file without it).
std::optional<Column> column(const TngStarRows& r, std::string_view dataset) {
  if (dataset == "Coordinates") return Column{r.coordinates.data(), nullptr};
  if (dataset == "Velocities") return Column{nullptr, r.velocities.data()};
  if (dataset == "GFM_InitialMass") return Column{nullptr, r.initial_masses.data()};
  if (dataset == "Masses") return Column{nullptr, r.masses.data()};
  if (dataset == "GFM_Metallicity") return Column{nullptr, r.metallicity.data()};
  if (dataset == "GFM_StellarFormationTime") return Column{nullptr, r.formation_time.data()};
  return std::nullopt;
}

std::optional<Column> column(const TngGasRows& r, std::string_view dataset) {
  if (dataset == "Coordinates") return Column{r.coordinates.data(), nullptr};
  if (dataset == "Velocities") return Column{nullptr, r.velocities.data()};
  if (dataset == "Masses") return Column{nullptr, r.masses.data()};
  if (dataset == "Density") return Column{nullptr, r.density.data()};
  if (dataset == "InternalEnergy") return Column{nullptr, r.internal_energy.data()};
  if (dataset == "ElectronAbundance") return Column{nullptr, r.electron_abundance.data()};
  if (dataset == "GFM_Metallicity") return Column{nullptr, r.metallicity.data()};
  if (dataset == "GFM_Metals") return Column{nullptr, r.metals.data()};
  if (dataset == "StarFormationRate") return Column{nullptr, r.star_formation_rate.data()};
  return std::nullopt;
}

// A table field and its factor from the stored unit (the data specification's attributes, as
// the generator stores them) to the target unit, at the snapshot's a and h.
struct Field {
  const FieldRule* rule;
  double factor;
};

// The table's fields of one species that the generator makes (Rows: its block type).
template <class Rows>
std::vector<Field> fields_of(Species species, double scale_factor, double hubble_param) {
  std::vector<Field> out;
  for (const auto& r : field_table()) {
    if (r.species != species) continue;
    if (!column(Rows{}, r.dataset)) {
      if (!r.required) continue;
      throw std::logic_error("synthetic source: the generator makes no " +
                             std::string(part_type_group(species)) + "/" + r.dataset +
                             " (tng field table and generator disagree)");
    }
    out.push_back(
        {&r, target_factor(cgs_factor(r.tng_units, scale_factor, hubble_param), r.target_unit_cgs,
                           std::string(part_type_group(species)) + "/" + r.dataset)});
  }
  return out;
}

std::size_t index_of(const std::vector<Field>& fields, std::string_view target) {
  for (std::size_t i = 0; i < fields.size(); ++i)
    if (target == fields[i].rule->target) return i;
  throw std::logic_error("synthetic source: the tng field table has no " + std::string(target));
}

// Every field of one species for the galaxy's rows [first_row, first_row + rows), each device
// generating its share block by block and converting it; on_block(block, outs) then sees the
// converted block (outs[f]: field f, row-major).
template <class Rows, class Generate, class OnBlock>
std::vector<ShardedArray<float>> make_fields(const Mesh& mesh, std::size_t first_row,
                                             std::size_t rows, std::size_t block_rows,
                                             const std::vector<Field>& fields,
                                             const ConversionFrame& frame, Generate&& generate,
                                             OnBlock&& on_block) {
  std::vector<int> components;
  for (const auto& f : fields) components.push_back(f.rule->components);
  return from_callback_blocked<float>(
      mesh, rows, components, block_rows, [&](IndexRange block, const std::vector<float*>& outs) {
        Rows generated;
        generate(first_row + block.begin, first_row + block.end, generated);
        for (std::size_t f = 0; f < fields.size(); ++f) {
          const Column in = *column(generated, fields[f].rule->dataset);
          const int k = fields[f].rule->components;
          const Conversion conversion = fields[f].rule->conversion;
          const double factor = fields[f].factor;
          float* out = outs[f];
          const auto count = static_cast<std::int64_t>(block.size());
#pragma omp parallel for schedule(static)
          for (std::int64_t i = 0; i < count; ++i)
            for (int c = 0; c < k; ++c) {
              const std::size_t j = static_cast<std::size_t>(i * k + c);
              out[j] = static_cast<float>(convert_value(conversion, factor, in[j], c, frame));
            }
        }
        on_block(block, outs);
      });
}

}  // namespace

// The generator and what converting its stars needs, shared by the galaxy made at once and the
// streamed one.
struct SyntheticStars {
  SyntheticGalaxySpec spec;
  SyntheticGalaxyGenerator generator;
  Galaxy record;  // its half-mass radius still 0
  ConversionFrame frame;
  std::vector<Field> fields;
  std::size_t position = 0, mass = 0;  // indices into fields
  double counts_per_msun = 0.0;        // of the half-mass radius bins

  explicit SyntheticStars(const SyntheticGalaxySpec& s) : spec(s), generator(spec) {
    if (spec.n_stars < 1)
      throw ConfigError("synthetic galaxy: n_stars: expected at least one star particle");
    if (spec.wind_fraction != 0)
      throw ConfigError(
          "synthetic galaxy: wind_fraction: expected 0 for the in-memory source (every "
          "PartType4 row a star)");
    Galaxy& g = record;
    g.simulation = spec.simulation_name;
    g.snapshot = spec.snapshot;
    g.subhalo_id = spec.subhalo_id;
    g.redshift = spec.redshift;
    g.scale_factor = spec.scale_factor();
    g.cosmology = spec.cosmology;
    g.cosmology.name = spec.simulation_name.empty() ? "synthetic galaxy" : spec.simulation_name;
    frame.center_code = spec.center_ckpc_h;
    frame.box_size = spec.box_size_ckpc_h;
    frame.bulk_velocity_kms = spec.bulk_velocity_kms;
    frame.cosmology = g.cosmology;
    frame.time_snapshot_gyr = g.cosmology.cosmic_time_gyr(g.scale_factor);
    fields = fields_of<TngStarRows>(Species::stars, g.scale_factor, g.cosmology.hubble_param);
    position = index_of(fields, "position_kpc");
    mass = index_of(fields, "mass_msun");
    for (int c = 0; c < 3; ++c) g.center_kpc[c] = spec.center_ckpc_h[c] * fields[position].factor;
    // Half-mass radius: current stellar mass per radius bin around the true centre, in fixed
    // point. The scale needs a bound on the total that does not depend on the split: a star's
    // mass is (0.75 to 1.25) x (1 - returned fraction, at most 0.5) x the mass unit, which is
    // set so that the mean star gives stellar_mass_msun in all, hence the total is below
    // 1.25 / 0.375 < 4 times stellar_mass_msun.
    counts_per_msun = FixedPointScale::for_bound(
                          4.0 * spec.stellar_mass_msun,
                          "synthetic galaxy: the half-mass radius bins (stellar_mass_msun)")
                          .counts_per_unit;
  }

  // Stars [first, first + n) sharded over the mesh; their current mass is added to the radius
  // bins where `radius_bins` is given.
  Stars make(const Mesh& mesh, std::size_t first, std::size_t n,
             std::vector<std::int64_t>* radius_bins) const {
    std::mutex bins_mutex;
    auto arrays = make_fields<TngStarRows>(
        mesh, first, n, spec.block_rows, fields, frame,
        [&](std::size_t b, std::size_t e, TngStarRows& rows) { generator.star_rows(b, e, rows); },
        [&](IndexRange block, const std::vector<float*>& outs) {
          if (!radius_bins) return;
          std::vector<std::int64_t> local(kRadiusBins, 0);
          for (std::size_t i = 0; i < block.size(); ++i) {
            const float* x = outs[position] + 3 * i;
            const double r =
                std::sqrt(static_cast<double>(x[0]) * x[0] + static_cast<double>(x[1]) * x[1] +
                          static_cast<double>(x[2]) * x[2]);
            local[static_cast<std::size_t>(radius_bin(r))] +=
                to_fixed(static_cast<double>(outs[mass][i]), counts_per_msun);
          }
          const std::lock_guard lock(bins_mutex);  // integer sums: the order does not matter
          for (std::size_t bin = 0; bin < local.size(); ++bin) (*radius_bins)[bin] += local[bin];
        });
    GalaxyData out;
    for (std::size_t f = 0; f < fields.size(); ++f)
      assign_field(out.stars, *fields[f].rule, std::move(arrays[f]));
    return std::move(out.stars);
  }

  // All spec.n_gas gas cells, sharded over the mesh.
  Gas make_gas(const Mesh& mesh) const {
    Gas gas;
    if (spec.n_gas == 0) return gas;
    const auto gas_fields =
        fields_of<TngGasRows>(Species::gas, record.scale_factor, record.cosmology.hubble_param);
    auto arrays = make_fields<TngGasRows>(
        mesh, 0, spec.n_gas, spec.block_rows, gas_fields, frame,
        [&](std::size_t b, std::size_t e, TngGasRows& rows) { generator.gas_rows(b, e, rows); },
        [](IndexRange, const std::vector<float*>&) {});
    for (std::size_t f = 0; f < gas_fields.size(); ++f)
      assign_field(gas, *gas_fields[f].rule, std::move(arrays[f]));
    gas.temperature_k = gas_temperature(mesh, gas);
    return gas;
  }

  double half_mass_radius_kpc(const std::vector<std::int64_t>& radius_bins) const {
    std::vector<double> bins(radius_bins.size());
    for (std::size_t bin = 0; bin < bins.size(); ++bin)
      bins[bin] = static_cast<double>(radius_bins[bin]) / counts_per_msun;
    return tng::half_mass_radius_kpc(bins);
  }
};

GalaxyData make_synthetic_galaxy(const Mesh& mesh, const SyntheticGalaxySpec& spec, bool with_gas) {
  const SyntheticStars stars(spec);  // validates the spec
  GalaxyData data;
  data.galaxy = stars.record;
  std::vector<std::int64_t> radius_bins(kRadiusBins, 0);
  data.stars = stars.make(mesh, 0, spec.n_stars, &radius_bins);
  data.galaxy.halfmass_radius_stars_kpc = stars.half_mass_radius_kpc(radius_bins);

  if (with_gas) data.gas = stars.make_gas(mesh);
  return data;
}

struct SyntheticStarStream::Impl : SyntheticStars {
  using SyntheticStars::SyntheticStars;
};

SyntheticStarStream::SyntheticStarStream(const SyntheticGalaxySpec& spec)
    : impl_(std::make_unique<Impl>(spec)) {}
SyntheticStarStream::~SyntheticStarStream() = default;

std::size_t SyntheticStarStream::n_rows() const {
  return impl_->spec.n_stars;
}

GalaxyData SyntheticStarStream::first_pass(const Mesh& mesh, std::size_t block_rows) const {
  GalaxyData data;
  data.galaxy = impl_->record;
  std::vector<std::int64_t> radius_bins(kRadiusBins, 0);
  StarBounds bounds;
  for_each_own_block(mesh, block_rows, [&](std::size_t first, std::size_t n) {
    bounds.merge(measure_star_bounds(mesh, impl_->make(mesh, first, n, &radius_bins)));
  });
  sum_over_processes(mesh, radius_bins);  // integers: exact
  data.galaxy.halfmass_radius_stars_kpc = impl_->half_mass_radius_kpc(radius_bins);
  data.star_bounds = merge_over_processes(mesh, bounds);
  return data;
}

Stars SyntheticStarStream::read(const Mesh& mesh, std::size_t first_row, std::size_t n_rows) const {
  return impl_->make(mesh, first_row, n_rows, nullptr);
}

Gas SyntheticStarStream::read_gas(const Mesh& mesh) const {
  return impl_->make_gas(mesh);
}

}  // namespace ifusim::tng
