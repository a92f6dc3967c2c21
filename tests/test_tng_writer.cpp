// The TNG writer (io/tng/tng_writer.h) takes any galaxy: rows held in memory write the same bytes
// as the generator that made them, hand-made rows come back as given, and bad layouts are errors
// before anything is written.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "core/config_error.h"
#include "io/hdf5.h"
#include "io/tng/synthetic_files.h"
#include "io/tng/tng_writer.h"
#include "tng_test_util.h"

using namespace ifusim;
namespace fs = std::filesystem;

namespace {

std::string bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// All of a source's rows, held in memory with its record and block size.
tng::TngHeldGalaxy hold(const tng::TngGalaxySource& source) {
  tng::TngStarRows stars;
  tng::TngGasRows gas;
  source.star_rows(0, source.record().n_stars, stars);
  source.gas_rows(0, source.record().n_gas, gas);
  return tng::TngHeldGalaxy(source.record(), std::move(stars), std::move(gas), source.block_rows());
}

// Relative path -> contents of every file under `root`.
std::vector<std::pair<std::string, std::string>> tree(const fs::path& root) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file())
      files.emplace_back(fs::relative(e.path(), root).string(), bytes(e.path()));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("TNG writer: a galaxy held in memory writes the bytes its generator writes", "[tng]") {
  test::ScratchDir dir("tng_writer_held");
  tng::SyntheticGalaxySpec spec;
  spec.n_stars = 2000;
  spec.n_gas = 300;
  spec.seed = 5;
  spec.redshift = 0.2;
  spec.wind_fraction = 0.03;
  spec.block_rows = 700;
  const tng::SyntheticGalaxyGenerator generator(spec);
  tng::write_tng_cutout(dir.file("generated.hdf5"), generator);
  tng::write_tng_cutout(dir.file("held.hdf5"), hold(generator));
  CHECK(bytes(dir.file("generated.hdf5")).size() > 2000 * 40);
  CHECK(bytes(dir.file("generated.hdf5")) == bytes(dir.file("held.hdf5")));

  // A snapshot of two subhalos in two groups over three chunks: the catalog's sums come from the
  // rows and records alone.
  const auto snapshot = tng::make_snapshot_spec(spec, 2, 2, 3, /*fuzz_fraction=*/0.0);
  tng::write_tng_snapshot(dir.file("generated"), snapshot);
  std::vector<tng::TngHeldGalaxy> held;
  for (const auto& s : snapshot.subhalos) held.push_back(hold(tng::SyntheticGalaxyGenerator(s)));
  tng::TngSnapshotLayout layout;
  layout.snapshot = snapshot.snapshot;
  layout.n_chunks = snapshot.n_chunks;
  layout.simulation_name = snapshot.simulation_name;
  layout.group_of_subhalo = snapshot.group_of_subhalo;
  for (const auto& h : held) layout.subhalos.push_back(&h);
  tng::write_tng_snapshot(dir.file("held"), layout);
  const auto generated = tree(dir.path() / "generated");
  REQUIRE(generated.size() == 3 + 3 + 1);  // snapshot chunks, catalog chunks, offsets
  CHECK(generated == tree(dir.path() / "held"));
}

