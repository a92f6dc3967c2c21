#include "io/tng/tng_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "data/collectives/reductions.h"
#include "io/hdf5.h"
#include "io/tng/stellar_centre.h"
#include "io/tng/tng_convert.h"
#include "io/tng/tng_fields.h"

namespace ifusim {
namespace {

namespace fs = std::filesystem;
using tng::CgsFactor;
using tng::FieldRule;
using tng::Species;
using tng::target_factor;

struct Header {
  const tng::SnapshotFormat* format = &tng::tng_format();
  std::string file;
  // header_unit_system formats: the header's unit system
  double unit_length_cm = 0, unit_mass_g = 0, unit_velocity_cm_s = 0;
  double time = 1, redshift = 0, hubble = 0, omega0 = 0, omega_lambda = 0, box_size = 0;
  std::string simulation;
  int snapshot = -1;
  long long cutout_id = -1;
  int num_files = 1;
};

// The first of a header entry's alternatives the file has: its values (an attribute may be an
// array, as SWIFT writes BoxSize and its scalars) and its name; no values when none is there.
struct HeaderValue {
  std::vector<double> values;
  std::string name;
};
HeaderValue header_value(const h5::File& f, const std::vector<tng::AttributePath>& alternatives) {
  for (const auto& a : alternatives)
    if (f.exists(a.group) && f.group(a.group).has_attribute(a.name))
      return {f.group(a.group).attribute_array<double>(a.name), a.name};
  return {};
}

// What a file that lacks the format's header says of itself, for messages.
std::string not_this_format(const tng::SnapshotFormat& format) {
  if (std::string(format.name) == "tng") return "not a TNG snapshot or cutout";
  return std::string("not a snapshot of the ") + format.title + " format (input.format " +
         format.name + ")";
}

// One header entry, required: a single value (a 3-vector of equal values for BoxSize), else an
// InputError naming the file and the attributes looked for.
double header_number(const h5::File& f, const std::vector<tng::AttributePath>& alternatives,
                     const tng::SnapshotFormat& format) {
  const HeaderValue v = header_value(f, alternatives);
  if (v.values.empty()) {
    std::string names;
    for (const auto& a : alternatives)
      names += std::string(names.empty() ? "" : " or ") + "/" + a.group + " attribute \"" + a.name +
               "\"";
    throw InputError(f.describe(alternatives.front().group) + ": " + names + " not found (" +
                     not_this_format(format) + ")");
  }
  for (double x : v.values)
    if (x != v.values.front())
      throw InputError(f.describe(alternatives.front().group) + ": attribute \"" + v.name +
                       "\" has unequal components (a non-cubic box is not supported)");
  return v.values.front();
}

Header read_header(const std::string& file, const tng::SnapshotFormat& format = tng::tng_format()) {
  h5::File f(file);
  if (!f.exists("Header"))
    throw InputError(f.describe("Header") + ": group not found (" + not_this_format(format) + ")");
  const auto h = f.group("Header");
  Header out;
  out.format = &format;
  out.file = file;
  out.time = header_number(f, format.scale_factor, format);
  out.hubble = header_number(f, format.hubble, format);
  out.omega0 = header_number(f, format.omega_matter, format);
  out.omega_lambda = header_number(f, format.omega_lambda, format);
  out.box_size = header_number(f, format.box_size, format);
  const std::string a_name = header_value(f, format.scale_factor).name;
  const std::string h_name = header_value(f, format.hubble).name;
  const std::string om_name = header_value(f, format.omega_matter).name;
  const std::string ol_name = header_value(f, format.omega_lambda).name;
  if (!(out.time > 0 && out.time <= 1.0 + 1e-9))
    throw InputError(h.describe() + ": attribute \"" + a_name +
                     "\" (scale factor) must be in (0, 1]");
  if (!(out.hubble > 0))
    throw InputError(h.describe() + ": attribute \"" + h_name + "\" must be > 0");
  if (!(out.omega0 > 0) || !(out.omega_lambda >= 0))
    throw InputError(h.describe() + ": attributes \"" + om_name + "\" > 0 and \"" + ol_name +
                     "\" >= 0 expected");
  if (!(out.box_size > 0) || !std::isfinite(out.box_size))
    throw InputError(h.describe() + ": attribute \"BoxSize\" must be finite and > 0");
  if (!std::isfinite(out.hubble) || !std::isfinite(out.omega0) || !std::isfinite(out.omega_lambda))
    throw InputError(h.describe() + ": attributes \"" + h_name + "\", \"" + om_name + "\" and \"" +
                     ol_name + "\" must be finite");
  const HeaderValue z = header_value(f, format.redshift);
  out.redshift = z.values.size() == 1 ? z.values[0] : 1.0 / out.time - 1;
  if (format.unit_source == tng::UnitSource::header_unit_system) {
    auto unit = [&](const std::vector<tng::AttributePath>& alternatives, double fallback) {
      const HeaderValue v = header_value(f, alternatives);
      if (v.values.empty()) return fallback;
      if (v.values.size() != 1 || !(v.values[0] > 0) || !std::isfinite(v.values[0]))
        throw InputError(f.describe(alternatives.front().group) + ": attribute \"" + v.name +
                         "\" must be one finite value > 0");
      return v.values[0];
    };
    out.unit_length_cm = unit(format.unit_length_cm, format.default_unit_length_cm);
    out.unit_mass_g = unit(format.unit_mass_g, format.default_unit_mass_g);
    out.unit_velocity_cm_s = unit(format.unit_velocity_cm_s, format.default_unit_velocity_cm_s);
  }
  if (h.has_attribute("SimulationName")) out.simulation = h.string_attribute("SimulationName");
  if (h.has_attribute("SnapshotNumber"))
    out.snapshot = static_cast<int>(h.attribute<std::int64_t>("SnapshotNumber"));
  if (h.has_attribute("CutoutID")) out.cutout_id = h.attribute<std::int64_t>("CutoutID");
  if (h.has_attribute("NumFilesPerSnapshot"))
    out.num_files = static_cast<int>(h.attribute<std::int64_t>("NumFilesPerSnapshot"));
  return out;
}

// The dataset's own unit attributes (their names the format's) at the header's a and h. TNG's
// catalog datasets are read with TNG's names whatever the format.
CgsFactor cgs_factor(const h5::Location& loc, const std::string& dataset, const Header& hdr) {
  const tng::SnapshotFormat& format = *hdr.format;
  tng::UnitAttributes units;
  units.to_cgs = loc.attribute<double>(format.to_cgs_attribute, dataset);
  units.a_scaling = loc.attribute<double>(format.a_exponent_attribute, dataset);
  units.h_scaling = loc.attribute<double>(format.h_exponent_attribute, dataset);
  // SWIFT and EAGLE write a dimensionless dataset's conversion factor as 1.
  if (format.unit_one_dimensionless && units.to_cgs == 1.0 && units.a_scaling == 0 &&
      units.h_scaling == 0)
    units.to_cgs = 0;
  return tng::cgs_factor(units, hdr.time, hdr.hubble);
}

// A field's unit factor to physical cgs: from the dataset's attributes, or (header_unit_system)
// from the header's unit system raised to the rule's dimensions and the rule's a and h exponents.
CgsFactor field_cgs_factor(const h5::Location& loc, const tng::FieldRule& rule, const Header& hdr) {
  if (hdr.format->unit_source == tng::UnitSource::dataset_attributes)
    return cgs_factor(loc, rule.dataset, hdr);
  const tng::UnitDimensions& d = rule.dimensions;
  tng::UnitAttributes units = rule.tng_units;
  if (d.length != 0 || d.mass != 0 || d.velocity != 0)
    units.to_cgs = std::pow(hdr.unit_length_cm, d.length) * std::pow(hdr.unit_mass_g, d.mass) *
                   std::pow(hdr.unit_velocity_cm_s, d.velocity);
  return tng::cgs_factor(units, hdr.time, hdr.hubble);
}

// Rows [file_row, file_row + rows) of one file's PartTypeN group; file_rows: all its rows.
struct Segment {
  std::string file;
  std::size_t file_row = 0;
  std::size_t rows = 0;
  std::size_t file_rows = 0;
};

// One particle type of the subhalo: the concatenation of its segments (one for a cutout, one
// per chunk file the subhalo's range touches for a snapshot).
// Which of a file's particles belong to the galaxy, for formats without TNG's offsets: a sphere
// (comoving code units, periodic), particle ids, or a SUBFIND (GroupNumber, SubGroupNumber).
struct Membership {
  std::optional<std::array<double, 3>> region_centre;
  double region_radius = 0;
  double box_size = 0;
  std::vector<long long> particle_ids;  // sorted
  std::optional<std::array<long long, 2>> subfind_group;
  bool any() const { return region_centre || !particle_ids.empty() || subfind_group; }
};

struct TypeSource {
  const tng::SnapshotFormat* format = &tng::tng_format();
  std::shared_ptr<const Membership> membership;  // nullptr: every row
  Species species = Species::stars;
  std::string group;
  std::vector<Segment> segments;
  std::size_t rows = 0;
  // Datasets with more columns than their field takes (FieldRule::first_columns): how many.
  std::map<std::string, int> stored_columns;

