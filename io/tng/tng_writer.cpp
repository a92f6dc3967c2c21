#include "io/tng/tng_writer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

#include "core/config_error.h"
#include "io/hdf5.h"
#include "io/temp_file.h"
#include "io/tng/tng_fields.h"

namespace ifusim::tng {
namespace fs = std::filesystem;
namespace {

constexpr UnitAttributes kDimensionless{0.0, 0.0, 0.0};  // ParticleIDs (not in the field table)
constexpr std::uint64_t kInt32Max = std::numeric_limits<std::int32_t>::max();

void check(bool ok, const std::string& key, const std::string& expected) {
  if (!ok) throw ConfigError("TNG writer: " + key + ": expected " + expected);
}

// The field table's (the data specification's) unit attributes of a dataset.
UnitAttributes units_of(Species species, const char* dataset) {
  return field_rule(species, dataset).tng_units;
}

std::string three_digits(int n) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%03d", n);
  return buf;
}

std::string snapshot_chunk_name(const std::string& nnn, int chunk) {
  return "snap_" + nnn + "." + std::to_string(chunk) + ".hdf5";
}
std::string group_catalog_chunk_name(const std::string& nnn, int chunk) {
  return "fof_subhalo_tab_" + nnn + "." + std::to_string(chunk) + ".hdf5";
}

// --- Particle datasets --------------------------------------------------------------------------

template <class T>
void create_field(const h5::Location& g, const std::string& name, hsize_t n, hsize_t components,
                  UnitAttributes u) {
  if (components == 1)
    g.create<T>(name, {n});
  else
    g.create<T>(name, {n, components});
  g.set_attribute<double>("a_scaling", u.a_scaling, name);
  g.set_attribute<double>("h_scaling", u.h_scaling, name);
  g.set_attribute<double>("to_cgs", u.to_cgs, name);
}

void create_star_fields(const h5::Location& g, hsize_t n) {
  const auto u = [](const char* dataset) { return units_of(Species::stars, dataset); };
  create_field<double>(g, "Coordinates", n, 3, u("Coordinates"));
  create_field<float>(g, "GFM_InitialMass", n, 1, u("GFM_InitialMass"));
  create_field<float>(g, "GFM_Metallicity", n, 1, u("GFM_Metallicity"));
  create_field<float>(g, "GFM_StellarFormationTime", n, 1, u("GFM_StellarFormationTime"));
  create_field<float>(g, "Masses", n, 1, u("Masses"));
  create_field<std::uint64_t>(g, "ParticleIDs", n, 1, kDimensionless);
  create_field<float>(g, "Velocities", n, 3, u("Velocities"));
}

void create_gas_fields(const h5::Location& g, hsize_t n) {
  const auto u = [](const char* dataset) { return units_of(Species::gas, dataset); };
  create_field<double>(g, "Coordinates", n, 3, u("Coordinates"));
  create_field<float>(g, "Density", n, 1, u("Density"));
  create_field<float>(g, "ElectronAbundance", n, 1, u("ElectronAbundance"));
  create_field<float>(g, "GFM_Metallicity", n, 1, u("GFM_Metallicity"));
  create_field<float>(g, "GFM_Metals", n, TngGasRows::kMetals, u("GFM_Metals"));
  create_field<float>(g, "InternalEnergy", n, 1, u("InternalEnergy"));
  create_field<float>(g, "Masses", n, 1, u("Masses"));
  create_field<std::uint64_t>(g, "ParticleIDs", n, 1, kDimensionless);
  create_field<float>(g, "StarFormationRate", n, 1, u("StarFormationRate"));
  create_field<float>(g, "Velocities", n, 3, u("Velocities"));
}

void write_star_block(const h5::Location& g, hsize_t row, const TngStarRows& r) {
  const hsize_t n = r.size();
  g.write_rows<double>("Coordinates", row, r.coordinates.data(), n);
  g.write_rows<float>("GFM_InitialMass", row, r.initial_masses.data(), n);
  g.write_rows<float>("GFM_Metallicity", row, r.metallicity.data(), n);
  g.write_rows<float>("GFM_StellarFormationTime", row, r.formation_time.data(), n);
  g.write_rows<float>("Masses", row, r.masses.data(), n);
  g.write_rows<std::uint64_t>("ParticleIDs", row, r.particle_ids.data(), n);
  g.write_rows<float>("Velocities", row, r.velocities.data(), n);
}

void write_gas_block(const h5::Location& g, hsize_t row, const TngGasRows& r) {
  const hsize_t n = r.size();
  g.write_rows<double>("Coordinates", row, r.coordinates.data(), n);
  g.write_rows<float>("Density", row, r.density.data(), n);
  g.write_rows<float>("ElectronAbundance", row, r.electron_abundance.data(), n);
  g.write_rows<float>("GFM_Metallicity", row, r.metallicity.data(), n);
  g.write_rows<float>("GFM_Metals", row, r.metals.data(), n);
  g.write_rows<float>("InternalEnergy", row, r.internal_energy.data(), n);
  g.write_rows<float>("Masses", row, r.masses.data(), n);
  g.write_rows<std::uint64_t>("ParticleIDs", row, r.particle_ids.data(), n);
  g.write_rows<float>("StarFormationRate", row, r.star_formation_rate.data(), n);
  g.write_rows<float>("Velocities", row, r.velocities.data(), n);
}

// A snapshot or cutout file's Header: the epoch, cosmology and box of `galaxy`, and the particle
// counts of this file and of the whole snapshot.
struct HeaderInfo {
  const TngGalaxyRecord* galaxy;
  int snapshot;
  std::string simulation_name;
  int num_files;
  std::array<std::uint64_t, 6> this_file{}, total{};
};

void write_snapshot_header(const h5::Location& root, const HeaderInfo& info) {
  const TngGalaxyRecord& g = *info.galaxy;
  const h5::Location h = root.create_group("Header");
  h.set_attribute<double>("BoxSize", g.box_size_ckpc_h);
  h.set_attribute<std::int32_t>("Flag_Cooling", 1);
  h.set_attribute<std::int32_t>("Flag_DoublePrecision", 0);
  h.set_attribute<std::int32_t>("Flag_Feedback", 1);
  h.set_attribute<std::int32_t>("Flag_Metals", 10);
  h.set_attribute<std::int32_t>("Flag_Sfr", 1);
  h.set_attribute<std::int32_t>("Flag_StellarAge", 1);
  h.set_attribute<double>("HubbleParam", g.cosmology.hubble_param);
  h.set_attribute_array<double>("MassTable", {0, 0, 0, 0, 0, 0});
  h.set_attribute<std::int32_t>("NumFilesPerSnapshot", info.num_files);
  std::vector<std::int32_t> this_file(6);
  std::vector<std::uint32_t> total_low(6), total_high(6);
  for (int t = 0; t < 6; ++t) {
    if (info.this_file[t] > kInt32Max)
      throw ConfigError("TNG writer: more than 2^31-1 particles of type " + std::to_string(t) +
                        " in one file (TNG's NumPart_ThisFile is int32)");
    this_file[t] = static_cast<std::int32_t>(info.this_file[t]);
    total_low[t] = static_cast<std::uint32_t>(info.total[t] & 0xffffffffULL);
    total_high[t] = static_cast<std::uint32_t>(info.total[t] >> 32);
  }
  h.set_attribute_array<std::int32_t>("NumPart_ThisFile", this_file);
  h.set_attribute_array<std::uint32_t>("NumPart_Total", total_low);
  h.set_attribute_array<std::uint32_t>("NumPart_Total_HighWord", total_high);
  h.set_attribute<double>("Omega0", g.cosmology.omega_matter);
  h.set_attribute<double>("OmegaBaryon", g.omega_baryon);
  h.set_attribute<double>("OmegaLambda", g.cosmology.omega_lambda);
  h.set_attribute<double>("Redshift", g.redshift);
  h.set_string_attribute("RunLabel", "IllustrisTNG-format synthetic galaxy (ifusim make-galaxy)");
  h.set_string_attribute("SimulationName", info.simulation_name);
  h.set_attribute<std::int32_t>("SnapshotNumber", info.snapshot);
  h.set_attribute<double>("Time", g.scale_factor());
  // TNG's code units: 1 kpc, 1e10 Msun and 1 km/s (the h and a factors are in the datasets'
  // h_scaling and a_scaling).
  h.set_attribute<double>("UnitLength_in_cm", kKpcCm);
  h.set_attribute<double>("UnitMass_in_g", kMsunG * 1e10);
  h.set_attribute<double>("UnitVelocity_in_cm_per_s", kKmCm);
}

// --- Catalog sums -------------------------------------------------------------------------------

// A galaxy's TNG rows back in physical units about its centre: what the catalog sums.
struct PhysicalFrame {
  const TngGalaxyRecord& g;
  double hubble_param, length_to_ckpc_h, velocity_to_tng;

