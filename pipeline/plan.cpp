#include "pipeline/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "data/runtime.h"
#include "data/sharded_array.h"
#include "io/rubix/rubix_galaxy.h"
#include "io/tng/tng_reader.h"
#include "pipeline/particle_source.h"

namespace ifusim {
namespace {

struct Counts {
  std::size_t stars = 0, gas = 0;
  std::string note;  // how they were counted
};

// From the input's metadata only: dataset shapes, the group catalog, a synthetic spec.
Counts count_particles(const RunConfig& c, bool read_gas) {
  Counts n;
  if (c.galaxy) {
    n.stars = c.galaxy->n_stars();
    n.gas = read_gas ? c.galaxy->n_gas() : 0;
    n.note = "the galaxy given (" + c.galaxy->source + ")";
  } else if (c.synthetic) {
    n.stars = c.synthetic->n_stars;
    n.gas = read_gas ? c.synthetic->n_gas : 0;
    n.note = "input.synthetic";
  } else if (c.input_is_rubix()) {
    const auto counts = count_rubix_galaxy(c.input_file);
    n.stars = counts[0];
    n.gas = read_gas ? counts[1] : 0;
    n.note = "RUBIX dataset shapes";
  } else {
    const TngCounts counts = count_tng(snapshot_read_options(c, read_gas));
    n.stars = counts.star_rows;
    n.gas = counts.gas_rows;
    n.note = "PartType4 rows, wind cells included (they are dropped when read)";
  }
  return n;
}

std::string gb(double bytes) {
  char text[32];
  if (bytes < 1e9)
    std::snprintf(text, sizeof text, "%.3f MB", bytes / 1e6);
  else
    std::snprintf(text, sizeof text, "%.3f GB", bytes / 1e9);
  return text;
}

// The fields a particle set would hold, their sharding text, and the bytes one row takes: its
// input fields (declared once in data/galaxy_data.h), then those the run's stages derive
// (`derived`: their Provided::field entries).
template <class Set>
std::size_t describe_fields(std::ostream& out, const std::string& set_name, std::size_t rows,
                            const Mesh& mesh, const std::vector<Provided>& derived) {
  std::vector<ShardLayout> layout;
  const auto ranges = split_evenly(rows, mesh.size());
  for (std::size_t d = 0; d < mesh.size(); ++d) {
    const std::string& desc = mesh.device(d).description;
    layout.push_back({desc.substr(0, desc.find(' ')), ranges[d], 0});
  }
  std::size_t row_bytes = 0;
  Set set;
  Set::for_each_field(set, [&](const FieldSpec& f, const auto& field) {
    using T = typename std::decay_t<decltype(field)>::value_type;
    const std::string name(f.name);
    row_bytes += sizeof(T) * static_cast<std::size_t>(f.components);
    out << describe_sharding(set_name + "." + name, type_name<T>(), rows, f.components,
                             Sharding::sharded(), layout);
  });
  for (const Provided& p : derived) {
    if (p.name.rfind(set_name + ".", 0) != 0) continue;
    row_bytes += p.field_bytes;
    out << describe_sharding(p.name, p.field_type, rows, 1, Sharding::sharded(), layout);
  }
  return row_bytes;
}

}  // namespace

Observation observation_of(const RunConfig& c, const SspGrid& ssp) {
  Observation o;
  o.redshift = c.redshift;
  o.cosmology = c.cosmology;
  o.telescope = c.telescope;
  o.axes.spaxel_arcsec = c.telescope.spaxel_arcsec;
  o.axes.wave_start_angstrom = c.telescope.wave_start_angstrom;
  o.axes.wave_step_angstrom = c.telescope.wave_step_angstrom;
  o.axes.wave_log10_step = c.telescope.wave_log10_step;
  o.axes.wavelength_medium = c.telescope.wavelength_medium;
  o.axes.ra_deg = c.ra_deg;
  o.axes.dec_deg = c.dec_deg;
  o.telescope_lsf_fwhm_angstrom = c.telescope.lsf_fwhm_angstrom;
  o.template_fwhm_angstrom = ssp.resolution_fwhm_angstrom;
  o.seed = c.seed;
  return o;
}

CubeMargin run_margin(const std::vector<const Stage*>& stages, const Observation& obs) {
  CubeMargin total;
  for (const auto& stage : stages) {
    const CubeMargin m = stage->margin(obs);
    total.spaxels += m.spaxels;
    total.wavelengths += m.wavelengths;
  }
  return total;
}

RunPlan plan_run(const RunConfig& c, const Mesh& mesh, const std::vector<const Stage*>& stages,
                 const SspGrid& ssp, bool read_gas, const CubeMargin& margin) {
  RunPlan plan;
  std::ostringstream out;
  const Counts n = count_particles(c, read_gas);

  PlanContext ctx;
  ctx.mesh = &mesh;
  ctx.n_stars = n.stars;
  ctx.n_block_stars = c.stream_block_stars > 0 ? std::min(c.stream_block_stars, n.stars) : n.stars;
  ctx.n_gas = n.gas;
  const std::size_t side =
      static_cast<std::size_t>(c.telescope.n_spaxels_side() + 2 * margin.spaxels);
  ctx.n_spaxels = side * side;
  ctx.n_wave = c.telescope.n_wave() + 2 * margin.wavelengths;
  ctx.n_ssp_nodes = static_cast<int>(ssp.n_age() * ssp.n_metallicity());
  std::vector<Provided> derived_fields;
  for (const Stage* s : stages)
    for (const auto& p : s->provides()) {
      ctx.provided.insert(p.name);
      if (p.is_field()) derived_fields.push_back(p);
    }
  ctx.observation = observation_of(c, ssp);
  ctx.observation.margin = margin;

  out << mesh.describe();
  out << "stars " << n.stars << ", gas cells " << n.gas << " (" << n.note << ")\n";
  if (c.stream_block_stars > 0)
    out << "streamed: blocks of " << ctx.n_block_stars << " stars ("
        << (n.stars + ctx.n_block_stars - 1) / std::max<std::size_t>(ctx.n_block_stars, 1)
        << " blocks); the devices hold one block at a time\n";
  out << "telescope " << c.telescope.name << ": " << c.telescope.n_spaxels_side() << " x "
      << c.telescope.n_spaxels_side() << " spaxels x " << c.telescope.n_wave()
      << " wavelengths; simulated with a margin of " << margin.spaxels << " spaxels and "
      << margin.wavelengths << " wavelengths for the PSF and LSF (" << side << " x " << side
      << " x " << ctx.n_wave << ")\n\n";

  // 1. Sharding of every field, and the replicated tables.
  out << "particle fields (Sharded over \"" << mesh.axis_name() << "\"):\n";
  const std::size_t star_row_bytes =
      describe_fields<Stars>(out, "stars", n.stars, mesh, derived_fields);
  const std::size_t gas_row_bytes =
      n.gas > 0 ? describe_fields<Gas>(out, "gas", n.gas, mesh, derived_fields) : 0;
  out << "replicated tables:\n";
  std::vector<ShardLayout> replicas;
  for (std::size_t d = 0; d < mesh.size(); ++d) {
    const std::string& desc = mesh.device(d).description;
    replicas.push_back({desc.substr(0, desc.find(' ')), IndexRange{0, 0}, static_cast<int>(d)});
  }
  const std::size_t template_rows = static_cast<std::size_t>(ctx.n_ssp_nodes);
  for (auto& r : replicas) r.range = IndexRange{0, template_rows};
  out << describe_sharding("ssp.cumulative_energy", "float64", template_rows,
                           static_cast<int>(ssp.n_wave() + 1), Sharding::replicated(), replicas);
  out << "\n";

  // 2. Particles per device.
  const auto star_ranges = split_evenly(n.stars, mesh.size());
  const auto held_star_ranges = split_evenly(ctx.n_block_stars, mesh.size());
  const std::size_t idle = static_cast<std::size_t>(
      std::count_if(star_ranges.begin(), star_ranges.end(), [](auto r) { return r.empty(); }));
  out << "stars per device: " << n.stars / mesh.size() << " each, the first "
      << n.stars % mesh.size() << " one more; " << idle << " idle device(s)\n\n";

  // 3. Memory, per memory space (partial arrays are held once per space) and on the host.
  std::vector<MemoryItem> items;
  for (const auto& s : stages)
    for (auto& item : s->memory_estimate(ctx)) {
      item.what = s->name() + ": " + item.what;
      items.push_back(std::move(item));
    }
  const auto gas_ranges = split_evenly(n.gas, mesh.size());
  const double limit = c.memory_limit_gb ? *c.memory_limit_gb * 1e9 : 0.0;
  const std::string limit_key = "devices.memory_limit_gb";
  const bool host_backend = mesh.backend() == Backend::cpu;
  auto check = [&](const std::string& space, double bytes, double available,
                   const std::vector<const MemoryItem*>& parts) {
    out << "  total " << gb(bytes) << " of " << gb(available)
        << (limit > 0 ? " (" + limit_key + ")" : " available") << "\n";
    if (bytes <= available) return;
    const MemoryItem* largest = nullptr;
    for (const MemoryItem* p : parts)
      if (!largest || p->bytes > largest->bytes) largest = p;
    std::vector<std::string> hints;
    if (largest && !largest->setting.empty()) hints.push_back(largest->setting);
    if (!host_backend) hints.push_back("more GPUs to spread the particles");
    if (limit > 0) hints.push_back("a larger " + limit_key);
    std::string hint;
    for (const auto& h : hints) hint += (hint.empty() ? "" : ", or ") + h;
    if (hint.empty()) hint = "a smaller galaxy or field";
    plan.problems.push_back(space + " needs " + gb(bytes) + " but has " + gb(available) + " (" +
                            gb(bytes - available) + " too much); the largest part is " +
                            (largest ? largest->what + " (" + gb(largest->bytes) + ")" : "?") +
                            ": reduce it with " + hint);
  };
  double host_bytes = 0;
  std::vector<const MemoryItem*> host_parts;
  std::vector<MemoryItem> particle_items;
  particle_items.reserve(mesh.size());
  for (const Device* owner : mesh.memory_owners()) {
    double particles = 0;
    for (std::size_t d = 0; d < mesh.size(); ++d)
      if (mesh.memory_owner(d) == static_cast<std::size_t>(owner->id))
        particles += static_cast<double>(held_star_ranges[d].size() * star_row_bytes +
                                         gas_ranges[d].size() * gas_row_bytes);
    const std::string space = host_backend ? "host memory (all cpu devices)"
                                           : "GPU " + std::to_string(owner->gpu_ordinal);
    out << space << ":\n";
    particle_items.push_back(
        {c.stream_block_stars > 0 ? "particle fields (one block)" : "particle fields",
         static_cast<std::size_t>(particles), true,
         c.stream_block_stars > 0 ? "a smaller input.stream_block_stars"
         : c.galaxy               ? ""
                                  : "input.stream_block_stars"});
    std::vector<const MemoryItem*> parts{&particle_items.back()};
    for (const auto& item : items)
      if (item.per_memory_space) parts.push_back(&item);
    double bytes = 0;
    for (const MemoryItem* p : parts) {
      out << "  " << gb(static_cast<double>(p->bytes)) << "  " << p->what << "\n";
      bytes += static_cast<double>(p->bytes);
    }
    if (host_backend) {
      host_bytes = bytes;
      host_parts = parts;
    } else {
      check(space, bytes,
            limit > 0 ? limit : static_cast<double>(runtime::free_memory_bytes(*owner)), parts);
    }
  }
  out << (host_backend ? "host memory, after psum (same memory):\n" : "host memory:\n");
  for (const auto& item : items)
    if (!item.per_memory_space) {
      out << "  " << gb(static_cast<double>(item.bytes)) << "  " << item.what << "\n";
      host_bytes += static_cast<double>(item.bytes);
      host_parts.push_back(&item);
    }
  check("host memory", host_bytes,
        limit > 0 ? limit : static_cast<double>(runtime::free_memory_bytes(Device{})), host_parts);
  out << "(each stage's peak added up: an upper bound)\n";
  out << (plan.fits() ? "\nthe run fits\n" : "\nthe run does NOT fit:\n");
  for (const auto& p : plan.problems) out << "  " << p << "\n";
  plan.report = out.str();
  return plan;
}

}  // namespace ifusim