  // Rows [b, e) of the concatenation, k components each, as double, row-major.
  void read(const std::string& dataset, std::size_t b, std::size_t e, int k, double* out) const {
    std::size_t seg_begin = 0;
    const auto wide = stored_columns.find(dataset);
    const int stored = wide == stored_columns.end() ? k : wide->second;
    const auto ku = static_cast<std::size_t>(k), su = static_cast<std::size_t>(stored);
    for (const auto& s : segments) {
      const std::size_t seg_end = seg_begin + s.rows;
      const std::size_t lo = std::max(b, seg_begin), hi = std::min(e, seg_end);
      if (lo < hi) {
        h5::File f(s.file);
        if (stored == k) {
          f.group(group).read_rows_into<double>(dataset, s.file_row + (lo - seg_begin),
                                                s.file_row + (hi - seg_begin), out + (lo - b) * ku,
                                                static_cast<hsize_t>(k));
        } else {
          std::vector<double> all((hi - lo) * su);
          f.group(group).read_rows_into<double>(dataset, s.file_row + (lo - seg_begin),
                                                s.file_row + (hi - seg_begin), all.data(),
                                                static_cast<hsize_t>(stored));
          for (std::size_t i = 0; i < hi - lo; ++i)
            std::copy_n(all.data() + i * su, ku, out + (lo - b + i) * ku);
        }
      }
      seg_begin = seg_end;
      if (seg_begin >= e) break;
    }
  }

  std::string describe(const std::string& dataset) const {
    return segments.empty() ? group + "/" + dataset
                            : segments.front().file + ":/" + group + "/" + dataset;
  }

