// `ifusim survey` in one process (pipeline/survey.h, docs/survey.md): the catalog cuts select
// what an independent reading of the group catalog selects; every cube is bitwise the cube of
// `ifusim run` on the same subhalo and orientation; a rerun makes only what is not done; a
// subhalo with bad data is a failed row while the others are made; bad surveys are refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/config_error.h"
#include "io/cube/cube_io.h"
#include "io/hdf5.h"
#include "io/run_config.h"
#include "io/tng/synthetic_files.h"
#include "pipeline/survey.h"
#include "tng_test_util.h"

using namespace ifusim;
namespace fs = std::filesystem;

namespace {

std::string example(const std::string& name) {
  return std::string(IFUSIM_SOURCE_DIR) + "/configs/examples/" + name + ".json";
}

std::vector<std::vector<std::string>> catalog_rows(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::vector<std::string> row;
    std::string field;
    bool quoted = false;
    for (const char c : line) {
      if (c == '"')
        quoted = !quoted;
      else if (c == ',' && !quoted)
        row.push_back(std::exchange(field, {}));
      else
        field += c;
    }
    row.push_back(field);
    rows.push_back(row);
  }
  return rows;
}

// Writes a snapshot of n_subhalos subhalos, the central of `central_stars` stars and no gas, over
// n_groups FoF groups and n_chunks files, into `path`; returns its spec.
tng::SyntheticSnapshotSpec write_star_snapshot(const std::string& path, std::size_t central_stars,
                                               std::uint64_t seed, double redshift, int n_subhalos,
                                               int n_groups, int n_chunks) {
  tng::SyntheticGalaxySpec central;
  central.n_stars = central_stars;
  central.n_gas = 0;
  central.seed = seed;
  central.redshift = redshift;
  auto spec = tng::make_snapshot_spec(central, n_subhalos, n_groups, n_chunks);
  tng::write_tng_snapshot(path, spec);
  return spec;
}

// Sets subhalo `id`'s first star's mass to NaN, in the chunk file that holds it.
void corrupt_subhalo(const std::string& dir, const tng::SyntheticSnapshotSpec& spec, long long id) {
  std::int64_t row = 0;
  {
    h5::File offsets(tng::offsets_path(dir, spec.snapshot));
    row = offsets.read_rows<std::int64_t>("Subhalo/SnapByType", id, id + 1, 6)[4];
  }
  for (int k = 0; k < spec.n_chunks; ++k) {
    h5::File f(tng::snapshot_chunk_path(dir, spec.snapshot, k), h5::File::Mode::read_write);
    const auto rows = f.exists("PartType4/Masses")
                          ? static_cast<std::int64_t>(f.shape("PartType4/Masses").at(0))
                          : 0;
    if (row < rows) {
      auto m = f.read<float>("PartType4/Masses");
      auto sft = f.read<float>("PartType4/GFM_StellarFormationTime");
      auto i = static_cast<std::size_t>(row);
      while (sft[i] <= 0) ++i;  // a star, not a wind cell
      m[i] = std::numeric_limits<float>::quiet_NaN();
      f.write_rows<float>("PartType4/Masses", 0, m.data(), m.size());
      return;
    }
    row -= rows;
  }
  FAIL("subhalo " << id << " not found in the chunk files");
}

}  // namespace

