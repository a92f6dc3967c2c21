// RUBIX's converted-galaxy layout (rubix_galaxy.h5): written from an ingested TNG cutout, read
// back, and checked dataset by dataset (names and `unit` strings as rubix_config.yml's
// BaseHandler lists them).
#include <catch2/catch.hpp>

#include <filesystem>

#include "io/hdf5.h"
#include "io/rubix/rubix_galaxy.h"
#include "io/tng/synthetic_files.h"
#include "io/tng/tng_reader.h"
#include "pipeline/devices.h"
#include "tng_test_util.h"

using namespace ifusim;
using ifusim::test::host;

TEST_CASE("RUBIX layout: write, read back, units and errors", "[tng][rubix]") {
  const test::ScratchDir dir("rubix");
  tng::SyntheticGalaxySpec spec;
  spec.n_stars = 900;
  spec.n_gas = 120;
  spec.seed = 5;
  spec.redshift = 0.3;
  spec.center_ckpc_h = {1000.0, 52000.0, 30000.0};
  tng::write_tng_cutout(dir.file("cutout.hdf5"), spec);
  auto mesh = make_mesh(Backend::cpu, 2);
  TngReadOptions opt;
  opt.path = dir.file("cutout.hdf5");
  const GalaxyData d = read_tng(*mesh, opt);

  const std::string path = dir.file("rubix_galaxy.h5");
  write_rubix_galaxy(d, path);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  REQUIRE(is_rubix_galaxy(path));
  CHECK_FALSE(is_rubix_galaxy(opt.path));
  {
    h5::File f(path);
    const std::vector<std::pair<std::string, std::string>> units = {
        {"galaxy/center", "kpc"},
        {"galaxy/halfmassrad_stars", "kpc"},
        {"galaxy/redshift", ""},
        {"particles/stars/coords", "kpc"},
        {"particles/stars/mass", "Msun"},
        {"particles/stars/velocity", "km/s"},
        {"particles/stars/metallicity", ""},
        {"particles/stars/age", "Gyr"},
        {"particles/gas/coords", "kpc"},
        {"particles/gas/density", "Msun/kpc^3"},
        {"particles/gas/mass", "Msun"},
        {"particles/gas/metals", ""},
        {"particles/gas/sfr", "Msun/yr"},
        {"particles/gas/internal_energy", "erg/g"},
        {"particles/gas/temperature", "K"}};
    for (const auto& [ds, unit] : units) {
      INFO(ds);
      CHECK(f.string_attribute("unit", ds) == unit);
    }
    CHECK(f.read_string("meta/SimulationName") == spec.simulation_name);
    CHECK(f.shape("particles/stars/coords") == std::vector<hsize_t>{d.stars.count(), 3});
    CHECK(f.shape("particles/gas/metals") == std::vector<hsize_t>{d.gas.count(), 10});
    // Box-frame coordinates, as RUBIX stores them; erg/g = 1e10 (km/s)^2.
    const auto coords = f.read<double>("particles/stars/coords");
    CHECK(coords[0] ==
          Approx(host(d.stars.position_kpc)[0] + d.galaxy.center_kpc[0]).epsilon(1e-12));
    CHECK(f.read<double>("particles/gas/internal_energy")[0] ==
          Approx(1e10 * host(d.gas.internal_energy_km2_s2)[0]).epsilon(1e-12));
  }

  const GalaxyData r = read_rubix_galaxy(*mesh, path);
  CHECK(r.galaxy.simulation == d.galaxy.simulation);
  CHECK(r.galaxy.snapshot == d.galaxy.snapshot);
  CHECK(r.galaxy.subhalo_id == d.galaxy.subhalo_id);
  CHECK(r.galaxy.redshift == d.galaxy.redshift);
  CHECK(r.galaxy.scale_factor == d.galaxy.scale_factor);
  CHECK(r.galaxy.center_kpc == d.galaxy.center_kpc);
  CHECK(r.galaxy.halfmass_radius_stars_kpc == d.galaxy.halfmass_radius_stars_kpc);
  CHECK(r.galaxy.cosmology.hubble_param == d.galaxy.cosmology.hubble_param);
  CHECK(host(r.stars.initial_mass_msun) == host(d.stars.initial_mass_msun));
  CHECK(host(r.stars.mass_msun) == host(d.stars.initial_mass_msun));  // RUBIX has one mass
  CHECK(host(r.stars.age_gyr) == host(d.stars.age_gyr));
  CHECK(host(r.stars.velocity_kms) == host(d.stars.velocity_kms));
  CHECK(host(r.gas.metals) == host(d.gas.metals));
  CHECK(host(r.gas.temperature_k) == host(d.gas.temperature_k));
  // Positions went through box frame and back in double: within 1e-5 kpc.
  const auto rp = host(r.stars.position_kpc), dp = host(d.stars.position_kpc);
  REQUIRE(rp.size() == dp.size());
  for (std::size_t i = 0; i < rp.size(); ++i) REQUIRE(rp[i] == Approx(dp[i]).margin(1e-5));

  // A wrong unit and a missing dataset name the file and dataset.
  std::filesystem::copy_file(path, dir.file("bad_unit.h5"));
  h5::File(dir.file("bad_unit.h5"), h5::File::Mode::read_write)
      .set_string_attribute("unit", "pc", "particles/stars/coords");
  CHECK_THROWS_WITH(read_rubix_galaxy(*mesh, dir.file("bad_unit.h5")),
                    Catch::Contains("bad_unit.h5:/particles/stars/coords: unit \"pc\", expected "
                                    "\"kpc\""));
  std::filesystem::copy_file(path, dir.file("no_age.h5"));
  h5::File(dir.file("no_age.h5"), h5::File::Mode::read_write).remove("particles/stars/age");
  CHECK_THROWS_WITH(read_rubix_galaxy(*mesh, dir.file("no_age.h5")),
                    Catch::Contains("no_age.h5:/particles/stars/age: required dataset missing"));

  // Values no galaxy can hold (a negative or zero mass, a metallicity outside [0, 1), a star
  // formed in the future) are refused with the file, dataset and row, as the TNG reader does.
  struct Bad {
    const char* dataset;
    double value;
    const char* expected;
  };
  for (const Bad& bad : {Bad{"particles/stars/mass", -2e6, "masses in Msun > 0"},
                         Bad{"particles/stars/metallicity", 1.5, "metal mass fractions in [0, 1)"},
                         Bad{"particles/stars/age", -0.5, "ages in Gyr >= 0"},
                         Bad{"particles/gas/mass", 0.0, "masses in Msun > 0"}}) {
    INFO(bad.dataset);
    const std::string file = dir.file("bad_value.h5");
    std::filesystem::remove(file);
    std::filesystem::copy_file(path, file);
    const double value = bad.value;
    h5::File(file, h5::File::Mode::read_write).write_rows<double>(bad.dataset, 3, &value, 1);
    CHECK_THROWS_WITH(
        read_rubix_galaxy(*mesh, file),
        Catch::Contains(std::string("bad_value.h5:/") + bad.dataset + ": row 3 is ") &&
            Catch::Contains(bad.expected));
  }
}