  explicit PhysicalFrame(const TngGalaxyRecord& galaxy)
      : g(galaxy),
        hubble_param(galaxy.cosmology.hubble_param),
        length_to_ckpc_h(hubble_param / galaxy.scale_factor()),
        velocity_to_tng(1.0 / std::sqrt(galaxy.scale_factor())) {}

  double mass_msun(float masses) const { return masses * 1e10 / hubble_param; }
  // Box frame offset from the galaxy centre (periodic).
  std::array<double, 3> offset_kpc(const double* coords_ckpc_h) const {
    std::array<double, 3> d{};
    const double box = g.box_size_ckpc_h;
    for (int k = 0; k < 3; ++k) {
      double x = coords_ckpc_h[k] - g.center_ckpc_h[k];
      x -= box * std::round(x / box);
      d[k] = x / length_to_ckpc_h;
    }
    return d;
  }
  // Peculiar velocity.
  std::array<double, 3> velocity_kms(const float* v) const {
    return {v[0] / velocity_to_tng, v[1] / velocity_to_tng, v[2] / velocity_to_tng};
  }
};

// Catalog sums of one segment of the particle arrays (a subhalo, a group's fuzz, or the
// unassociated particles), accumulated serially in particle order so that they do not depend on
// the block size. Radius histograms live only while the segment is being written: memory stays
// bounded by the segments that straddle the write position.
struct SegmentStats {
  std::array<std::uint64_t, 6> expected{}, count{};
  std::array<double, 6> mass_msun{}, half_mass_kpc{};
  double sfr_msun_yr = 0, half_mass_all_kpc = 0;
  std::array<double, 3> mass_pos{}, mass_vel{};  // sum m * (x - centre) [kpc], m * v [km/s]
  std::array<std::vector<double>, 6> hist;
  std::vector<double> hist_all;