TEST_CASE("survey: cubes of a snapshot's subhalos, bitwise those of ifusim run, resumable",
          "[survey][tng]") {
  const test::ScratchDir dir("survey");
  const auto spec = write_star_snapshot(dir.file("snap"), 1500, 21, 0.05, 7, 3, 2);

  // The five most massive subhalos with stars, read independently of the survey's reader.
  std::vector<std::pair<double, long long>> by_mass;
  {
    long long id = 0;
    for (int k = 0; k < spec.n_chunks; ++k) {
      h5::File f(tng::group_catalog_chunk_path(dir.file("snap"), spec.snapshot, k));
      const auto n = f.group("Header").attribute<std::int64_t>("Nsubgroups_ThisFile");
      if (n == 0) continue;
      const auto mass = f.read<float>("Subhalo/SubhaloMassType");
      const auto len = f.read<std::int32_t>("Subhalo/SubhaloLenType");
      for (std::int64_t i = 0; i < n; ++i, ++id)
        if (len[static_cast<std::size_t>(6 * i + 4)] > 0)
          by_mass.push_back({mass[static_cast<std::size_t>(6 * i + 4)], id});
    }
  }
  REQUIRE(by_mass.size() >= 6);
  std::sort(by_mass.rbegin(), by_mass.rend());
  std::set<long long> expected;
  for (int i = 0; i < 5; ++i) expected.insert(by_mass[static_cast<std::size_t>(i)].second);
  const long long bad = by_mass[3].second;
  corrupt_subhalo(dir.file("snap"), spec, bad);

  nlohmann::json document = load_config_document(
      example("muse_tng_mastar"), {"galaxy.redshift=0.05", "devices.oversubscribe=true",
                                   "output.png=false", "output.fits=false", "output.hdf5=true"});
  document["survey"] = {{"snapshot_dir", dir.file("snap")},
                        {"snapshot", spec.snapshot},
                        {"select", {{"max_count", 5}}},
                        {"orientations", {"face-on", {{"alpha_deg", 60}}}}};
  const SurveyPlan plan = plan_survey(document, example("muse_tng_mastar"));
  REQUIRE(plan.tasks.size() == 10);
  std::set<long long> selected;
  for (const auto& t : plan.tasks) selected.insert(t.subhalo_id);
  CHECK(selected == expected);
  for (std::size_t i = 1; i < plan.tasks.size(); ++i)
    CHECK(plan.tasks[i - 1].star_rows >= plan.tasks[i].star_rows);  // largest first
  // --plan: the counts, against the catalog's own rows.
  std::size_t star_rows = 0, gas_rows = 0;
  for (std::size_t i = 0; i < plan.tasks.size(); i += 2) {
    star_rows += plan.tasks[i].star_rows;
    gas_rows += plan.tasks[i].gas_rows;
  }
  CHECK(star_rows > 1500);
  const std::string described = describe_survey(plan);
  CHECK_THAT(described, Catch::Contains(": 5 subhalos x 2 orientations = 10 cubes\n"));
  CHECK_THAT(described,
             Catch::Contains("star rows (SubhaloLenType[4]): " + std::to_string(star_rows) +
                             " in all, largest " + std::to_string(plan.tasks[0].star_rows)));
  CHECK_THAT(described, Catch::Contains("read by the cubes: " + std::to_string(2 * star_rows)));
  CHECK_THAT(
      described,
      Catch::Contains("gas rows (SubhaloLenType[0]): " + std::to_string(gas_rows) + " in all"));

  RunOptions options;
  options.n_devices = 2;
  options.progress = false;
  const std::string out = dir.file("out");
  const SurveyReport first = run_survey(plan, out, options);
  CHECK(first.done == 8);
  CHECK(first.failed == 2);
  auto rows = catalog_rows(first.catalog_path);
  REQUIRE(rows.size() == 10);
  for (const auto& row : rows) {
    INFO(row[0] << " " << row[1] << ": " << row[7]);
    REQUIRE(row.size() == 10);
    if (std::stoll(row[0]) == bad) {
      CHECK(row[2] == "failed");
      CHECK_THAT(row[7], Catch::Contains("non-finite"));
    } else {
      CHECK(row[2] == "done");
      CHECK(row[3] == row[0] + "/" + row[1] + "/cube.h5");
      CHECK(fs::exists(fs::path(out) / row[3]));
      CHECK(std::stoll(row[5]) > 0);
      const auto bytes = std::to_string(fs::file_size(fs::path(out) / row[3]));
      CHECK_THAT(row[9], Catch::Contains("cube.h5:" + bytes + ":"));
      CHECK_THAT(row[9], Catch::Contains("summary.json:"));
    }
  }

  // Bitwise the cube of a run of the same subhalo and orientation, on another device count.
  for (const auto* task : {&plan.tasks.front(), &plan.tasks.back()}) {
    if (task->subhalo_id == bad) continue;
    RunOptions single;
    single.n_devices = 1;
    single.progress = false;
    single.output_dir = dir.file("single");
    run_pipeline(parse_run_config(task->run_document, plan.config_path), single);
    const Cube survey_cube =
        read_cube((fs::path(out) / std::to_string(task->subhalo_id) / task->orientation / "cube.h5")
                      .string());
    const Cube run_cube = read_cube(dir.file("single") + "/cube.h5");
    REQUIRE(survey_cube.data.size() == run_cube.data.size());
    CHECK(std::memcmp(survey_cube.data.data(), run_cube.data.data(),
                      run_cube.data.size() * sizeof(run_cube.data[0])) == 0);
  }

  // A rerun makes only what is not done: the failed rows again, and a row whose cube is gone.
  fs::remove(fs::path(out) / rows[0][3]);
  const SurveyReport second = run_survey(plan, out, options);
  CHECK(second.skipped == 7);
  CHECK(second.done == 1);
  CHECK(second.failed == 2);
  CHECK(catalog_rows(second.catalog_path).size() == 10);
  CHECK_FALSE(fs::exists(second.catalog_path + ".partial"));

  // A done cube cut short (a full disk, a copy interrupted) or changed in place is made again,
  // against the size and checksum catalog.csv records of each file; it was kept ("0 made").
  std::vector<fs::path> cubes;
  for (const auto& row : catalog_rows(second.catalog_path))
    if (row[2] == "done") cubes.push_back(fs::path(out) / row[3]);
  REQUIRE(cubes.size() == 8);
  const auto bytes = fs::file_size(cubes[0]);
  const Cube before = read_cube(cubes[0].string());
  fs::resize_file(cubes[0], bytes - 100);
  {
    std::fstream f(cubes[1], std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(fs::file_size(cubes[1]) / 2);
    f.seekg(at);
    const char byte = static_cast<char>(f.get());
    f.seekp(at);
    f.put(static_cast<char>(~byte));  // the same size, one byte changed
  }
  const auto sizes = fs::file_size(cubes[1]);
  const SurveyReport third = run_survey(plan, out, options);
  CHECK(third.skipped == 6);
  CHECK(third.done == 2);
  CHECK(fs::file_size(cubes[0]) == bytes);
  CHECK(fs::file_size(cubes[1]) == sizes);
  const Cube after = read_cube(cubes[0].string());
  REQUIRE(after.data.size() == before.data.size());
  CHECK(std::memcmp(after.data.data(), before.data.data(),
                    before.data.size() * sizeof(before.data[0])) == 0);

  // A catalog written before the files column (9 columns) is still read, its done rows kept.
  {
    const auto current = catalog_rows(third.catalog_path);
    std::ofstream old(third.catalog_path, std::ios::trunc);
    old << "subhalo_id,orientation,status,cube,seconds,n_stars,n_gas,error,config_hash\n";
    for (const auto& row : current) {
      for (std::size_t c = 0; c < 9; ++c) old << (c ? "," : "") << (c == 7 ? "" : row[c]);
      old << "\n";
    }
  }
  const SurveyReport fourth = run_survey(plan, out, options);
  CHECK(fourth.skipped == 8);
  CHECK(fourth.done == 0);
  CHECK(fourth.failed == 2);
}

TEST_CASE("survey: orientations and refusals", "[survey][tng]") {
  const test::ScratchDir dir("survey_bad");
  const auto spec = write_star_snapshot(dir.file("snap"), 400, 3, 0.0, 3, 1, 1);
  nlohmann::json document =
      load_config_document(example("muse_tng_mastar"), {"galaxy.redshift=0.05"});
  document["survey"] = {{"snapshot_dir", dir.file("snap")},
                        {"snapshot", spec.snapshot},
                        {"subhalos", {0, 2}},
                        {"orientations", {{"random", 3}, {"seed", 5}}}};
  const SurveyPlan plan = plan_survey(document, example("muse_tng_mastar"));
  REQUIRE(plan.tasks.size() == 6);
  CHECK(plan.tasks[0].orientation == "random_0");
  CHECK(plan.tasks[2].orientation == "random_2");
  // The same seed, the same angles (and hashes); another seed, others.
  CHECK(plan_survey(document, example("muse_tng_mastar")).tasks[1].config_hash ==
        plan.tasks[1].config_hash);
  auto reseeded = document;
  reseeded["survey"]["orientations"]["seed"] = 6;
  CHECK(plan_survey(reseeded, example("muse_tng_mastar")).tasks[1].config_hash !=
        plan.tasks[1].config_hash);

  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& what) {
    auto d = document;
    edit(d);
    INFO(what);
    CHECK_THROWS_WITH(plan_survey(d, example("muse_tng_mastar")), Catch::Contains(what));
  };
  refused(
      [](auto& d) {
        d["survey"].erase("subhalos");
        d["survey"]["select"] = {{"min_stellar_mass_msun", 1e20}};
      },
      "survey.select: no subhalo of the 3 in");
  refused([](auto& d) { d["survey"]["subhalos"] = {7}; }, "survey.subhalos: 7 is not a subhalo id");
  refused([](auto& d) { d["survey"]["orientations"] = {"sideways"}; },
          "survey.orientations[0]: expected \"face-on\", \"edge-on\" or Euler angles");
  refused([](auto& d) { d["galaxy"]["redshift"] = -1; }, "galaxy.redshift");
  // A galaxy that is no object was indexed as one: a raw json.exception.type_error.
  refused([](auto& d) { d["galaxy"] = "MUSE"; },
          "muse_tng_mastar.json: galaxy: expected a JSON object, got \"MUSE\"");
  fs::remove_all(
      fs::path(tng::group_catalog_chunk_path(dir.file("snap"), spec.snapshot, 0)).parent_path());
  CHECK_THROWS_WITH(plan_survey(document, example("muse_tng_mastar")),
                    Catch::Contains("group catalog file 0 missing"));
}

