// The format tables of the one snapshot reader (io/tng/tng_fields.h) and format detection. The
// formats' files themselves (SWIFT by swiftsimio's Writer, EAGLE and GIZMO to spec) are read in
// tests/python/test_snapshot_formats.py.
#include <catch2/catch.hpp>

#include <array>
#include <set>
#include <string>

#include "core/config_error.h"
#include "io/hdf5.h"
#include "io/tng/synthetic_files.h"
#include "io/tng/tng_fields.h"
#include "io/tng/tng_reader.h"
#include "pipeline/devices.h"
#include "tng_test_util.h"

using namespace ifusim;

TEST_CASE("snapshot formats: every table gives the stars' required fields once", "[formats]") {
  const std::set<std::string> required = {"position_kpc", "velocity_kms", "initial_mass_msun",
                                          "mass_msun",    "metallicity",  "age_gyr"};
  for (const tng::SnapshotFormat* format : tng::snapshot_formats()) {
    INFO(format->name);
    std::multiset<std::string> targets;
    for (const auto& r : format->fields)
      if (r.species == tng::Species::stars && r.required) targets.insert(r.target);
    for (const auto& t : required) CHECK(targets.count(t) == 1);
    CHECK(tng::format_named(format->name) == format);
    // Positions are the only periodic field and ages the only formation times.
    CHECK(format->rule_for(tng::Species::stars, "position_kpc")->conversion ==
          tng::Conversion::position);
    CHECK(format->rule_for(tng::Species::stars, "age_gyr")->conversion ==
          tng::Conversion::formation_time_to_age);
  }
  CHECK(tng::format_named("gizmo") == nullptr);
  CHECK(&tng::tng_format().fields == &tng::field_table());
}

TEST_CASE("snapshot formats: a TNG cutout is told from its attributes, and read as TNG",
          "[formats]") {
  const test::ScratchDir dir("formats");
  const std::string cutout = dir.file("cutout.hdf5");
  tng::SyntheticGalaxySpec spec;
  spec.n_stars = 300;
  spec.n_gas = 30;
  spec.seed = 5;
  tng::write_tng_cutout(cutout, spec);
  CHECK(std::string(detect_snapshot_format(cutout).name) == "tng");
  CHECK(std::string(detect_snapshot_format(dir.path().string()).name) ==
        "tng");  // a snapshot folder

  // Read as another format, the cutout is refused naming the header attribute that format needs.
  const auto mesh = make_mesh(Backend::cpu, 1);
  TngReadOptions swift;
  swift.path = cutout;
  swift.format = &tng::swift_format();
  REQUIRE_THROWS_WITH(read_tng(*mesh, swift), Catch::Contains(cutout) &&
                                                  Catch::Contains("Scale-factor") &&
                                                  Catch::Contains("input.format swift"));
  // A region is a key of the other formats: refused for TNG, naming the keys.
  TngReadOptions region;
  region.path = cutout;
  region.region_centre = std::array<double, 3>{0, 0, 0};
  region.region_radius = 1;
  REQUIRE_THROWS_WITH(read_tng(*mesh, region), Catch::Contains("input.region"));
}

TEST_CASE("snapshot formats: an HDF5 file of no known format is refused, naming it", "[formats]") {
  const test::ScratchDir dir("formats_none");
  const std::string path = dir.file("table.hdf5");
  {
    h5::File f(path, h5::File::Mode::truncate);
    f.write<double>("values", {1.0, 2.0, 3.0}, {3});
  }
  REQUIRE_THROWS_WITH(detect_snapshot_format(path),
                      Catch::Contains(path) && Catch::Contains("not a snapshot ifusim reads"));
  REQUIRE_THROWS_WITH(detect_snapshot_format(dir.file("missing.hdf5")),
                      Catch::Contains("no such file"));
}