  double mass_all_msun() const {
    double m = 0;
    for (double x : mass_msun) m += x;
    return m;
  }
  void add(int type, double m, const std::array<double, 3>& d_kpc,
           const std::array<double, 3>& v_kms) {
    if (hist[type].empty()) hist[type].assign(kRadiusBins, 0.0);
    if (hist_all.empty()) hist_all.assign(kRadiusBins, 0.0);
    ++count[type];
    mass_msun[type] += m;
    for (int k = 0; k < 3; ++k) {
      mass_pos[k] += m * d_kpc[k];
      mass_vel[k] += m * v_kms[k];
    }
    const int bin =
        radius_bin(std::sqrt(d_kpc[0] * d_kpc[0] + d_kpc[1] * d_kpc[1] + d_kpc[2] * d_kpc[2]));
    hist[type][bin] += m;
    hist_all[bin] += m;
    if (count[type] == expected[type]) {
      half_mass_kpc[type] = half_mass_radius_kpc(hist[type]);
      std::vector<double>().swap(hist[type]);
    }
    if (count == expected) {
      half_mass_all_kpc = half_mass_radius_kpc(hist_all);
      std::vector<double>().swap(hist_all);
    }
  }
};

// Writes the galaxy's stars / gas cells [begin, end) at `row` of an open particle group, a block
// at a time; adds them to `stats` when given.
void write_stars(const TngGalaxySource& galaxy, const h5::Location& group, std::size_t begin,
                 std::size_t end, hsize_t row, SegmentStats* stats) {
  const PhysicalFrame frame(galaxy.record());
  const std::size_t block_rows = galaxy.block_rows();
  TngStarRows rows;
  for (std::size_t b = begin; b < end; b += block_rows) {
    const std::size_t e = std::min(end, b + block_rows);
    galaxy.star_rows(b, e, rows);
    write_star_block(group, row + (b - begin), rows);
    if (stats)
      for (std::size_t j = 0; j < rows.size(); ++j)
        stats->add(4, frame.mass_msun(rows.masses[j]), frame.offset_kpc(&rows.coordinates[3 * j]),
                   frame.velocity_kms(&rows.velocities[3 * j]));
  }
}

void write_gas(const TngGalaxySource& galaxy, const h5::Location& group, std::size_t begin,
               std::size_t end, hsize_t row, SegmentStats* stats) {
  const PhysicalFrame frame(galaxy.record());
  const std::size_t block_rows = galaxy.block_rows();
  TngGasRows rows;
  for (std::size_t b = begin; b < end; b += block_rows) {
    const std::size_t e = std::min(end, b + block_rows);
    galaxy.gas_rows(b, e, rows);
    write_gas_block(group, row + (b - begin), rows);
    if (stats)
      for (std::size_t j = 0; j < rows.size(); ++j) {
        stats->add(0, frame.mass_msun(rows.masses[j]), frame.offset_kpc(&rows.coordinates[3 * j]),
                   frame.velocity_kms(&rows.velocities[3 * j]));
        stats->sfr_msun_yr += rows.star_formation_rate[j];
      }
  }
}

// What any source must offer the writer: blocks of at least one row (the write loops advance by
// them) and IDs that TNG's int32 fields can hold.
void check_source(const TngGalaxySource& galaxy, const std::string& key) {
  const TngGalaxyRecord& g = galaxy.record();
  check(galaxy.block_rows() >= 1, key + ".block_rows", "at least 1 row per block");
  check(g.subhalo_id >= 0 && g.subhalo_id <= std::numeric_limits<std::int32_t>::max(),
        key + ".subhalo_id", "a non-negative int32");
}

// --- Snapshot -----------------------------------------------------------------------------------

void check_layout(const TngSnapshotLayout& layout) {
  check(!layout.subhalos.empty(), "subhalos", "at least one subhalo");
  check(layout.n_chunks >= 1 && layout.n_chunks <= 4096, "n_chunks", "a chunk count in [1, 4096]");
  check(layout.snapshot >= 0 && layout.snapshot <= 999, "snapshot",
        "a snapshot number in [0, 999]");
  const auto& group_of = layout.group_of_subhalo;
  check(group_of.empty() || group_of.size() == layout.subhalos.size(), "group_of_subhalo",
        "one group index per subhalo (or none)");
  for (std::size_t s = 0; s < group_of.size(); ++s) {
    const int prev = s == 0 ? 0 : group_of[s - 1];
    check(group_of[s] == prev || group_of[s] == prev + 1,
          "group_of_subhalo[" + std::to_string(s) + "]",
          "group indices non-decreasing from 0 without gaps");
  }
  check(layout.group_fuzz.empty() ||
            layout.group_fuzz.size() == static_cast<std::size_t>(layout.n_groups()),
        "group_fuzz", "one entry per FoF group (or none)");
  // Every part with particles: one epoch and box, counts that SubhaloLenType (int32) holds.
  std::vector<std::pair<const TngGalaxySource*, std::string>> parts;
  for (std::size_t s = 0; s < layout.subhalos.size(); ++s) {
    const std::string key = "subhalos[" + std::to_string(s) + "]";
    const TngGalaxySource* g = layout.subhalos[s];
    check(g && g->record().n_stars + g->record().n_gas > 0, key, "a subhalo with particles");
    parts.emplace_back(g, key);
  }
  for (std::size_t g = 0; g < layout.group_fuzz.size(); ++g)
    if (layout.group_fuzz[g])
      parts.emplace_back(layout.group_fuzz[g], "group_fuzz[" + std::to_string(g) + "]");
  if (layout.unassociated) parts.emplace_back(layout.unassociated, "unassociated");
  const TngGalaxyRecord& first = layout.subhalos.front()->record();
  for (const auto& [source, key] : parts) {
    check_source(*source, key);
    const TngGalaxyRecord& g = source->record();
    check(g.redshift == first.redshift && g.box_size_ckpc_h == first.box_size_ckpc_h &&
              g.cosmology.hubble_param == first.cosmology.hubble_param &&
              g.cosmology.omega_matter == first.cosmology.omega_matter &&
              g.cosmology.omega_lambda == first.cosmology.omega_lambda,
          key, "the same redshift, box size and cosmology as subhalos[0]");
    check(g.n_stars <= kInt32Max && g.n_gas <= kInt32Max, key + ".n_stars",
          "at most 2^31-1 particles per type (SubhaloLenType is int32)");
  }
}

// A segment of each type's global particle array: one part of the layout.
struct Segment {
  const TngGalaxySource* galaxy;
  int subhalo;  // -1: not a subhalo
  int group;    // -1: in no group
  std::array<std::uint64_t, 6> len{}, offset{};
  SegmentStats stats;
};

// Where every part's particles go in each type's global array, and which groups hold which
// subhalos.
struct SnapshotPlan {
  std::size_t n_sub = 0;
  int n_groups = 0;
  std::vector<int> group_of, first_sub, n_subs;
  // In TNG order: per group its subhalos then its fuzz; the unassociated particles last.
  std::vector<Segment> segments;
  std::vector<std::size_t> segment_of_subhalo;
  std::array<std::uint64_t, 6> total{};
  int n_chunks = 1;