  // "row R of FILE" for a row of the concatenation.
  std::string locate(std::size_t row) const {
    std::size_t seg_begin = 0;
    for (const auto& s : segments) {
      if (row < seg_begin + s.rows)
        return "row " + std::to_string(s.file_row + row - seg_begin) + " of " + s.file;
      seg_begin += s.rows;
    }
    return "row " + std::to_string(row);
  }
};

TypeSource single_file_source(const std::string& file, Species species,
                              const tng::SnapshotFormat& format = tng::tng_format()) {
  TypeSource src;
  src.format = &format;
  src.species = species;
  src.group = format.group(species);
  h5::File f(file);
  const auto g = f.group(src.group);
  if (!g.exists("Coordinates"))
    throw InputError(g.describe("Coordinates") + ": required dataset missing");
  const auto shape = g.shape("Coordinates");
  src.rows = shape.empty() ? 0 : shape[0];
  src.segments.push_back({file, 0, src.rows, src.rows});
  return src;
}

// The chunk files of a multi-file snapshot (Header NumFilesPerSnapshot > 1) that `path` is one of,
// named <base>.<k>.hdf5 as SWIFT, EAGLE, Gadget-4 and GIZMO name them: all n of them, each
// required. None for a name of another pattern (SWIFT's virtual file, <base>.hdf5, holds all the
// particles itself).
std::vector<std::string> chunk_files(const std::string& path, int n) {
  const fs::path p(path);
  const std::string name = p.filename().string();
  const std::string suffix = ".hdf5";
  if (name.size() <= suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return {};
  const std::string stem = name.substr(0, name.size() - suffix.size());
  const auto dot = stem.rfind('.');
  if (dot == std::string::npos || dot + 1 == stem.size() ||
      stem.find_first_not_of("0123456789", dot + 1) != std::string::npos)
    return {};
  std::vector<std::string> files;
  for (int k = 0; k < n; ++k) {
    const std::string file =
        (p.parent_path() / (stem.substr(0, dot + 1) + std::to_string(k) + suffix)).string();
    if (!fs::is_regular_file(file))
      throw InputError(file + ": chunk file " + std::to_string(k) + " of the " + std::to_string(n) +
                       " (Header NumFilesPerSnapshot of " + path + ") missing");
    files.push_back(file);
  }
  return files;
}

// One particle type over every chunk file: each file's rows in file order.
TypeSource chunked_source(const std::vector<std::string>& files, Species species,
                          const tng::SnapshotFormat& format) {
  TypeSource src;
  src.format = &format;
  src.species = species;
  src.group = format.group(species);
  for (const auto& file : files) {
    h5::File f(file);
    if (!f.exists(src.group)) continue;
    const auto g = f.group(src.group);
    const char* coordinates = format.rule_for(species, "position_kpc")->dataset;
    if (!g.exists(coordinates)) continue;
    const auto shape = g.shape(coordinates);
    const std::size_t rows = shape.empty() ? 0 : shape[0];
    if (rows == 0) continue;
    src.segments.push_back({file, 0, rows, rows});
    src.rows += rows;
  }
  return src;
}

struct PresentField {
  const FieldRule* rule;
  double factor;  // stored value -> target unit
};

// Checks every table field of the source's species in every file it touches: required fields
// exist, row counts and components match, unit attributes are there and fit the target unit.
std::vector<PresentField> check_fields(TypeSource& src, const Header& hdr) {
  std::vector<const FieldRule*> rules;
  for (const auto& r : hdr.format->fields)
    if (r.species == src.species) rules.push_back(&r);
  std::vector<std::size_t> present(rules.size(), 0);
  std::vector<double> factors(rules.size(), 1.0);
  for (std::size_t s = 0; s < src.segments.size(); ++s) {
    const auto& seg = src.segments[s];
    h5::File f(seg.file);
    const auto g = f.group(src.group);
    for (std::size_t i = 0; i < rules.size(); ++i) {
      const FieldRule& r = *rules[i];
      if (!g.exists(r.dataset)) {
        if (r.required) throw InputError(g.describe(r.dataset) + ": required dataset missing");
        continue;
      }
      const auto shape = g.shape(r.dataset);
      const std::size_t rows = shape.empty() ? 0 : shape[0];
      std::size_t components = 1;
      for (std::size_t d = 1; d < shape.size(); ++d) components *= shape[d];
      if (shape.empty() || rows != seg.file_rows)
        throw InputError(g.describe(r.dataset) + ": shape mismatch: " + std::to_string(rows) +
                         " rows, expected " + std::to_string(seg.file_rows) + " (the rows of " +
                         src.group + "/Coordinates)");
      if (r.first_columns && components > static_cast<std::size_t>(r.components)) {
        src.stored_columns[r.dataset] = static_cast<int>(components);
      } else if (components != static_cast<std::size_t>(r.components)) {
        throw InputError(g.describe(r.dataset) + ": shape mismatch: " + std::to_string(components) +
                         " component(s) per row, expected " + std::to_string(r.components));
      }
      if (present[i]++ == 0)
        factors[i] =
            target_factor(field_cgs_factor(g, r, hdr), r.target_unit_cgs, g.describe(r.dataset));
    }
  }
  std::vector<PresentField> out;
  for (std::size_t i = 0; i < rules.size(); ++i) {
    if (present[i] == 0) continue;
    if (present[i] != src.segments.size())
      throw InputError(src.describe(rules[i]->dataset) +
                       ": present in some chunk files of the subhalo and missing in others");
    out.push_back({rules[i], factors[i]});
  }
  return out;
}

// The present field that fills a GalaxyData field ("position_kpc"), or nullptr.
const PresentField* find_field(const std::vector<PresentField>& fields, const char* target) {
  for (const auto& f : fields)
    if (std::string(f.rule->target) == target) return &f;
  return nullptr;
}

using Frame = tng::ConversionFrame;
using tng::periodic_offset;

// Which rows of [begin, end) of the source hold a non-finite value in any present field: only
// for drop_nonfinite.
std::vector<char> scan_nonfinite(const TypeSource& src, const std::vector<PresentField>& fields,
                                 std::size_t begin, std::size_t end) {
  std::vector<char> bad(end - begin, 0);
  constexpr std::size_t kBlock = 1 << 16;
  for (const auto& f : fields) {
    const int k = f.rule->components;
    std::vector<double> block;
    for (std::size_t b = begin; b < end; b += kBlock) {
      const std::size_t e = std::min(end, b + kBlock);
      block.resize((e - b) * static_cast<std::size_t>(k));
      src.read(f.rule->dataset, b, e, k, block.data());
      for (std::size_t i = 0; i < block.size(); ++i)
        if (!std::isfinite(block[i])) bad[b - begin + i / static_cast<std::size_t>(k)] = 1;
    }
  }
  return bad;
}

[[noreturn]] void throw_nonfinite(const TypeSource& src, const char* dataset, std::size_t count,
                                  std::size_t first_row) {
  throw InputError(src.describe(dataset) + ": " + std::to_string(count) +
                   " non-finite value(s) (NaN or Inf), the first at " + src.locate(first_row) +
                   "; the run config key input.drop_nonfinite set to true (--set "
                   "input.drop_nonfinite=true; ifusim inspect: --drop-nonfinite) drops such "
                   "particles instead");
}

// The values of a field outside its bounds (tng_fields.h): their count and the first (row, value),
// gathered over blocks and devices.
struct OutOfBounds {
  std::size_t count = 0, first_row = std::numeric_limits<std::size_t>::max();
  double first_value = 0;
  void add(std::size_t row, double value) {
    ++count;
    if (row < first_row) {
      first_row = row;
      first_value = value;
    }
  }
  void merge(const OutOfBounds& other) {
    if (other.first_row < first_row) {
      first_row = other.first_row;
      first_value = other.first_value;
    }
    count += other.count;
  }
};

void throw_out_of_bounds(const TypeSource& src, const FieldRule& rule, const OutOfBounds& bad,
                         double snapshot_scale_factor) {
  if (!bad.count) return;
  std::ostringstream value;
  value << bad.first_value;
  throw InputError(src.describe(rule.dataset) + ": " + std::to_string(bad.count) +
                   " value(s) out of range, the first at " + src.locate(bad.first_row) + " (" +
                   value.str() + "); expected " +
                   tng::bounds_text(rule.bounds, snapshot_scale_factor));
}

// Each device reads the covering row range of its slice of the selected rows by hyperslab,
// keeps the selected rows, checks them against the field's bounds and converts them.
ShardedArray<float> read_field(const Mesh& mesh, const TypeSource& src, const PresentField& f,
                               const std::vector<std::size_t>& selected, const Frame& frame) {
  const int k = f.rule->components;
  const std::size_t ku = static_cast<std::size_t>(k);
  std::mutex mutex;
  std::size_t bad_count = 0, first_bad = std::numeric_limits<std::size_t>::max();
  OutOfBounds out_of_bounds;
  auto array = from_callback<float>(
      mesh, selected.size(), k, Sharding::sharded(), [&](IndexRange r, float* out) {
        const std::size_t raw_b = selected[r.begin], raw_e = selected[r.end - 1] + 1;
        std::vector<double> raw((raw_e - raw_b) * ku);
        src.read(f.rule->dataset, raw_b, raw_e, k, raw.data());
        std::size_t bad = 0, first = std::numeric_limits<std::size_t>::max();
        OutOfBounds outside;
        for (std::size_t i = r.begin; i < r.end; ++i) {
          const double* v = raw.data() + (selected[i] - raw_b) * ku;
          float* o = out + (i - r.begin) * ku;
          for (int c = 0; c < k; ++c) {
            if (!std::isfinite(v[c])) {
              ++bad;
              first = std::min(first, selected[i]);
              o[c] = static_cast<float>(v[c]);
              continue;
            }
            if (!tng::within_bounds(f.rule->bounds, v[c], frame.snapshot_scale_factor))
              outside.add(selected[i], v[c]);
            o[c] = static_cast<float>(
                tng::convert_value(f.rule->conversion, f.factor, v[c], c, frame));
          }
        }
        if (bad || outside.count) {
          std::lock_guard lock(mutex);
          bad_count += bad;
          first_bad = std::min(first_bad, first);
          out_of_bounds.merge(outside);
        }
      });
  if (bad_count) throw_nonfinite(src, f.rule->dataset, bad_count, first_bad);
  throw_out_of_bounds(src, *f.rule, out_of_bounds, frame.snapshot_scale_factor);
  return array;
}

// Field `f` from values already read and checked by a pass over the stars (hold_star_rows:
// finite, within the field's bounds), `raw` holding the selected rows' k components each in
// the file's units, converted as read_field converts them: the same floats without reading
// the dataset again.
ShardedArray<float> convert_held(const Mesh& mesh, const PresentField& f, const double* raw,
                                 std::size_t rows, const Frame& frame) {
  const std::size_t ku = static_cast<std::size_t>(f.rule->components);
  return from_callback<float>(
      mesh, rows, f.rule->components, Sharding::sharded(), [&](IndexRange r, float* out) {
        for (std::size_t i = r.begin; i < r.end; ++i)
          for (std::size_t c = 0; c < ku; ++c)
            out[(i - r.begin) * ku + c] = static_cast<float>(tng::convert_value(
                f.rule->conversion, f.factor, raw[i * ku + c], static_cast<int>(c), frame));
      });
}

// Where the subhalo's centre, bulk velocity and half-mass radius come from.
struct Centre {
  std::array<double, 3> center_code{0, 0, 0};
  std::array<double, 3> bulk_velocity_kms{0, 0, 0};
  double halfmass_radius_kpc = 0;
};

// One of the centring's fields (Coordinates, Masses, Velocities) read raw in double, with what
// its checks found so far.
struct CheckedField {
  const FieldRule& rule;
  std::vector<double> values;
  std::size_t bad = 0, first_bad = 0;
  OutOfBounds outside;

  // The selected `rows` (ascending) of the dataset into `values`, k components each: the span
  // from the first to the last is read, then the selected rows are moved down over the others
  // in place (a row's new place is never after its old one), so that no second array of the
  // selection is made (at 1e6 stars, 56 MB of fresh pages less for the three fields).
  void read(const TypeSource& src, const std::vector<std::size_t>& rows,
            double snapshot_scale_factor) {
    const auto k = static_cast<std::size_t>(rule.components);
    values.resize((rows.back() + 1 - rows.front()) * k);
    src.read(rule.dataset, rows.front(), rows.back() + 1, rule.components, values.data());
    std::size_t to = 0;
    for (const std::size_t row : rows)
      for (std::size_t c = 0; c < k; ++c) {
        const double v = values[(row - rows.front()) * k + c];
        if (!std::isfinite(v)) {
          if (bad++ == 0) first_bad = row;
        } else if (!tng::within_bounds(rule.bounds, v, snapshot_scale_factor)) {
          outside.add(row, v);
        }
        values[to++] = v;
      }
    values.resize(to);
  }
  // Throws, naming the dataset, the count and the first row, if a value read was not finite or
  // outside the field's bounds (a mass <= 0).
  void check(const TypeSource& src, double snapshot_scale_factor) const {
    if (bad) throw_nonfinite(src, rule.dataset, bad, first_bad);
    throw_out_of_bounds(src, rule, outside, snapshot_scale_factor);
  }
};

// Passes over the stars of a source: each block of `block_rows` source rows gives its selected
// rows (`rows_in`), whose Coordinates, Masses (and Velocities) are read raw in double. A pass
// that saw a non-finite value, or one outside its field's bounds (a mass <= 0), throws at its
// end, naming the dataset, the count and the first row.
tng::VisitStarBlocks visit_star_rows(
    const TypeSource& src,
    std::function<std::vector<std::size_t>(std::size_t begin, std::size_t end)> rows_in,
    std::size_t block_rows, double snapshot_scale_factor) {
  return [&src, rows_in = std::move(rows_in), block_rows, snapshot_scale_factor](
             bool velocities, const std::function<void(const tng::CentreBlock&)>& block) {
    CheckedField fields[3] = {{*src.format->rule_for(src.species, "position_kpc"), {}, 0, 0, {}},
                              {*src.format->rule_for(src.species, "mass_msun"), {}, 0, 0, {}},
                              {*src.format->rule_for(src.species, "velocity_kms"), {}, 0, 0, {}}};
    for (std::size_t b = 0; b < src.rows; b += block_rows) {
      const std::vector<std::size_t> rows = rows_in(b, std::min(src.rows, b + block_rows));
      if (rows.empty()) continue;
      for (CheckedField& f : fields)
        if (velocities || &f != &fields[2]) f.read(src, rows, snapshot_scale_factor);
      block({fields[0].values.data(), fields[1].values.data(),
             velocities ? fields[2].values.data() : nullptr, rows.size()});
    }
    for (const CheckedField& f : fields) f.check(src, snapshot_scale_factor);
  };
}

// Passes over stars held at once: Coordinates, Masses and Velocities of the selected `rows` are
// read (and checked) once, straight into the arrays every pass is then handed (four passes read
// every field four times; a copy of each block's values into the held arrays was a second copy).
tng::VisitStarBlocks hold_star_rows(const TypeSource& src, const std::vector<std::size_t>& rows,
                                    double snapshot_scale_factor) {
  struct Held {
    CheckedField coordinates, masses, velocities;
  };
  auto held = std::make_shared<Held>(
      Held{{*src.format->rule_for(src.species, "position_kpc"), {}, 0, 0, {}},
           {*src.format->rule_for(src.species, "mass_msun"), {}, 0, 0, {}},
           {*src.format->rule_for(src.species, "velocity_kms"), {}, 0, 0, {}}});
  if (!rows.empty())
    for (CheckedField* f : {&held->coordinates, &held->masses, &held->velocities}) {
      f->read(src, rows, snapshot_scale_factor);
      f->check(src, snapshot_scale_factor);
    }
  return [held, n = rows.size()](bool velocities,
                                 const std::function<void(const tng::CentreBlock&)>& block) {
    if (n == 0) return;
    block({held->coordinates.values.data(), held->masses.values.data(),
           velocities ? held->velocities.values.data() : nullptr, n});
  };
}

// The centre of a cutout (io/tng/stellar_centre.h); `budget`: the stars one step may hold.
Centre centre_from_stars(const std::vector<PresentField>& fields, const tng::VisitStarBlocks& visit,
                         double box, std::size_t budget) {
  const tng::StellarCentre found =
      tng::find_stellar_centre(visit, box, find_field(fields, "position_kpc")->factor,
                               find_field(fields, "velocity_kms")->factor, budget);
  return {found.center_code, found.bulk_velocity_kms, found.halfmass_radius_kpc};
}

// ---- full snapshots -----------------------------------------------------------------------

std::string pad3(int snapshot) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%03d", snapshot);
  return buf;
}

struct SnapshotFiles {
  fs::path base;
  int snapshot;
  std::string snap_file(int k) const {
    return (base / ("snapdir_" + pad3(snapshot)) /
            ("snap_" + pad3(snapshot) + "." + std::to_string(k) + ".hdf5"))
        .string();
  }
  std::string group_file(int k) const {
    return (base / ("groups_" + pad3(snapshot)) /
            ("fof_subhalo_tab_" + pad3(snapshot) + "." + std::to_string(k) + ".hdf5"))
        .string();
  }
  std::string offsets_file() const {
    const fs::path here = base / ("offsets_" + pad3(snapshot) + ".hdf5");
    const fs::path post =
        base / "postprocessing" / "offsets" / ("offsets_" + pad3(snapshot) + ".hdf5");
    if (!fs::exists(here) && fs::exists(post)) return post.string();
    return here.string();
  }
};

void require_file(const std::string& file, const std::string& what) {
  if (!fs::is_regular_file(file)) throw InputError(file + ": " + what + " missing");
}

// TNG data specification units of the catalog fields ifusim reads, as (a_scaling, h_scaling,
// to_cgs): used only where a catalog dataset carries no unit attributes of its own (Subfind
// catalogs of some releases and of the synthetic generator have none). SubhaloVel is already a
// peculiar velocity in km/s (a_scaling 0), unlike the particles' Velocities.
struct CatalogUnits {
  const char* dataset;
  tng::UnitAttributes units;
};
constexpr CatalogUnits kCatalogUnits[] = {
    {"SubhaloPos", {1.0, -1.0, tng::kKpcCm}},
    {"SubhaloVel", {0.0, 0.0, tng::kKmCm}},
    {"SubhaloHalfmassRadType", {1.0, -1.0, tng::kKpcCm}},
    {"SubhaloMassType", {0.0, -1.0, 1.0e10 * tng::kMsunG}},
    {"SubhaloSFR", {0.0, 0.0, tng::kMsunG / tng::kJulianYearS}},
};

// Rows [begin, end) of a group-catalog dataset (end: npos for all), converted with its own unit
// attributes (or the data specification's, see kCatalogUnits).
std::vector<double> catalog_rows(const h5::Location& subhalo, const std::string& dataset,
                                 std::size_t begin, std::size_t end, int components,
                                 const Header& hdr, double target_unit_cgs) {
  if (!subhalo.exists(dataset))
    throw InputError(subhalo.describe(dataset) + ": required dataset missing");
  const auto shape = subhalo.shape(dataset);
  const std::size_t rows = shape.empty() ? 0 : shape[0];
  if (end == std::string::npos) end = rows;
  if (rows < end)
    throw InputError(subhalo.describe(dataset) + ": has " + std::to_string(rows) + " rows, row " +
                     std::to_string(end - 1) + " expected");
  auto values = subhalo.read_rows<double>(dataset, begin, end, static_cast<hsize_t>(components));
  CgsFactor cgs;
  if (subhalo.has_attribute("to_cgs", dataset)) {
    cgs = cgs_factor(subhalo, dataset, hdr);
  } else {
    const CatalogUnits* u = nullptr;
    for (const auto& c : kCatalogUnits)
      if (dataset == c.dataset) u = &c;
    if (!u) throw InputError(subhalo.describe(dataset) + ": attribute \"to_cgs\" not found");
    cgs = tng::cgs_factor(u->units, hdr.time, hdr.hubble);
  }
  const double f = target_factor(cgs, target_unit_cgs, subhalo.describe(dataset));
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] *= f;
    if (!std::isfinite(values[i]))
      throw InputError(subhalo.describe(dataset) + ": non-finite value in row " +
                       std::to_string(begin + i / static_cast<std::size_t>(components)));
  }
  return values;
}