TEST_CASE("survey: the example survey config runs on a snapshot written by make-galaxy",
          "[survey][tng]") {
  // README: `ifusim make-galaxy out/example_snapshot --layout snapshot ...`, then
  // `ifusim survey configs/examples/survey_snapshot.json`; here into a scratch folder.
  const test::ScratchDir dir("survey_example");
  const auto spec = write_star_snapshot(dir.file("example_snapshot"), 3000, 5, 0.05, 6, 2, 2);
  const nlohmann::json document = load_config_document(
      example("survey_snapshot"),
      {"survey.snapshot_dir=" + dir.file("example_snapshot"),
       "survey.snapshot=" + std::to_string(spec.snapshot), "survey.select.min_stellar_mass_msun=0",
       "survey.select.max_count=2", "devices.oversubscribe=true"});
  const SurveyPlan plan = plan_survey(document, example("survey_snapshot"));
  REQUIRE(plan.tasks.size() == 6);  // 2 subhalos x 3 orientations
  RunOptions options;
  options.progress = false;
  const SurveyReport report = run_survey(plan, dir.file("out"), options);
  CHECK(report.done == 6);
  CHECK(report.failed == 0);
  for (const auto& row : catalog_rows(report.catalog_path)) {
    INFO(row[0] << " " << row[1] << ": " << row[7]);
    CHECK(row[2] == "done");
    const Cube cube = read_cube((fs::path(dir.file("out")) / row[3]).string());
    CHECK(cube.variance.size() == cube.data.size());  // calc_ifu's noise stage ran
    double total = 0;
    for (const double v : cube.data)
      if (!std::isnan(v)) total += v;
    CHECK(total > 0);
  }
}