  explicit SnapshotPlan(const TngSnapshotLayout& layout)
      : n_sub(layout.subhalos.size()),
        n_groups(layout.n_groups()),
        group_of(n_sub, 0),
        first_sub(n_groups, -1),
        n_subs(n_groups, 0),
        segment_of_subhalo(n_sub),
        n_chunks(layout.n_chunks) {
    if (!layout.group_of_subhalo.empty()) group_of = layout.group_of_subhalo;
    for (std::size_t s = 0; s < n_sub; ++s) {
      if (first_sub[group_of[s]] < 0) first_sub[group_of[s]] = static_cast<int>(s);
      ++n_subs[group_of[s]];
    }
    const auto add_segment = [&](const TngGalaxySource* source, int subhalo, int group) {
      if (!source) return;
      const TngGalaxyRecord& g = source->record();
      if (g.n_stars + g.n_gas == 0) return;
      Segment seg{source, subhalo, group, {}, {}, {}};
      seg.len[0] = g.n_gas;
      seg.len[4] = g.n_stars;
      seg.stats.expected = seg.len;
      segments.push_back(std::move(seg));
    };
    for (int grp = 0; grp < n_groups; ++grp) {
      for (int s = first_sub[grp]; s < first_sub[grp] + n_subs[grp]; ++s) {
        segment_of_subhalo[s] = segments.size();
        add_segment(layout.subhalos[s], s, grp);
      }
      if (!layout.group_fuzz.empty()) add_segment(layout.group_fuzz[grp], -1, grp);
    }
    add_segment(layout.unassociated, -1, -1);
    for (auto& seg : segments) {
      seg.offset = total;
      for (int t = 0; t < 6; ++t) total[t] += seg.len[t];
    }
    for (int t = 0; t < 6; ++t)
      if (total[t] / n_chunks >= kInt32Max)
        throw ConfigError(
            "n_chunks: expected enough chunks to keep each file below 2^31 particles "
            "of type " +
            std::to_string(t) + " (TNG's NumPart_ThisFile is int32)");
  }