std::vector<double> catalog_row(const h5::Location& subhalo, const std::string& dataset,
                                std::size_t row, int components, const Header& hdr,
                                double target_unit_cgs) {
  return catalog_rows(subhalo, dataset, row, row + 1, components, hdr, target_unit_cgs);
}

struct CatalogEntry {
  Centre centre;
  std::array<std::int64_t, 6> offset{};  // first particle of each type in the snapshot
  std::array<std::int64_t, 6> length{};
};

CatalogEntry read_catalog(const SnapshotFiles& files, long long id, const Header& hdr,
                          double coordinates_cgs_per_code) {
  require_file(files.group_file(0), "group catalog file 0");
  h5::File g0(files.group_file(0));
  const auto gh = g0.group("Header");
  const auto total = gh.attribute<std::int64_t>("Nsubgroups_Total");
  const int n_group_files = static_cast<int>(gh.attribute<std::int64_t>("NumFiles"));
  if (id < 0 || id >= total)
    throw InputError(gh.describe() + ": subhalo id " + std::to_string(id) +
                     " out of range: Nsubgroups_Total is " + std::to_string(total));

  const std::string offsets_path = files.offsets_file();
  require_file(offsets_path, "offsets file");
  h5::File offsets(offsets_path);

  // The group-catalog file holding the subhalo: FileOffsets/Subhalo when the offsets file has
  // it, else a walk over the headers' Nsubgroups_ThisFile.
  int file = -1;
  std::size_t local = 0;
  if (offsets.exists("FileOffsets/Subhalo")) {
    const auto starts = offsets.read<std::int64_t>("FileOffsets/Subhalo");
    for (int k = 0; k < static_cast<int>(starts.size()) && k < n_group_files; ++k)
      if (starts[static_cast<std::size_t>(k)] <= id) file = k;
    if (file >= 0) local = static_cast<std::size_t>(id - starts[static_cast<std::size_t>(file)]);
  } else {
    std::int64_t first = 0;
    for (int k = 0; k < n_group_files; ++k) {
      require_file(files.group_file(k), "group catalog file " + std::to_string(k));
      const auto n = h5::File(files.group_file(k))
                         .group("Header")
                         .attribute<std::int64_t>("Nsubgroups_ThisFile");
      if (id < first + n) {
        file = k;
        local = static_cast<std::size_t>(id - first);
        break;
      }
      first += n;
    }
  }
  if (file < 0)
    throw InputError(files.group_file(0) + ": subhalo " + std::to_string(id) +
                     " is in none of the " + std::to_string(n_group_files) + " catalog files");
  require_file(files.group_file(file), "group catalog file " + std::to_string(file));
  h5::File gf(files.group_file(file));
  const auto sub = gf.group("Subhalo");

  CatalogEntry e;
  const auto pos_cgs = catalog_row(sub, "SubhaloPos", local, 3, hdr, 1.0);  // cm
  for (int c = 0; c < 3; ++c) e.centre.center_code[c] = pos_cgs[c] / coordinates_cgs_per_code;
  const auto vel = catalog_row(sub, "SubhaloVel", local, 3, hdr, tng::kKmCm);
  for (int c = 0; c < 3; ++c) e.centre.bulk_velocity_kms[c] = vel[c];
  e.centre.halfmass_radius_kpc =
      catalog_row(sub, "SubhaloHalfmassRadType", local, 6, hdr, tng::kKpcCm)[4];
  if (!sub.exists("SubhaloLenType"))
    throw InputError(sub.describe("SubhaloLenType") + ": required dataset missing");
  const auto len = sub.read_rows<std::int64_t>("SubhaloLenType", local, local + 1, 6);
  std::copy(len.begin(), len.end(), e.length.begin());

  const std::string by_type = "Subhalo/SnapByType";
  if (!offsets.exists(by_type))
    throw InputError(offsets.describe(by_type) + ": required dataset missing");
  const auto oshape = offsets.shape(by_type);
  if (oshape.empty() || oshape[0] <= static_cast<hsize_t>(id))
    throw InputError(offsets.describe(by_type) + ": has " +
                     std::to_string(oshape.empty() ? 0 : oshape[0]) + " rows, subhalo " +
                     std::to_string(id) + " expected");
  const auto off = offsets.read_rows<std::int64_t>(by_type, static_cast<hsize_t>(id),
                                                   static_cast<hsize_t>(id) + 1, 6);
  std::copy(off.begin(), off.end(), e.offset.begin());
  return e;
}

