// The IllustrisTNG reader on broken copies of a generated cutout: the input is a list of edits
// (remove a dataset or group, drop or reshape rows, overwrite values or unit and header
// attributes with NaN, inf, zero, negative or huge numbers). read_tng and count_tng must
// succeed or throw ConfigError / InputError. Seed: the empty input (the valid cutout).
#include <vector>

#include "data/mesh.h"
#include "io/hdf5.h"
#include "io/tng/synthetic_files.h"
#include "io/tng/tng_fields.h"
#include "io/tng/tng_reader.h"
#include "tests/fuzz/fuzz_common.h"

using namespace ifusim;

namespace {

std::string fixture_path() {
  static const std::string path = [] {
    tng::SyntheticGalaxySpec g;
    g.n_stars = 64;
    g.n_gas = 16;
    g.seed = 5;
    g.redshift = 0.1;
    const std::string p = (fuzz::scratch_dir() / "fixture.hdf5").string();
    tng::write_tng_cutout(p, g);
    return p;
  }();
  return path;
}

const Mesh& two_devices() {
  static const Mesh mesh = [] {
    std::vector<Device> devices(2);
    for (int i = 0; i < 2; ++i) devices[i].id = i;
    return Mesh(Backend::cpu, std::move(devices));
  }();
  return mesh;
}

const std::vector<std::string>& datasets() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& r : tng::field_table())
      out.push_back(std::string(tng::part_type_group(r.species)) + "/" + r.dataset);
    return out;
  }();
  return names;
}

const std::vector<std::string> kHeaderAttributes = {
    "BoxSize", "HubbleParam", "Omega0", "OmegaLambda", "Redshift", "Time", "NumPart_ThisFile"};
const std::vector<std::string> kUnitAttributes = {"a_scaling", "h_scaling", "to_cgs"};

// A dataset rewritten with `values` and `shape`, keeping its unit attributes.
void rewrite(const h5::File& f, const std::string& name, const std::vector<double>& values,
             const std::vector<hsize_t>& shape) {
  std::vector<std::pair<std::string, double>> units;
  for (const auto& a : kUnitAttributes)
    if (f.has_attribute(a, name)) units.emplace_back(a, f.attribute<double>(a, name));
  f.remove(name);
  f.write<double>(name, values, shape);
  for (const auto& [a, v] : units) f.set_attribute<double>(a, v, name);
}

void edit(const h5::File& f, fuzz::Bytes& in) {
  const std::string& name = datasets()[in.index(datasets().size())];
  if (!f.exists(name)) return;
  const std::vector<hsize_t> shape = f.shape(name);
  switch (in.byte() % 7) {
    case 0:
      f.remove(name);
      break;
    case 1: {
      const char* group = in.byte() % 2 ? "PartType4" : (in.byte() % 2 ? "PartType0" : "Header");
      if (f.exists(group)) f.remove(group);
      break;
    }
    case 2: {  // drop rows
      std::vector<double> v = f.read<double>(name);
      const hsize_t row = shape.size() > 1 ? shape[1] : 1;
      const hsize_t drop = std::min<hsize_t>(shape[0], 1 + in.byte() % 8);
      v.resize(v.size() - drop * row);
      std::vector<hsize_t> s = shape;
      s[0] -= drop;
      rewrite(f, name, v, s);
      break;
    }
    case 3: {  // one value
      std::vector<double> v = f.read<double>(name);
      if (!v.empty()) v[in.index(v.size())] = in.value();
      rewrite(f, name, v, shape);
      break;
    }
    case 4: {  // flattened or given an extra axis
      const std::vector<double> v = f.read<double>(name);
      if (shape.size() > 1)
        rewrite(f, name, v, {v.size()});
      else
        rewrite(f, name, v, {v.size(), 1});
      break;
    }
    case 5:
      f.set_attribute<double>(kUnitAttributes[in.index(kUnitAttributes.size())], in.value(), name);
      break;
    case 6: {
      const std::string& a = kHeaderAttributes[in.index(kHeaderAttributes.size())];
      if (!f.exists("Header")) break;
      if (a == "NumPart_ThisFile") {
        std::vector<std::int32_t> n = f.attribute_array<std::int32_t>(a, "Header");
        if (!n.empty()) n[in.index(n.size())] = static_cast<std::int32_t>(in.byte()) - 8;
        f.set_attribute_array<std::int32_t>(a, n, "Header");
      } else {
        f.set_attribute<double>(a, in.value(), "Header");
      }
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = (fuzz::scratch_dir() / "cutout.hdf5").string();
  fuzz::Bytes in(data, size);
  fuzz::edited_copy(fixture_path(), path, in, edit);
  TngReadOptions options;
  options.path = path;
  options.drop_nonfinite = in.byte() % 2;
  fuzz::expect_clean_errors("cutout.hdf5", [&] { count_tng(options); });
  fuzz::expect_clean_errors("cutout.hdf5", [&] { read_tng(two_devices(), options); });
  return 0;
}