  // First row of chunk k in type t's global array.
  std::uint64_t chunk_begin(int t, int k) const {
    return static_cast<std::uint64_t>(static_cast<unsigned __int128>(total[t]) * k / n_chunks);
  }
  const std::array<std::uint64_t, 6>& subhalo_offset(std::size_t s) const {
    return segments[segment_of_subhalo[s]].offset;
  }
};

// The snapshot chunk files, accumulating each segment's stats in global particle order.
void write_snapshot_chunks(const fs::path& snapdir, const std::string& nnn,
                           const TngSnapshotLayout& layout, SnapshotPlan& plan) {
  constexpr int kTypes[2] = {0, 4};
  const TngGalaxyRecord& first = layout.subhalos.front()->record();
  for (int k = 0; k < plan.n_chunks; ++k) {
    h5::File f((snapdir / snapshot_chunk_name(nnn, k)).string(), h5::File::Mode::truncate);
    HeaderInfo info{&first, layout.snapshot, layout.simulation_name, plan.n_chunks, {}, plan.total};
    for (int t : kTypes) info.this_file[t] = plan.chunk_begin(t, k + 1) - plan.chunk_begin(t, k);
    write_snapshot_header(f, info);
    for (int t : kTypes) {
      const std::uint64_t lo = plan.chunk_begin(t, k), hi = plan.chunk_begin(t, k + 1);
      if (hi == lo) continue;  // TNG omits the group of a type with no particles in this file
      const h5::Location grp = f.create_group("PartType" + std::to_string(t));
      if (t == 0)
        create_gas_fields(grp, hi - lo);
      else
        create_star_fields(grp, hi - lo);
      for (auto& seg : plan.segments) {
        const std::uint64_t s_lo = seg.offset[t], s_hi = s_lo + seg.len[t];
        const std::uint64_t b = std::max(lo, s_lo), e = std::min(hi, s_hi);
        if (b >= e) continue;
        if (t == 0)
          write_gas(*seg.galaxy, grp, b - s_lo, e - s_lo, b - lo, &seg.stats);
        else
          write_stars(*seg.galaxy, grp, b - s_lo, e - s_lo, b - lo, &seg.stats);
      }
    }
    f.close();
  }
}

// One subhalo's or group's catalog values.
struct CatalogRow {
  std::array<double, 6> mass_msun{}, half_mass_kpc{};
  std::array<std::uint64_t, 6> len{};
  std::array<double, 3> pos_ckpc_h{}, cm_ckpc_h{}, vel_kms{};
  double half_mass_all_kpc = 0, sfr_msun_yr = 0, mass_all_msun = 0;
};

// Catalog values per subhalo and per group (a group's sums include its fuzz), from the segments'
// stats.
struct Catalog {
  std::vector<CatalogRow> subhalos, groups;
};

Catalog catalog_rows(const SnapshotPlan& plan, const TngGalaxyRecord& first) {
  const double a = first.scale_factor(), h = first.cosmology.hubble_param;
  const double box = first.box_size_ckpc_h;
  const double kpc_to_ckpc_h = h / a;
  auto wrap = [box](double x) {
    x = std::fmod(x, box);
    if (x < 0) x += box;
    return x >= box ? 0.0 : x;
  };
  const auto segment_row = [&](const Segment& seg) {
    CatalogRow r;
    const SegmentStats& st = seg.stats;
    r.len = st.count;
    r.mass_msun = st.mass_msun;
    r.half_mass_kpc = st.half_mass_kpc;
    r.half_mass_all_kpc = st.half_mass_all_kpc;
    r.mass_all_msun = st.mass_all_msun();
    r.sfr_msun_yr = st.sfr_msun_yr;
    const double m = std::max(r.mass_all_msun, 1e-300);
    for (int c = 0; c < 3; ++c) {
      r.pos_ckpc_h[c] = seg.galaxy->record().center_ckpc_h[c];
      r.cm_ckpc_h[c] = wrap(r.pos_ckpc_h[c] + st.mass_pos[c] / m * kpc_to_ckpc_h);
      r.vel_kms[c] = st.mass_vel[c] / m;
    }
    return r;
  };
  Catalog cat;
  auto& sub = cat.subhalos;
  auto& grp = cat.groups;
  sub.resize(plan.n_sub);
  grp.resize(plan.n_groups);
  for (std::size_t s = 0; s < plan.n_sub; ++s)
    sub[s] = segment_row(plan.segments[plan.segment_of_subhalo[s]]);
  std::vector<std::array<double, 3>> group_mp(plan.n_groups), group_mv(plan.n_groups);
  for (const auto& seg : plan.segments) {
    if (seg.group < 0) continue;
    const CatalogRow r = segment_row(seg);
    CatalogRow& g = grp[seg.group];
    const CatalogRow& central = sub[plan.first_sub[seg.group]];
    for (int t = 0; t < 6; ++t) {
      g.len[t] += r.len[t];
      g.mass_msun[t] += r.mass_msun[t];
    }
    g.mass_all_msun += r.mass_all_msun;
    for (int c = 0; c < 3; ++c) {
      double d = r.cm_ckpc_h[c] - central.pos_ckpc_h[c];
      d -= box * std::round(d / box);
      group_mp[seg.group][c] += r.mass_all_msun * d;
      group_mv[seg.group][c] += r.mass_all_msun * r.vel_kms[c];
    }
  }
  for (int g = 0; g < plan.n_groups; ++g) {
    const CatalogRow& central = sub[plan.first_sub[g]];
    const double m = std::max(grp[g].mass_all_msun, 1e-300);
    for (int c = 0; c < 3; ++c) {
      grp[g].pos_ckpc_h[c] = central.pos_ckpc_h[c];
      grp[g].cm_ckpc_h[c] = wrap(central.pos_ckpc_h[c] + group_mp[g][c] / m);
      grp[g].vel_kms[c] = group_mv[g][c] / m;
    }
  }
  return cat;
}

// The first of n catalog items (groups, subhalos) in file k of n_files: file k holds items
// [n k / n_files, n (k + 1) / n_files).
std::size_t file_split(std::size_t n, int k, int n_files) {
  return n * static_cast<std::size_t>(k) / n_files;
}

// Group catalog chunks: groups and subhalos each split evenly over the files.
void write_group_catalog_chunks(const fs::path& groups_dir, const std::string& nnn,
                                const TngSnapshotLayout& layout, const SnapshotPlan& plan,
                                const Catalog& cat) {
  const TngGalaxyRecord& first = layout.subhalos.front()->record();
  const double a = first.scale_factor(), h = first.cosmology.hubble_param;
  const double msun_to_code = h / 1e10, kpc_to_ckpc_h = h / a;
  const int nfiles = plan.n_chunks;
  const int n_groups = plan.n_groups;
  const std::size_t n_sub = plan.n_sub;
  const auto& grp = cat.groups;
  const auto& sub = cat.subhalos;
  for (int k = 0; k < nfiles; ++k) {
    h5::File f((groups_dir / group_catalog_chunk_name(nnn, k)).string(), h5::File::Mode::truncate);
    const std::size_t g_lo = file_split(n_groups, k, nfiles),
                      g_hi = file_split(n_groups, k + 1, nfiles);
    const std::size_t s_lo = file_split(n_sub, k, nfiles), s_hi = file_split(n_sub, k + 1, nfiles);
    const h5::Location header = f.create_group("Header");
    header.set_attribute<double>("BoxSize", first.box_size_ckpc_h);
    header.set_attribute<std::int32_t>("FlagDoubleprecision", 0);
    header.set_attribute<double>("HubbleParam", h);
    header.set_attribute<std::int32_t>("Ngroups_ThisFile", static_cast<std::int32_t>(g_hi - g_lo));
    header.set_attribute<std::int32_t>("Ngroups_Total", n_groups);
    std::uint64_t ids_total = 0, ids_this = 0;
    for (int g = 0; g < n_groups; ++g)
      for (int t = 0; t < 6; ++t) ids_total += grp[g].len[t];
    for (std::size_t g = g_lo; g < g_hi; ++g)
      for (int t = 0; t < 6; ++t) ids_this += grp[g].len[t];
    header.set_attribute<std::int64_t>("Nids_ThisFile", static_cast<std::int64_t>(ids_this));
    header.set_attribute<std::int64_t>("Nids_Total", static_cast<std::int64_t>(ids_total));
    header.set_attribute<std::int32_t>("Nsubgroups_ThisFile",
                                       static_cast<std::int32_t>(s_hi - s_lo));
    header.set_attribute<std::int32_t>("Nsubgroups_Total", static_cast<std::int32_t>(n_sub));
    header.set_attribute<std::int32_t>("NumFiles", nfiles);
    header.set_attribute<double>("Omega0", first.cosmology.omega_matter);
    header.set_attribute<double>("OmegaLambda", first.cosmology.omega_lambda);
    header.set_attribute<double>("Redshift", first.redshift);
    header.set_attribute<double>("Time", a);
    header.set_string_attribute("SimulationName", layout.simulation_name);

    // Group/ and Subhalo/ exist in every file; their datasets only where the file has rows.
    const h5::Location G = f.create_group("Group");
    const h5::Location S = f.create_group("Subhalo");
    if (g_hi > g_lo) {
      const hsize_t n = g_hi - g_lo;
      std::vector<std::int32_t> first_v, len_v, nsubs_v, lentype_v;
      std::vector<float> mass_v, masstype_v, pos_v, cm_v, vel_v;
      for (std::size_t g = g_lo; g < g_hi; ++g) {
        const CatalogRow& r = grp[g];
        first_v.push_back(plan.first_sub[g]);
        nsubs_v.push_back(plan.n_subs[g]);
        std::uint64_t len = 0;
        for (int t = 0; t < 6; ++t) {
          len += r.len[t];
          lentype_v.push_back(static_cast<std::int32_t>(r.len[t]));
          masstype_v.push_back(static_cast<float>(r.mass_msun[t] * msun_to_code));
        }
        len_v.push_back(static_cast<std::int32_t>(std::min<std::uint64_t>(len, INT32_MAX)));
        mass_v.push_back(static_cast<float>(r.mass_all_msun * msun_to_code));
        for (int c = 0; c < 3; ++c) {
          pos_v.push_back(static_cast<float>(r.pos_ckpc_h[c]));
          cm_v.push_back(static_cast<float>(r.cm_ckpc_h[c]));
          vel_v.push_back(static_cast<float>(r.vel_kms[c] * a));  // GroupVel is in km/s/a
        }
      }
      G.write<float>("GroupCM", cm_v, {n, 3});
      G.write<std::int32_t>("GroupFirstSub", first_v, {n});
      G.write<std::int32_t>("GroupLen", len_v, {n});
      G.write<std::int32_t>("GroupLenType", lentype_v, {n, 6});
      G.write<float>("GroupMass", mass_v, {n});
      G.write<float>("GroupMassType", masstype_v, {n, 6});
      G.write<std::int32_t>("GroupNsubs", nsubs_v, {n});
      G.write<float>("GroupPos", pos_v, {n, 3});
      G.write<float>("GroupVel", vel_v, {n, 3});
    }
    if (s_hi > s_lo) {
      const hsize_t n = s_hi - s_lo;
      std::vector<std::int32_t> grnr_v, len_v, lentype_v, parent_v;
      std::vector<std::uint8_t> flag_v;
      std::vector<float> mass_v, masstype_v, pos_v, cm_v, vel_v, hm_v, hmtype_v, sfr_v;
      for (std::size_t s = s_lo; s < s_hi; ++s) {
        const CatalogRow& r = sub[s];
        grnr_v.push_back(plan.group_of[s]);
        parent_v.push_back(0);
        flag_v.push_back(1);
        std::uint64_t len = 0;
        for (int t = 0; t < 6; ++t) {
          len += r.len[t];
          lentype_v.push_back(static_cast<std::int32_t>(r.len[t]));
          masstype_v.push_back(static_cast<float>(r.mass_msun[t] * msun_to_code));
          hmtype_v.push_back(static_cast<float>(r.half_mass_kpc[t] * kpc_to_ckpc_h));
        }
        len_v.push_back(static_cast<std::int32_t>(std::min<std::uint64_t>(len, INT32_MAX)));
        mass_v.push_back(static_cast<float>(r.mass_all_msun * msun_to_code));
        hm_v.push_back(static_cast<float>(r.half_mass_all_kpc * kpc_to_ckpc_h));
        sfr_v.push_back(static_cast<float>(r.sfr_msun_yr));
        for (int c = 0; c < 3; ++c) {
          pos_v.push_back(static_cast<float>(r.pos_ckpc_h[c]));
          cm_v.push_back(static_cast<float>(r.cm_ckpc_h[c]));
          vel_v.push_back(static_cast<float>(r.vel_kms[c]));  // SubhaloVel is in km/s
        }
      }
      S.write<float>("SubhaloCM", cm_v, {n, 3});
      S.write<std::uint8_t>("SubhaloFlag", flag_v, {n});
      S.write<std::int32_t>("SubhaloGrNr", grnr_v, {n});
      S.write<float>("SubhaloHalfmassRad", hm_v, {n});
      S.write<float>("SubhaloHalfmassRadType", hmtype_v, {n, 6});
      S.write<std::int32_t>("SubhaloLen", len_v, {n});
      S.write<std::int32_t>("SubhaloLenType", lentype_v, {n, 6});
      S.write<float>("SubhaloMass", mass_v, {n});
      S.write<float>("SubhaloMassType", masstype_v, {n, 6});
      S.write<std::int32_t>("SubhaloParent", parent_v, {n});
      S.write<float>("SubhaloPos", pos_v, {n, 3});
      S.write<float>("SubhaloSFR", sfr_v, {n});
      S.write<float>("SubhaloVel", vel_v, {n, 3});
    }
    f.close();
  }
}

// Offsets: the first row of each group / subhalo in each type's global particle array.
void write_offsets(const std::string& path, const SnapshotPlan& plan) {
  h5::File f(path, h5::File::Mode::truncate);
  const int nfiles = plan.n_chunks;
  std::vector<std::int64_t> group_off, sub_off, file_snap, file_group, file_sub;
  for (int g = 0; g < plan.n_groups; ++g)
    for (int t = 0; t < 6; ++t)
      group_off.push_back(static_cast<std::int64_t>(plan.subhalo_offset(plan.first_sub[g])[t]));
  for (std::size_t s = 0; s < plan.n_sub; ++s)
    for (int t = 0; t < 6; ++t)
      sub_off.push_back(static_cast<std::int64_t>(plan.subhalo_offset(s)[t]));
  for (int k = 0; k < nfiles; ++k) {
    for (int t = 0; t < 6; ++t)
      file_snap.push_back(static_cast<std::int64_t>(plan.chunk_begin(t, k)));
    file_group.push_back(static_cast<std::int64_t>(file_split(plan.n_groups, k, nfiles)));
    file_sub.push_back(static_cast<std::int64_t>(file_split(plan.n_sub, k, nfiles)));
  }
  const hsize_t ng = static_cast<hsize_t>(plan.n_groups), ns = plan.n_sub, nf = nfiles;
  for (const char* group : {"Group", "Subhalo", "FileOffsets"}) f.create_group(group);
  f.write<std::int64_t>("Group/SnapByType", group_off, {ng, 6});
  f.write<std::int64_t>("Subhalo/SnapByType", sub_off, {ns, 6});
  f.write<std::int64_t>("FileOffsets/SnapByType", file_snap, {nf, 6});
  f.write<std::int64_t>("FileOffsets/Group", file_group, {nf});
  f.write<std::int64_t>("FileOffsets/Subhalo", file_sub, {nf});
  f.close();
}

}  // namespace