// The chunk files (and rows within them) that hold particles [offset, offset + length) of a type.
TypeSource snapshot_source(const SnapshotFiles& files, int n_files, h5::File& offsets_file,
                           Species species, std::int64_t offset, std::int64_t length) {
  TypeSource src;
  src.species = species;
  src.group = tng::part_type_group(species);
  const int type = species == Species::stars ? 4 : 0;
  if (length <= 0) return src;
  int k0 = 0;
  std::int64_t first = 0;  // first particle of file k
  if (offsets_file.exists("FileOffsets/SnapByType")) {
    const auto fo = offsets_file.read<std::int64_t>("FileOffsets/SnapByType");
    for (int k = 0; k < n_files && static_cast<std::size_t>(6 * k + type) < fo.size(); ++k)
      if (fo[static_cast<std::size_t>(6 * k + type)] <= offset) {
        k0 = k;
        first = fo[static_cast<std::size_t>(6 * k + type)];
      }
  }
  const std::int64_t end = offset + length;
  for (int k = k0; k < n_files && static_cast<std::int64_t>(src.rows) < length; ++k) {
    const std::string file = files.snap_file(k);
    require_file(file,
                 "snapshot chunk file " + std::to_string(k) + " of " + std::to_string(n_files));
    h5::File f(file);
    std::int64_t rows = 0;
    if (f.exists(src.group)) {
      const auto g = f.group(src.group);
      if (!g.exists("Coordinates"))
        throw InputError(g.describe("Coordinates") + ": required dataset missing");
      rows = static_cast<std::int64_t>(g.shape("Coordinates").at(0));
    }
    const std::int64_t lo = std::max(offset, first), hi = std::min(end, first + rows);
    if (lo < hi) {
      src.segments.push_back({file, static_cast<std::size_t>(lo - first),
                              static_cast<std::size_t>(hi - lo), static_cast<std::size_t>(rows)});
      src.rows += static_cast<std::size_t>(hi - lo);
    }
    first += rows;
  }
  if (static_cast<std::int64_t>(src.rows) < length)
    throw InputError(files.snap_file(n_files - 1) + ": the subhalo's " + src.group +
                     " particles [" + std::to_string(offset) + ", " + std::to_string(end) +
                     ") run past the last of the " + std::to_string(n_files) +
                     " chunk files (offsets file and snapshot disagree)");
  return src;
}

// ---- shared ----------------------------------------------------------------------------------

struct Selection {
  std::vector<std::size_t> rows;  // of the source, ascending
  std::size_t wind = 0;
  std::size_t nonfinite = 0;
  std::size_t outside = 0;  // not members of the galaxy asked for (Membership)
};