TEST_CASE("TNG writer: hand-made rows come back as given", "[tng]") {
  test::ScratchDir dir("tng_writer_by_hand");
  tng::TngGalaxyRecord record;
  record.simulation_name = "by hand";
  record.snapshot = 50;
  record.subhalo_id = 7;
  record.redshift = 1.0;
  record.center_ckpc_h = {100.0, 200.0, 300.0};
  tng::TngStarRows stars;
  stars.coordinates = {100.5, 200.0, 300.0, 99.5, 200.25, 300.0};
  stars.velocities = {1, 2, 3, 4, 5, 6};
  stars.masses = {1e-4f, 2e-4f};
  stars.initial_masses = {2e-4f, 3e-4f};
  stars.metallicity = {0.02f, 0.01f};
  stars.formation_time = {0.3f, -0.4f};  // a star and a wind cell
  stars.particle_ids = {11, 12};
  const tng::TngHeldGalaxy galaxy(record, stars, {}, /*block_rows=*/1);
  CHECK(galaxy.record().n_stars == 2);
  CHECK(galaxy.record().n_gas == 0);
  const std::string path = dir.file("cutout.hdf5");
  tng::write_tng_cutout(path, galaxy);

  h5::File f(path);
  const h5::Location header = f.group("Header");
  CHECK(header.attribute<double>("Redshift") == 1.0);
  CHECK(header.attribute<double>("Time") == 0.5);
  CHECK(header.attribute<std::int32_t>("SnapshotNumber") == 50);
  CHECK(header.attribute<std::int32_t>("CutoutID") == 7);
  CHECK(header.string_attribute("SimulationName") == "by hand");
  CHECK(header.attribute_array<std::int32_t>("NumPart_ThisFile") ==
        std::vector<std::int32_t>{0, 0, 0, 0, 2, 0});
  CHECK_FALSE(f.exists("PartType0"));  // no gas: no group, as in TNG
  const h5::Location p = f.group("PartType4");
  CHECK(p.read<double>("Coordinates") == stars.coordinates);
  CHECK(p.read<float>("Velocities") == stars.velocities);
  CHECK(p.read<float>("Masses") == stars.masses);
  CHECK(p.read<float>("GFM_InitialMass") == stars.initial_masses);
  CHECK(p.read<float>("GFM_Metallicity") == stars.metallicity);
  CHECK(p.read<float>("GFM_StellarFormationTime") == stars.formation_time);
  CHECK(p.read<double>("ParticleIDs") == std::vector<double>{11, 12});

  stars.masses.push_back(1e-4f);
  CHECK_THROWS_WITH(tng::TngHeldGalaxy(record, stars, {}),
                    Catch::Contains("stars.coordinates holds 6 values, expected 9"));
}

TEST_CASE("TNG writer: bad layouts are errors before anything is written", "[tng]") {
  test::ScratchDir dir("tng_writer_errors");
  tng::TngGalaxyRecord record;
  tng::TngStarRows stars;
  stars.coordinates = {37500.0, 37500.0, 37500.0};
  stars.velocities = {0, 0, 0};
  stars.masses = stars.initial_masses = stars.metallicity = {0.01f};
  stars.formation_time = {0.5f};
  stars.particle_ids = {1};
  const tng::TngHeldGalaxy a(record, stars, {});
  record.redshift = 0.5;
  stars.particle_ids = {2};
  const tng::TngHeldGalaxy b(record, stars, {});
  const std::string base = dir.file("snap");

  tng::TngSnapshotLayout layout;
  CHECK_THROWS_WITH(tng::write_tng_snapshot(base, layout),
                    Catch::Contains("subhalos: expected at least one subhalo"));
  layout.subhalos = {&a, &b};
  CHECK_THROWS_WITH(tng::write_tng_snapshot(base, layout),
                    Catch::Contains("subhalos[1]: expected the same redshift"));
  layout.subhalos = {&a, nullptr};
  CHECK_THROWS_WITH(tng::write_tng_snapshot(base, layout),
                    Catch::Contains("subhalos[1]: expected a subhalo with particles"));
  layout.subhalos = {&a, &a};
  layout.group_of_subhalo = {0, 2};
  CHECK_THROWS_WITH(tng::write_tng_snapshot(base, layout),
                    Catch::Contains("group_of_subhalo[1]: expected group indices"));
  layout.group_of_subhalo = {0, 1};
  layout.group_fuzz = {&a};
  CHECK_THROWS_WITH(tng::write_tng_snapshot(base, layout),
                    Catch::Contains("group_fuzz: expected one entry per FoF group"));
  CHECK(fs::is_empty(dir.path()));
}
