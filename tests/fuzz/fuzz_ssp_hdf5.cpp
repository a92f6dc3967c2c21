// The SSP template reader (ifusim's HDF5 template format, which `ifusim templates convert`
// writes from MILES and MaStar) on broken copies of a small valid grid: the input is a list of
// edits (remove a dataset or attribute, drop or reshape values, overwrite values with NaN, inf,
// zero, negative or huge numbers, unexpected strings). load_ssp_library must succeed or throw
// ConfigError / InputError. Seed: the empty input (the valid grid).
#include <vector>

#include "data/ssp_grid.h"
#include "io/hdf5.h"
#include "io/ssp/ssp_hdf5.h"
#include "io/ssp/ssp_library.h"
#include "tests/fuzz/fuzz_common.h"

using namespace ifusim;

namespace {

std::string fixture_path() {
  static const std::string path = [] {
    SspGrid g;
    g.name = "fuzz";
    g.age_gyr = {0.1, 1.0, 10.0};
    g.metallicity = {0.004, 0.02};
    for (int k = 0; k < 16; ++k) g.wavelength_angstrom.push_back(4000.0 + 2.0 * k);
    for (std::size_t i = 0; i < g.age_gyr.size() * g.metallicity.size() * 16; ++i)
      g.flux.push_back(1e-5f * static_cast<float>(1 + i % 7));
    g.resolution_fwhm_angstrom = 2.5;
    g.z_solar = 0.02;
    const std::string p = (fuzz::scratch_dir() / "fixture.h5").string();
    write_ssp_hdf5(g, p);
    return p;
  }();
  return path;
}

const std::vector<std::string> kDatasets = {"age_gyr", "metallicity", "wavelength_angstrom",
                                            "flux"};
const std::vector<std::string> kNumberAttributes = {"resolution_fwhm_angstrom", "z_solar"};
const std::vector<std::string> kStringAttributes = {"name", "source", "wavelength_medium",
                                                    "flux_unit", "metallicity_definition"};

void edit(const h5::File& f, fuzz::Bytes& in) {
  const std::string& name = kDatasets[in.index(kDatasets.size())];
  switch (in.byte() % 6) {
    case 0:
      if (f.exists(name)) f.remove(name);
      break;
    case 1: {  // drop values, or flatten the flux cube
      if (!f.exists(name)) break;
      std::vector<double> v = f.read<double>(name);
      const std::size_t drop = std::min<std::size_t>(v.size(), in.byte() % 4);
      v.resize(v.size() - drop);
      f.remove(name);
      f.write<double>(name, v, {v.size()});
      break;
    }
    case 2: {  // one value
      if (!f.exists(name)) break;
      const auto shape = f.shape(name);
      std::vector<double> v = f.read<double>(name);
      if (!v.empty()) v[in.index(v.size())] = in.value();
      f.remove(name);
      f.write<double>(name, v, shape);
      break;
    }
    case 3:
      f.set_attribute<double>(kNumberAttributes[in.index(kNumberAttributes.size())], in.value());
      break;
    case 4: {
      const std::string& a = kStringAttributes[in.index(kStringAttributes.size())];
      f.set_string_attribute(a, in.byte() % 2 ? "" : std::string(1 + in.byte() % 40, 'x'));
      break;
    }
    case 5: {  // a number where a string is expected
      const std::string& a = kStringAttributes[in.index(kStringAttributes.size())];
      f.set_attribute<double>(a, in.value());
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = (fuzz::scratch_dir() / "templates.h5").string();
  fuzz::Bytes in(data, size);
  fuzz::edited_copy(fixture_path(), path, in, edit);
  fuzz::expect_clean_errors("templates.h5", [&] { load_ssp_library(path, "auto"); });
  return 0;
}