// Which rows of [begin, end) are members of the galaxy asked for (all without a Membership).
std::vector<char> member_rows(const TypeSource& src, std::size_t begin, std::size_t end) {
  std::vector<char> member(end - begin, 1);
  if (!src.membership || end == begin) return member;
  const Membership& m = *src.membership;
  const std::size_t n = end - begin;
  if (m.region_centre) {
    std::vector<double> x(3 * n);
    src.read(src.format->rule_for(src.species, "position_kpc")->dataset, begin, end, 3, x.data());
    for (std::size_t i = 0; i < n; ++i) {
      double r2 = 0;
      for (std::size_t c = 0; c < 3; ++c) {
        const double d = periodic_offset(x[3 * i + c] - (*m.region_centre)[c], m.box_size);
        r2 += d * d;
      }
      if (!(r2 <= m.region_radius * m.region_radius)) member[i] = 0;
    }
  }
  auto integers = [&](const char* dataset) {
    std::vector<std::int64_t> v(n);
    const std::string where = src.describe(dataset);
    std::size_t seg_begin = 0;
    for (const auto& s : src.segments) {
      const std::size_t lo = std::max(begin, seg_begin), hi = std::min(end, seg_begin + s.rows);
      if (lo < hi) {
        h5::File f(s.file);
        const auto g = f.group(src.group);
        if (!g.exists(dataset))
          throw InputError(g.describe(dataset) +
                           ": required dataset missing (the galaxy is "
                           "selected by it)");
        g.read_rows_into<std::int64_t>(dataset, s.file_row + (lo - seg_begin),
                                       s.file_row + (hi - seg_begin), v.data() + (lo - begin), 1);
      }
      seg_begin += s.rows;
    }
    return v;
  };
  if (!m.particle_ids.empty()) {
    const auto ids = integers("ParticleIDs");
    for (std::size_t i = 0; i < n; ++i)
      if (!std::binary_search(m.particle_ids.begin(), m.particle_ids.end(), ids[i])) member[i] = 0;
  }
  if (m.subfind_group) {
    const auto group = integers("GroupNumber");
    const auto subgroup = integers("SubGroupNumber");
    for (std::size_t i = 0; i < n; ++i)
      if (group[i] != (*m.subfind_group)[0] || subgroup[i] != (*m.subfind_group)[1]) member[i] = 0;
  }
  return member;
}

// The rows of [begin, end) of the source (default: all) that are particles: a star's wind cells
// (GFM_StellarFormationTime <= 0) are dropped, and with drop_nonfinite the rows holding a NaN or
// Inf in any present field; without it such a formation time is an error.
Selection select_rows(const TypeSource& src, const std::vector<PresentField>& fields,
                      bool drop_nonfinite, std::size_t begin = 0,
                      std::size_t end = std::numeric_limits<std::size_t>::max()) {
  end = std::min(end, src.rows);
  Selection sel;
  std::vector<char> bad;
  if (drop_nonfinite) bad = scan_nonfinite(src, fields, begin, end);
  std::vector<double> sft;
  const std::vector<char> member = member_rows(src, begin, end);
  if (src.species == Species::stars && src.format->wind_cells) {
    const char* formation = src.format->rule_for(Species::stars, "age_gyr")->dataset;
    sft.resize(end - begin);
    src.read(formation, begin, end, 1, sft.data());
    if (!drop_nonfinite) {
      std::size_t count = 0, first = 0;
      for (std::size_t i = 0; i < sft.size(); ++i)
        if (member[i] && !std::isfinite(sft[i]) && count++ == 0) first = begin + i;
      if (count) throw_nonfinite(src, formation, count, first);
    }
  }
  sel.rows.reserve(end - begin);
  for (std::size_t row = begin; row < end; ++row) {
    const std::size_t i = row - begin;
    if (!member[i]) {
      ++sel.outside;
    } else if (!sft.empty() && std::isfinite(sft[i]) && sft[i] <= 0) {
      ++sel.wind;  // GFM_StellarFormationTime <= 0: a wind cell, not a star
    } else if (drop_nonfinite && bad[i]) {
      ++sel.nonfinite;
    } else {
      sel.rows.push_back(row);
    }
  }
  return sel;
}

// No star among the rows (all wind cells or, with drop_nonfinite, non-finite); the counts when
// known.
[[noreturn]] void throw_no_stars(const TypeSource& src, const Selection* sel = nullptr) {
  std::string counts = sel ? " (" + std::to_string(sel->wind) + " wind cells, " +
                                 std::to_string(sel->nonfinite) + " non-finite"
                           : std::string(" (wind cells, non-finite rows or non-members only");
  if (sel && src.membership) counts += ", " + std::to_string(sel->outside) + " not selected";
  throw InputError(src.describe(src.format->rule_for(Species::stars, "age_gyr")->dataset) +
                   ": no star particles" + counts + ")");
}

template <class Set>
void read_species(const Mesh& mesh, const TypeSource& src, const std::vector<PresentField>& fields,
                  const std::vector<std::size_t>& rows, const Frame& frame, Set& set) {
  for (const auto& f : fields)
    tng::assign_field(set, *f.rule, read_field(mesh, src, f, rows, frame));
}

// The gas cells `selected` of `src`, converted in `frame`, with their temperature where the
// file gives what it needs.
Gas read_gas_cells(const Mesh& mesh, const TypeSource& src, const std::vector<PresentField>& fields,
                   const Selection& selected, const Frame& frame) {
  GalaxyData data;
  read_species(mesh, src, fields, selected.rows, frame, data.gas);
  if (!data.gas.internal_energy_km2_s2.empty() && !data.gas.electron_abundance.empty())
    data.gas.temperature_k = tng::gas_temperature(mesh, data.gas);
  return std::move(data.gas);
}

// The layout, header, per-type row sources and (snapshot) catalog entry of the subhalo asked
// for: everything read_tng learns before it reads a particle value.
struct OpenedSubhalo {
  Header hdr;
  TypeSource stars_src, gas_src;
  std::optional<CatalogEntry> catalog;
};

OpenedSubhalo open_subhalo(const TngReadOptions& options, TngIngestReport& rep) {
  OpenedSubhalo o;
  Header& hdr = o.hdr;
  TypeSource &stars_src = o.stars_src, &gas_src = o.gas_src;
  std::optional<CatalogEntry>& catalog = o.catalog;
  const bool directory = fs::is_directory(options.path);
  if (!directory && !fs::exists(options.path))
    throw InputError(options.path + ": no such file or directory");

  const tng::SnapshotFormat& format = options.format ? *options.format : tng::tng_format();
  const bool tng_layout = std::string(format.name) == "tng";
  if (directory && !tng_layout)
    throw InputError(options.path + ": a directory; a " + format.title +
                     " snapshot is read from its file (only IllustrisTNG snapshot folders are "
                     "read as a whole)");
  if (tng_layout &&
      (options.region_centre || !options.particle_ids.empty() || options.subfind_group))
    throw InputError(options.path +
                     ": input.region, input.particle_ids and input.subfind_group select particles "
                     "of a SWIFT, EAGLE or Gadget file; a TNG galaxy is its cutout or subhalo");

  if (!directory) {
    rep.layout = tng_layout ? "cutout" : "file";
    rep.format = format.name;
    hdr = read_header(options.path, format);
    if (options.subhalo_id && hdr.cutout_id >= 0 && *options.subhalo_id != hdr.cutout_id)
      throw InputError(options.path + ":/Header: attribute \"CutoutID\" is " +
                       std::to_string(hdr.cutout_id) + ", subhalo " +
                       std::to_string(*options.subhalo_id) + " was asked for");
    if (options.snapshot && hdr.snapshot >= 0 && *options.snapshot != hdr.snapshot)
      throw InputError(options.path + ":/Header: attribute \"SnapshotNumber\" is " +
                       std::to_string(hdr.snapshot) + ", snapshot " +
                       std::to_string(*options.snapshot) + " was asked for");
    {
      h5::File f(options.path);
      if (!f.exists(format.star_group))
        throw InputError(f.describe(format.star_group) + ": group not found (no star particles)");
      if (options.read_gas && f.exists(format.gas_group))
        gas_src = single_file_source(options.path, Species::gas, format);
    }
    stars_src = single_file_source(options.path, Species::stars, format);
    if (!tng_layout && hdr.num_files > 1) {
      const std::vector<std::string> chunks = chunk_files(options.path, hdr.num_files);
      if (!chunks.empty()) {
        stars_src = chunked_source(chunks, Species::stars, format);
        if (options.read_gas) gas_src = chunked_source(chunks, Species::gas, format);
        rep.layout = "chunked file";
      }
    }
    if (options.region_centre || !options.particle_ids.empty() || options.subfind_group) {
      auto m = std::make_shared<Membership>();
      m->region_centre = options.region_centre;
      m->region_radius = options.region_radius;
      m->box_size = hdr.box_size;
      m->particle_ids = options.particle_ids;
      std::sort(m->particle_ids.begin(), m->particle_ids.end());
      m->subfind_group = options.subfind_group;
      stars_src.membership = m;
      gas_src.membership = m;
    }
    if (hdr.snapshot < 0 && options.snapshot) hdr.snapshot = *options.snapshot;
  } else {
    rep.layout = "snapshot";
    rep.format = format.name;
    if (!options.snapshot || !options.subhalo_id)
      throw InputError(options.path +
                       ": a snapshot directory needs a snapshot number and a subhalo id");
    const SnapshotFiles files{options.path, *options.snapshot};
    require_file(files.snap_file(0), "snapshot chunk file 0");
    hdr = read_header(files.snap_file(0));
    hdr.snapshot = *options.snapshot;
    hdr.cutout_id = *options.subhalo_id;
    // SubhaloPos is converted into the particles' Coordinates code units through cgs.
    double coords_cgs = 0;
    {
      h5::File f0(files.snap_file(0));
      std::string with_coords;
      for (const char* g : {"PartType4", "PartType0"})
        if (f0.exists(std::string(g) + "/Coordinates")) with_coords = g;
      if (with_coords.empty())
        throw InputError(f0.describe("PartType4/Coordinates") +
                         ": not found in chunk file 0 (needed for its unit attributes)");
      const auto cf = cgs_factor(f0.group(with_coords), "Coordinates", hdr);
      if (cf.dimensionless)
        throw InputError(f0.describe(with_coords + "/Coordinates") +
                         ": attribute to_cgs = 0, expected a length");
      coords_cgs = cf.factor;
    }
    catalog = read_catalog(files, *options.subhalo_id, hdr, coords_cgs);
    h5::File offsets(files.offsets_file());
    stars_src = snapshot_source(files, hdr.num_files, offsets, Species::stars, catalog->offset[4],
                                catalog->length[4]);
    if (options.read_gas)
      gas_src = snapshot_source(files, hdr.num_files, offsets, Species::gas, catalog->offset[0],
                                catalog->length[0]);
    if (stars_src.rows == 0)
      throw InputError(files.group_file(0) + ": subhalo " + std::to_string(*options.subhalo_id) +
                       " has no PartType4 particles (SubhaloLenType[4] = 0)");
  }

  return o;
}