int radius_bin(double r_kpc) {
  const double x = (std::log10(std::max(r_kpc, 1e-3)) + 3.0) / 6.0 * kRadiusBins;
  return std::clamp(static_cast<int>(x), 0, kRadiusBins - 1);
}

double half_mass_radius_kpc(const std::vector<double>& mass_per_bin) {
  const auto& hist = mass_per_bin;
  double total = 0;
  for (double m : hist) total += m;
  if (!(total > 0)) return 0.0;
  double cum = 0;
  for (int b = 0; b < kRadiusBins; ++b) {
    if (cum + hist[b] >= 0.5 * total) {
      const double f = hist[b] > 0 ? (0.5 * total - cum) / hist[b] : 0.0;
      return std::pow(10.0, -3.0 + 6.0 * (b + f) / kRadiusBins);
    }
    cum += hist[b];
  }
  return 1e3;
}

std::string snapshot_chunk_path(const std::string& base_dir, int snapshot, int chunk) {
  const std::string nnn = three_digits(snapshot);
  return (fs::path(base_dir) / ("snapdir_" + nnn) / snapshot_chunk_name(nnn, chunk)).string();
}
std::string group_catalog_chunk_path(const std::string& base_dir, int snapshot, int chunk) {
  const std::string nnn = three_digits(snapshot);
  return (fs::path(base_dir) / ("groups_" + nnn) / group_catalog_chunk_name(nnn, chunk)).string();
}
std::string offsets_path(const std::string& base_dir, int snapshot) {
  return (fs::path(base_dir) / ("offsets_" + three_digits(snapshot) + ".hdf5")).string();
}