// The galaxy record of the subhalo: the header's, the centre's, the ids asked for.
Galaxy galaxy_record(const Header& hdr, const TngReadOptions& options, const Centre& centre,
                     const std::vector<PresentField>& star_fields) {
  Galaxy g;
  g.simulation = hdr.simulation;
  g.snapshot = hdr.snapshot;
  g.subhalo_id = options.subhalo_id ? *options.subhalo_id : hdr.cutout_id;
  g.redshift = hdr.redshift;
  g.scale_factor = hdr.time;
  g.cosmology.name = hdr.simulation.empty() ? "snapshot header" : hdr.simulation;
  g.cosmology.hubble_param = hdr.hubble;
  g.cosmology.omega_matter = hdr.omega0;
  g.cosmology.omega_lambda = hdr.omega_lambda;
  const double pos_factor = find_field(star_fields, "position_kpc")->factor;
  for (int c = 0; c < 3; ++c) g.center_kpc[c] = centre.center_code[c] * pos_factor;
  g.halfmass_radius_stars_kpc = centre.halfmass_radius_kpc;
  return g;
}

Frame conversion_frame(const Galaxy& g, const Header& hdr, const Centre& centre) {
  Frame frame;
  frame.center_code = centre.center_code;
  frame.box_size = hdr.box_size;
  frame.bulk_velocity_kms = centre.bulk_velocity_kms;
  frame.cosmology = g.cosmology;
  frame.time_snapshot_gyr = g.cosmology.cosmic_time_gyr(hdr.time);
  frame.snapshot_scale_factor = hdr.time;
  return frame;
}

}  // namespace

const tng::SnapshotFormat& detect_snapshot_format(const std::string& path) {
  if (fs::is_directory(path)) return tng::tng_format();
  if (!fs::exists(path)) throw InputError(path + ": no such file or directory");
  h5::File f(path);
  // The unit attributes of the first particle dataset found tell the dataset-attribute formats
  // apart; SWIFT's Header "Scale-factor" and Gadget's Header "Time" the others.
  for (const char* group : {"PartType4", "PartType0", "PartType1"}) {
    if (!f.exists(group)) continue;
    const auto g = f.group(group);
    if (!g.exists("Coordinates")) continue;
    for (const tng::SnapshotFormat* format : tng::snapshot_formats())
      if (format->unit_source == tng::UnitSource::dataset_attributes &&
          g.has_attribute(format->to_cgs_attribute, "Coordinates"))
        return *format;
  }
  if (f.exists("Header")) {
    const auto h = f.group("Header");
    if (h.has_attribute("Scale-factor")) return tng::swift_format();
    if (h.has_attribute("Time") && (f.exists("PartType4") || f.exists("PartType0")))
      return tng::gadget_format();
  }
  throw InputError(path +
                   ": not a snapshot ifusim reads: no IllustrisTNG (to_cgs), SWIFT (\"Conversion "
                   "factor to CGS ...\"), EAGLE (CGSConversionFactor) unit attributes on "
                   "PartTypeN/Coordinates, nor a Gadget/AREPO/GIZMO Header with Time and PartType0 "
                   "or PartType4 (input.format: tng, swift, eagle, gadget, rubix)");
}

std::vector<SubhaloSummary> read_subhalo_catalog(const std::string& snapshot_dir, int snapshot) {
  const SnapshotFiles files{snapshot_dir, snapshot};
  require_file(files.snap_file(0), "snapshot chunk file 0");
  require_file(files.group_file(0), "group catalog file 0");
  require_file(files.offsets_file(), "offsets file");
  const Header hdr = read_header(files.snap_file(0));
  const int n_group_files = static_cast<int>(
      h5::File(files.group_file(0)).group("Header").attribute<std::int64_t>("NumFiles"));
  std::vector<SubhaloSummary> out;
  for (int k = 0; k < n_group_files; ++k) {
    require_file(files.group_file(k), "group catalog file " + std::to_string(k));
    h5::File f(files.group_file(k));
    const auto n =
        static_cast<std::size_t>(f.group("Header").attribute<std::int64_t>("Nsubgroups_ThisFile"));
    if (n == 0) continue;
    const auto sub = f.group("Subhalo");
    if (!sub.exists("SubhaloLenType"))
      throw InputError(sub.describe("SubhaloLenType") + ": required dataset missing");
    const auto len = sub.read_rows<std::int64_t>("SubhaloLenType", 0, n, 6);
    const auto mass = catalog_rows(sub, "SubhaloMassType", 0, n, 6, hdr, tng::kMsunG);
    const auto sfr = catalog_rows(sub, "SubhaloSFR", 0, n, 1, hdr, tng::kMsunG / tng::kJulianYearS);
    for (std::size_t i = 0; i < n; ++i)
      out.push_back({static_cast<long long>(out.size()), static_cast<std::size_t>(len[6 * i + 4]),
                     static_cast<std::size_t>(len[6 * i]), mass[6 * i + 4], sfr[i]});
  }
  return out;
}

TngCounts count_tng(const TngReadOptions& options) {
  TngIngestReport rep;
  const OpenedSubhalo o = open_subhalo(options, rep);
  return {o.stars_src.rows, o.gas_src.rows};
}

GalaxyData read_tng(const Mesh& mesh, const TngReadOptions& options, TngIngestReport* report) {
  TngIngestReport rep;
  OpenedSubhalo opened = open_subhalo(options, rep);
  Header& hdr = opened.hdr;
  TypeSource &stars_src = opened.stars_src, &gas_src = opened.gas_src;
  std::optional<CatalogEntry>& catalog = opened.catalog;

  const auto star_fields = check_fields(stars_src, hdr);
  const auto gas_fields =
      gas_src.segments.empty() ? std::vector<PresentField>{} : check_fields(gas_src, hdr);
  const Selection stars_sel = select_rows(stars_src, star_fields, options.drop_nonfinite);
  if (stars_sel.rows.empty()) throw_no_stars(stars_src, &stars_sel);
  Selection gas_sel;
  if (!gas_src.segments.empty()) gas_sel = select_rows(gas_src, gas_fields, options.drop_nonfinite);

  Centre centre;
  std::future<Centre> centring;
  tng::VisitStarBlocks held_stars;  // a cutout's Coordinates, Masses, Velocities, held once read
  if (catalog) {
    centre = catalog->centre;
    rep.center_method = "SubhaloPos";
  } else {
    // Held at once: one block of all the rows, and every star fits the budget. The block is
    // read (and checked) here; the centre is then found on another thread while this one reads
    // the fields whose values do not depend on it (the HDF5 calls stay on this thread).
    const std::vector<std::size_t>& selected = stars_sel.rows;
    const tng::VisitStarBlocks visit = hold_star_rows(stars_src, selected, hdr.time);
    held_stars = visit;
    centring = std::async(std::launch::async,
                          [&star_fields, visit, box = hdr.box_size, budget = selected.size()] {
                            return centre_from_stars(star_fields, visit, box, budget);
                          });
    rep.center_method = "shrinking spheres";
  }

  // Masses, metallicities, ages: converted without the centre (a frame with none).
  std::vector<PresentField> centred_fields, other_fields;
  for (const auto& f : star_fields)
    (f.rule->conversion == tng::Conversion::position ||
             f.rule->conversion == tng::Conversion::velocity
         ? centred_fields
         : other_fields)
        .push_back(f);
  GalaxyData data;
  read_species(mesh, stars_src, other_fields, stars_sel.rows,
               conversion_frame(galaxy_record(hdr, options, Centre{}, star_fields), hdr, Centre{}),
               data.stars);
  if (centring.valid()) centre = centring.get();
  data.galaxy = galaxy_record(hdr, options, centre, star_fields);
  const Frame frame = conversion_frame(data.galaxy, hdr, centre);
  // Positions and velocities: a cutout's were read (and checked) for the centring and are held;
  // converted from there, not read from the file a second time.
  if (held_stars) {
    held_stars(true, [&](const tng::CentreBlock& b) {
      for (const auto& f : centred_fields) {
        const double* raw =
            f.rule == stars_src.format->rule_for(Species::stars, "position_kpc")   ? b.coordinates
            : f.rule == stars_src.format->rule_for(Species::stars, "velocity_kms") ? b.velocities
                                                                                   : nullptr;
        if (raw && b.n == stars_sel.rows.size())
          tng::assign_field(data.stars, *f.rule, convert_held(mesh, f, raw, b.n, frame));
        else
          tng::assign_field(data.stars, *f.rule,
                            read_field(mesh, stars_src, f, stars_sel.rows, frame));
      }
    });
  } else {
    read_species(mesh, stars_src, centred_fields, stars_sel.rows, frame, data.stars);
  }
  if (!gas_src.segments.empty())
    data.gas = read_gas_cells(mesh, gas_src, gas_fields, gas_sel, frame);

  rep.n_stars = stars_sel.rows.size();
  rep.n_wind_dropped = stars_sel.wind;
  rep.n_gas = gas_sel.rows.size();
  rep.n_nonfinite_dropped = stars_sel.nonfinite + gas_sel.nonfinite;
  rep.bulk_velocity_kms = centre.bulk_velocity_kms;
  std::set<std::string> touched;
  for (const auto* src : {&stars_src, &gas_src})
    for (const auto& s : src->segments) touched.insert(s.file);
  rep.n_files_read = touched.size();
  if (report) *report = rep;
  return data;
}

}  // namespace ifusim

namespace ifusim {

struct TngStarStream::Impl {
  TngReadOptions options;
  OpenedSubhalo opened;
  std::vector<PresentField> fields, gas_fields;
  Galaxy record;
  Frame frame;
  bool centred = false;  // a cutout's centre is known after the first pass

  void centre_at(const Centre& centre) {
    record = galaxy_record(opened.hdr, options, centre, fields);
    frame = conversion_frame(record, opened.hdr, centre);
    centred = true;
  }
  std::vector<std::size_t> rows_in(std::size_t begin, std::size_t end) const {
    return select_rows(opened.stars_src, fields, options.drop_nonfinite, begin, end).rows;
  }
};

TngStarStream::TngStarStream(const TngReadOptions& options) : impl_(std::make_unique<Impl>()) {
  TngIngestReport rep;
  impl_->options = options;
  impl_->opened = open_subhalo(options, rep);
  impl_->fields = check_fields(impl_->opened.stars_src, impl_->opened.hdr);
  if (!impl_->opened.gas_src.segments.empty())
    impl_->gas_fields = check_fields(impl_->opened.gas_src, impl_->opened.hdr);
  if (impl_->opened.catalog) impl_->centre_at(impl_->opened.catalog->centre);
}
TngStarStream::~TngStarStream() = default;

std::size_t TngStarStream::n_rows() const {
  return impl_->opened.stars_src.rows;
}

Stars TngStarStream::read(const Mesh& mesh, std::size_t first_row, std::size_t n_rows) const {
  if (!impl_->centred) throw std::logic_error("TngStarStream::read before first_pass");
  // The block's wind cells (and with drop_nonfinite its non-finite rows) are dropped, as
  // read_tng drops them.
  const std::vector<std::size_t> rows = impl_->rows_in(first_row, first_row + n_rows);
  GalaxyData block;
  if (!rows.empty())
    read_species(mesh, impl_->opened.stars_src, impl_->fields, rows, impl_->frame, block.stars);
  return std::move(block.stars);
}

Gas TngStarStream::read_gas(const Mesh& mesh) const {
  if (!impl_->centred) throw std::logic_error("TngStarStream::read_gas before first_pass");
  const TypeSource& src = impl_->opened.gas_src;
  if (src.segments.empty()) return {};
  return read_gas_cells(mesh, src, impl_->gas_fields,
                        select_rows(src, impl_->gas_fields, impl_->options.drop_nonfinite),
                        impl_->frame);
}

std::set<std::string> TngStarStream::optional_star_fields() const {
  std::set<std::string> out;
  for (const auto& f : impl_->fields)
    if (!f.rule->required) out.insert(f.rule->target);
  return out;
}

GalaxyData TngStarStream::first_pass(const Mesh& mesh, std::size_t block_rows) const {
  const TypeSource& src = impl_->opened.stars_src;
  if (!impl_->centred) {
    // A cutout: shrinking spheres in passes of block_rows rows, holding at most block_rows stars.
    auto rows_in = [this](std::size_t begin, std::size_t end) {
      return impl_->rows_in(begin, end);
    };
    bool any = false;
    for (std::size_t first = 0; first < n_rows() && !any; first += block_rows)
      any = !rows_in(first, std::min(n_rows(), first + block_rows)).empty();
    if (!any) throw_no_stars(src);
    impl_->centre_at(centre_from_stars(
        impl_->fields, visit_star_rows(src, rows_in, block_rows, impl_->opened.hdr.time),
        impl_->opened.hdr.box_size, block_rows));
  }
  GalaxyData data;
  data.galaxy = impl_->record;
  data.star_bounds = read_bounds(mesh, block_rows);
  if (data.star_bounds->count == 0) throw_no_stars(src);
  return data;
}

}  // namespace ifusim