void write_tng_cutout(const std::string& path, const TngGalaxySource& galaxy) {
  check_source(galaxy, "cutout");
  const TngGalaxyRecord& g = galaxy.record();
  detail::TempFile file(path);
  {
    h5::File f(file.path(), h5::File::Mode::truncate);
    HeaderInfo info{&g, g.snapshot, g.simulation_name, 1, {}, {}};
    info.this_file[0] = info.total[0] = g.n_gas;
    info.this_file[4] = info.total[4] = g.n_stars;
    write_snapshot_header(f, info);
    const h5::Location header = f.group("Header");
    header.set_attribute<std::int32_t>("CutoutID", static_cast<std::int32_t>(g.subhalo_id));
    header.set_string_attribute("CutoutType", "subhalo");
    header.set_string_attribute(
        "CutoutRequest",
        "PartType0=Coordinates,Density,ElectronAbundance,GFM_Metallicity,GFM_Metals,"
        "InternalEnergy,Masses,ParticleIDs,StarFormationRate,Velocities+PartType4=Coordinates,"
        "GFM_InitialMass,GFM_Metallicity,GFM_StellarFormationTime,Masses,ParticleIDs,Velocities");
    if (g.n_gas > 0) {
      const h5::Location group = f.create_group("PartType0");
      create_gas_fields(group, g.n_gas);
      write_gas(galaxy, group, 0, g.n_gas, 0, nullptr);
    }
    if (g.n_stars > 0) {
      const h5::Location group = f.create_group("PartType4");
      create_star_fields(group, g.n_stars);
      write_stars(galaxy, group, 0, g.n_stars, 0, nullptr);
    }
    f.close();
  }
  file.commit();
}

void write_tng_snapshot(const std::string& base_dir, const TngSnapshotLayout& layout) {
  check_layout(layout);
  const std::string nnn = three_digits(layout.snapshot);
  const fs::path base(base_dir);
  const std::array<std::string, 3> outputs = {"snapdir_" + nnn, "groups_" + nnn,
                                              "offsets_" + nnn + ".hdf5"};
  for (const auto& o : outputs)
    if (fs::exists(base / o))
      throw InputError((base / o).string() +
                       ": already exists (remove it first; snapshots are never overwritten)");
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) throw InputError(base_dir + ": cannot create the output folder (" + ec.message() + ")");
  detail::TempFile snapdir((base / outputs[0]).string()), groups((base / outputs[1]).string()),
      offsets((base / outputs[2]).string());
  for (const detail::TempFile* folder : {&snapdir, &groups})
    if (fs::create_directory(folder->path(), ec); ec)
      throw InputError(folder->path() + ": cannot create the folder (" + ec.message() + ")");

  SnapshotPlan plan(layout);
  write_snapshot_chunks(snapdir.path(), nnn, layout, plan);
  const Catalog catalog = catalog_rows(plan, layout.subhalos.front()->record());
  write_group_catalog_chunks(groups.path(), nnn, layout, plan, catalog);
  write_offsets(offsets.path(), plan);

  // The three outputs move into place together: should a move fail, those already moved are
  // removed again.
  const std::array<detail::TempFile*, 3> staged = {&snapdir, &groups, &offsets};
  std::vector<fs::path> moved;
  try {
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      staged[i]->commit();
      moved.push_back(base / outputs[i]);
    }
  } catch (const InputError&) {
    for (const auto& m : moved) fs::remove_all(m, ec);
    throw;
  }
}

}  // namespace ifusim::tng
