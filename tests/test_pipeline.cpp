// End to end: run configs -> cubes. The example runs against their checked-in reference cubes
// and across device counts; light conservation under rotation; errors before anything runs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/config_error.h"
#include "core/json_params.h"
#include "data/wavelength.h"
#include "io/cube/cube_io.h"
#include "io/cube/quicklook.h"
#include "io/json_file.h"
#include "io/run_config.h"
#include "io/telescope.h"
#include "io/tng/synthetic_files.h"
#include "pipeline/devices.h"
#include "pipeline/registry.h"
#include "pipeline/runner.h"
#include "temp_dir.h"

using namespace ifusim;
namespace fs = std::filesystem;

namespace {

std::string example(const std::string& name) {
  return std::string(IFUSIM_SOURCE_DIR) + "/configs/examples/" + name + ".json";
}

using test::TempDir;

RunReport run(const RunConfig& config, int n_devices, const fs::path& out) {
  RunOptions options;
  options.n_devices = n_devices;
  options.output_dir = out.string();
  options.progress = false;
  return run_pipeline(config, options);
}

// How many voxels of the run's cube.h5 differ from the checked-in reference cube of `name`. The
// reference keeps 13 mantissa bits (relative 1.2e-4); a voxel agrees to 2.5e-4 of its value plus
// 1e-6 of the brightest voxel (tests/tools/make_reference_cube.py,
// scripts/update-reference-cubes.sh). `masked` counts the NaN voxels, which must be NaN in both.
std::size_t voxels_off_reference(const std::string& name, const fs::path& cube_h5,
                                 std::size_t& masked) {
  const Cube reference =
      read_cube(std::string(IFUSIM_SOURCE_DIR) + "/tests/reference/" + name + ".h5");
  const Cube written = read_cube(cube_h5.string());
  REQUIRE(reference.shape == written.shape);
  double peak = 0;
  for (double v : reference.data)
    if (!std::isnan(v)) peak = std::max(peak, std::abs(v));
  REQUIRE(peak > 0);
  std::size_t bad = 0;
  masked = 0;
  for (std::size_t i = 0; i < reference.data.size(); ++i) {
    if (std::isnan(reference.data[i])) {  // outside a circular aperture: NaN in both
      REQUIRE(std::isnan(written.data[i]));
      ++masked;
      continue;
    }
    REQUIRE(std::isfinite(written.data[i]));
    if (std::abs(written.data[i] - reference.data[i]) >
        2.5e-4 * std::abs(reference.data[i]) + 1e-6 * peak)
      ++bad;
  }
  return bad;
}

}  // namespace

TEST_CASE(
    "example runs: bitwise identical for 1, 3 and 5 devices, and equal to the reference cubes",
    "[pipeline]") {
  for (const std::string name : {"muse_tng_mastar", "sami_tng_miles"}) {
    INFO("example " << name);
    // 5 host devices may be more than the threads CI has: they share them.
    const RunConfig config =
        load_run_config(example(name), {"devices.oversubscribe=true", "output.hdf5=true"});
    TempDir out1, out3, out5;
    const RunReport one = run(config, 1, out1.path);
    REQUIRE(one.cube.shape.n_voxels() > 0);
    REQUIRE(one.cube.variance.size() == one.cube.data.size());
    for (const auto& f : {"cube.fits", "cube.h5", "white_light.png", "velocity.png",
                          "dispersion.png", "spectrum.png", "summary.json"})
      CHECK(fs::exists(out1.path / f));
    // Paths under the data folder are recorded relative to it, the same on every machine.
    std::map<std::string, std::string> provenance(one.cube.provenance.begin(),
                                                  one.cube.provenance.end());
    CHECK(provenance["INPUT"].rfind("${IFUSIM_DATA_DIR}/snapshots/", 0) == 0);
    CHECK(provenance["SSP"].find("(${IFUSIM_DATA_DIR}/ssp/") != std::string::npos);
    CHECK(provenance_path("/elsewhere/galaxy.hdf5") == "/elsewhere/galaxy.hdf5");
    CHECK(provenance_path(data_dir() + "/../beside.hdf5") == data_dir() + "/../beside.hdf5");
    for (const auto& [report, d] :
         {std::pair{run(config, 3, out3.path), 3}, std::pair{run(config, 5, out5.path), 5}}) {
      INFO(d << " devices");
      CHECK(report.stars_per_device.size() == static_cast<std::size_t>(d));
      CHECK(std::memcmp(report.cube.data.data(), one.cube.data.data(),
                        one.cube.data.size() * sizeof(one.cube.data[0])) == 0);
      CHECK(std::memcmp(report.cube.variance.data(), one.cube.variance.data(),
                        one.cube.variance.size() * sizeof(one.cube.variance[0])) == 0);
    }

    std::size_t masked = 0;
    CHECK(voxels_off_reference(name, out1.path / "cube.h5", masked) == 0);
    // SAMI's circular aperture (30 x 30 spaxels, a circle of radius 15) blanks the 184 whose
    // centres lie beyond it.
    CHECK(masked ==
          (name == "sami_tng_miles" ? 184 * static_cast<std::size_t>(one.cube.shape.n_wave) : 0));
  }
}

TEST_CASE("a rotated galaxy keeps its total light", "[pipeline]") {
  TempDir dir;
  fs::create_directories(dir.path);
  tng::SyntheticGalaxySpec galaxy;
  galaxy.n_stars = 3000;
  galaxy.n_gas = 200;
  galaxy.seed = 11;
  galaxy.bulge_fraction = 0.0;  // a pure disc (3 kpc scale length): nothing beyond 60 kpc
  const std::string snapshot = (dir.path / "galaxy.hdf5").string();
  tng::write_tng_cutout(snapshot, galaxy);

  // A field wide enough (200 arcsec = 195 kpc at z = 0.05) that no star falls outside it, and a
  // band (3600-7900 A) that holds all of the MILES range (3540-7410 A rest) redshifted by
  // z = 0.05 and any stellar velocity: rotation may move light between spaxels and wavelengths
  // but not out of the cube.
  nlohmann::json doc = {
      {"input", {{"file", snapshot}}},
      {"galaxy", {{"redshift", 0.05}}},
      {"telescope",
       {{"name", "wide"},
        {"fov_arcsec", 200.0},
        {"spaxel_arcsec", 10.0},
        {"wavelength",
         {{"start_angstrom", 3600.0}, {"end_angstrom", 7900.0}, {"step_angstrom", 2.0}}},
        {"lsf_fwhm_angstrom", 3.0}}},
      {"ssp", {{"library", "${IFUSIM_DATA_DIR}/ssp/MILES_BASTI_CH_baseFe"}}},
      {"pipeline", {"orient", "aperture", "stellar_spectra", "psum"}},
      {"output", {{"dir", (dir.path / "out").string()}, {"png", false}, {"fits", false}}}};
  auto total_light = [&](const nlohmann::json& orientation) {
    nlohmann::json d = doc;
    d["galaxy"]["orientation"] = orientation;
    const RunReport r = run(parse_run_config(d, ""), 2, dir.path / "out");
    double total = 0;
    for (double v : r.cube.data) total += v;
    return total;
  };
  const double face_on = total_light("face-on");
  REQUIRE(face_on > 0);
  // Equal up to the fixed-point quanta (~1e-16 relative) and the float32 rounding of rotated
  // velocities in the Doppler factor (which only moves light within the band): 1e-9.
  CHECK(total_light("edge-on") == Approx(face_on).epsilon(1e-9));
  CHECK(total_light(nlohmann::json{{"alpha_deg", 33}, {"beta_deg", -70}, {"gamma_deg", 140}}) ==
        Approx(face_on).epsilon(1e-9));
}

TEST_CASE("bad configs fail before anything runs, naming the key, and leave no output",
          "[pipeline]") {
  TempDir dir;
  const std::string config = example("muse_tng_mastar");
  CHECK_THROWS_WITH(load_run_config(config, {"galaxy.redshfit=0.1"}),
                    Catch::Contains("galaxy.redshfit: unknown key"));
  CHECK_THROWS_WITH(load_run_config(config, {"galaxy.redshift=-1"}),
                    Catch::Contains("galaxy.redshift: expected an observed redshift in (0, 20)"));
  CHECK_THROWS_WITH(load_run_config(config, {"telescope=HUBBLE"}),
                    Catch::Contains("telescope: unknown telescope \"HUBBLE\""));
  // A grid whose spaxel indices would overflow int32 (50000 spaxels a side, 2.5e9 spaxels).
  CHECK_THROWS_WITH(load_run_config(config, {R"(telescope={"name": "huge", "fov_arcsec": 10000,
                                "spaxel_arcsec": 0.2, "lsf_fwhm_angstrom": 2.5,
                                "wavelength": {"start_angstrom": 5000, "end_angstrom": 5010,
                                               "step_angstrom": 1}})"}),
                    Catch::Contains("50000.000000 spaxels a side; at most 46340"));
  CHECK_THROWS_WITH(load_run_config(config, {"stages.dusty={}"}),
                    Catch::Contains("stages.dusty: the pipeline has no such stage"));

  RunConfig bad_stage = load_run_config(config, {"stages.noise.snr=-3"});
  CHECK_THROWS_WITH(run(bad_stage, 1, dir.path), Catch::Contains("stages.noise.snr"));
  CHECK_FALSE(fs::exists(dir.path / "cube.fits"));

  // psf simulates a margin around the field that only aperture_mask crops.
  RunConfig uncropped = load_run_config(
      config,
      {R"(pipeline=["orient", "aperture", "stellar_spectra", "psum", "flux", "psf", "noise"])"});
  CHECK_THROWS_WITH(run(uncropped, 1, dir.path),
                    Catch::Contains("add aperture_mask after them, which crops it"));

  RunConfig missing_input = load_run_config(config, {"input.file=/nonexistent/galaxy.hdf5"});
  CHECK_THROWS_WITH(run(missing_input, 1, dir.path), Catch::Contains("/nonexistent/galaxy.hdf5"));
  // No output folder was left behind: no cube, no staging folder.
  CHECK_FALSE(fs::exists(dir.path));
}

TEST_CASE("a key given twice in a run config is refused, naming the file and the key's path",
          "[pipeline][config]") {
  TempDir dir;
  fs::create_directories(dir.path);
  const fs::path config = dir.path / "twice.json";
  // JSON itself allows it and nlohmann keeps the last value: the run would silently use 0.2.
  std::ofstream(config) << R"({"galaxy": {"redshift": 0.1, "orientation": "face-on",
                                           "redshift": 0.2}})";
  CHECK_THROWS_WITH(load_run_config(config.string(), {}),
                    Catch::Contains(config.string() + ": galaxy.redshift: duplicate key"));
  // Inside arrays, the element is named; the same key in two objects is no duplicate.
  CHECK_NOTHROW(parse_json(R"([{"a": 1}, {"a": 2}])", "x"));
  CHECK_THROWS_WITH(parse_json(R"({"p": [1, {"a": {"b": 1}}, {"a": 1, "a": 2}]})", "x.json"),
                    Catch::Contains("x.json: p[2].a: duplicate key"));
  CHECK_THROWS_WITH(parse_json(R"({"p": [[], [0, {"c": 1, "c": 1}]]})", "x.json"),
                    Catch::Contains("x.json: p[1][1].c: duplicate key"));
  // A --set value is JSON too.
  CHECK_THROWS_WITH(
      load_run_config(example("muse_tng_mastar"), {R"(galaxy={"redshift": 0.1, "redshift": 0.2})"}),
      Catch::Contains("--set galaxy={\"redshift\": 0.1, \"redshift\": 0.2}: "
                      "redshift: duplicate key"));
}

TEST_CASE("a pipeline name that is no preset, or a config path that is a folder, is a clear error",
          "[pipeline][config]") {
  const std::string config = example("muse_tng_mastar");
  // A path out of the presets' folder opened a telescope preset and failed with a raw
  // json.exception.
  CHECK_THROWS_WITH(
      load_run_config(config, {"pipeline=../telescopes/MUSE"}),
      Catch::Contains(config + ": pipeline: unknown pipeline \"../telescopes/MUSE\": expected a "
                               "preset (calc_dusty_ifu, calc_ifu, calc_ifu_gas in "));
  CHECK_THROWS_WITH(load_run_config(config, {"pipeline=calc_ifu_typo"}),
                    Catch::Contains("unknown pipeline \"calc_ifu_typo\""));
  CHECK_THROWS_WITH(load_run_config(config, {"pipeline=3"}),
                    Catch::Contains("pipeline: expected a pipeline name or a list of stage names"));
  // A wrong type for a stage's parameters: psf's met the telescope's PSF added to it as to an
  // object, a raw json.exception.type_error.305.
  CHECK_THROWS_WITH(load_run_config(config, {"stages.psf=3"}),
                    Catch::Contains(config + ": stages.psf: expected a JSON object"));
  CHECK_THROWS_WITH(load_run_config(config, {"telescope=../pipelines/calc_ifu"}),
                    Catch::Contains("telescope: unknown telescope \"../pipelines/calc_ifu\""));

  TempDir dir;
  fs::create_directories(dir.path);
  // An ifstream opens a folder and fails only on reading it, with "basic_filebuf::underflow".
  CHECK_THROWS_WITH(
      load_run_config(dir.path.string(), {}),
      Catch::Equals(dir.path.string() + ": is a directory, expected a JSON run config file"));
  CHECK_THROWS_WITH(load_run_config((dir.path / "none.json").string(), {}),
                    Catch::StartsWith((dir.path / "none.json").string() +
                                      ": cannot read the file: No such file or directory"));
}

TEST_CASE("a galaxy placed by distance gets the redshift of that distance", "[pipeline]") {
  const RunConfig c =
      load_run_config(example("sami_tng_miles"), {"galaxy={\"luminosity_distance_mpc\": 229.6}"});
  CHECK(Cosmology().luminosity_distance_mpc(c.redshift) == Approx(229.6).epsilon(1e-9));
  CHECK(c.redshift == Approx(0.05).epsilon(1e-3));
}

TEST_CASE("a config named by a bare file name resolves relative paths from its folder",
          "[pipeline]") {
  TempDir dir;
  fs::create_directories(dir.path);
  fs::copy_file(example("muse_synthetic"), dir.path / "cfg.json");
  const fs::path previous = fs::current_path();
  fs::current_path(dir.path);
  RunConfig c;
  REQUIRE_NOTHROW(c = load_run_config("cfg.json", {"output.dir=cubes"}));
  fs::current_path(previous);
  CHECK(fs::path(c.output_dir) == (fs::absolute(dir.path) / "cubes").lexically_normal());
}

TEST_CASE("host device counts: 0 is refused, more than the threads only when asked for",
          "[pipeline]") {
  TempDir out;
  const RunConfig config = load_run_config(example("muse_tng_mastar"), {});
  CHECK_THROWS_WITH(run(config, 0, out.path),
                    Catch::Contains("--devices 0: expected at least 1 host device"));
  const int too_many = host_thread_count() + 1;
  CHECK_THROWS_WITH(
      run(config, too_many, out.path),
      Catch::Contains("--devices " + std::to_string(too_many) + ": this process has") &&
          Catch::Contains("devices.oversubscribe"));
  CHECK_FALSE(fs::exists(out.path));
  RunOptions from_config;  // no --devices: the config's count
  from_config.output_dir = out.path.string();
  from_config.progress = false;
  CHECK_THROWS_WITH(
      run_pipeline(load_run_config(example("muse_tng_mastar"), {"devices.count=0"}), from_config),
      Catch::Contains("devices.count 0: expected at least 1 host device"));
  CHECK_FALSE(fs::exists(out.path));
}

TEST_CASE("config values are overridden by key path, as --set does", "[pipeline]") {
  nlohmann::json doc = {{"galaxy", {{"redshift", 0.1}}}};
  apply_override(doc, "galaxy.redshift=0.25");
  apply_override(doc, "stages.psf.shape=moffat");
  apply_override(doc, "devices.count=3");
  CHECK(doc["galaxy"]["redshift"] == 0.25);
  CHECK(doc["stages"]["psf"]["shape"] == "moffat");
  CHECK(doc["devices"]["count"] == 3);
  CHECK_THROWS_WITH(apply_override(doc, "galaxy.redshift"),
                    Catch::Contains("expected key.path=value"));
  CHECK_THROWS_WITH(apply_override(doc, "galaxy.redshift.x=1"),
                    Catch::Contains("galaxy.redshift is not an object"));

  // A telescope preset's fields are overridden on top of the preset, the rest kept.
  doc["telescope"] = "MUSE";
  apply_override(doc, "telescope.spaxel_arcsec=0.4");
  CHECK(doc["telescope"] == nlohmann::json{{"preset", "MUSE"}, {"spaxel_arcsec", 0.4}});
  const Telescope muse = parse_telescope_entry("MUSE", "telescope");
  const Telescope coarse = parse_telescope_entry(doc["telescope"], "telescope");
  CHECK(coarse.spaxel_arcsec == 0.4);
  CHECK(muse.spaxel_arcsec == Approx(0.2));
  CHECK(coarse.fov_arcsec == muse.fov_arcsec);
  CHECK(coarse.name == muse.name);
  CHECK(coarse.wave_step_angstrom == muse.wave_step_angstrom);
  CHECK_THROWS_WITH(parse_telescope_entry({{"preset", "MUSE"}, {"spaxel_arcsec", -1}}, "telescope"),
                    Catch::Contains("telescope.spaxel_arcsec"));
  CHECK_THROWS_WITH(parse_telescope_entry({{"preset", "MUSEE"}}, "telescope"),
                    Catch::Contains("telescope.preset: unknown telescope \"MUSEE\""));
}

TEST_CASE("the showcase example (the README's first run): a smoothed disc whose maps are full",
          "[pipeline]") {
  // The TNG subsample (1,996 stars) leaves 565 of MUSE's 625 velocity spaxels empty; the first
  // example an astronomer sees is a disc with every spaxel lit and its rotation clear.
  const RunConfig config =
      load_run_config(example("muse_disc_showcase"), {"input.synthetic.stars=30000"});
  TempDir out;
  const RunReport report = run(config, 1, out.path);
  const auto& velocity = report.cube.maps.at("velocity_light_kms").values;
  const auto& white = report.cube.maps.at("white_light").values;
  REQUIRE(velocity.size() == 625);
  std::size_t empty = 0, dark = 0;
  for (std::size_t i = 0; i < velocity.size(); ++i) {
    empty += !std::isfinite(velocity[i]);
    dark += !(white[i] > 0);
  }
  CHECK(empty == 0);
  CHECK(dark == 0);
  // Rotation: the field's left and right columns move apart by well over 100 km/s.
  double left = 0, right = 0;
  for (int iy = 0; iy < 25; ++iy) {
    left += velocity[static_cast<std::size_t>(iy) * 25 + 1] / 25;
    right += velocity[static_cast<std::size_t>(iy) * 25 + 23] / 25;
  }
  CHECK(std::abs(right - left) > 100.0);
}

TEST_CASE("only the particle types the stages use are read: gas for the dust screen",
          "[pipeline]") {
  TempDir out;
  for (const std::string name : {"muse_tng_mastar", "muse_tng_mastar_dusty"}) {
    const RunConfig config = load_run_config(example(name), {});
    const RunReport report = run(config, 1, out.path / name);
    std::ifstream summary(out.path / name / "summary.json");
    const auto json = nlohmann::json::parse(summary);
    INFO(name);
    // The cutout holds 100 gas cells; without a dust stage none is read.
    CHECK(json.at("n_gas").get<int>() == (name == "muse_tng_mastar" ? 0 : 100));
    CHECK(json.at("n_stars").get<int>() == 1996);
  }
}

TEST_CASE(
    "the disc example: stars and emission lines in one cube, bitwise for 1 and 3 devices, equal "
    "to its reference cube, H-alpha's flux in the spectrum equal to its map's",
    "[pipeline]") {
  const RunConfig config = load_run_config(
      example("muse_disc_stars_gas"), {"telescope=MUSE", "input.synthetic.stars=20000",
                                       "input.synthetic.gas=5000", "devices.oversubscribe=true"});
  TempDir out1, out3;
  const RunReport one = run(config, 1, out1.path);
  const Cube& cube = one.cube;
  for (const auto& f : {"halpha_flux.png", "gas_velocity.png", "cube.fits"})
    CHECK(fs::exists(out1.path / f));
  CHECK_FALSE(fs::exists(out1.path / "cube.h5"));  // FITS only unless output.hdf5 asks
  REQUIRE(cube.maps.count("flux_halpha") == 1);
  CHECK(cube.maps.at("flux_halpha").unit == "erg/(s*cm**2)");
  REQUIRE(cube.maps.count("velocity_gas_kms") == 1);
  double halpha_map = 0;
  for (const double v : cube.maps.at("flux_halpha").values)
    if (std::isfinite(v)) halpha_map += v;
  REQUIRE(halpha_map > 0);
  // Its reference: the MUSE-WFM example observed with MUSE's narrow field and fewer particles
  // (scripts/update-reference-cubes.sh), as here.
  std::size_t masked = 0;
  CHECK(voxels_off_reference("muse_disc_stars_gas", out1.path / "cube.fits", masked) == 0);
  CHECK(masked == 0);
  const RunReport three = run(config, 3, out3.path);
  CHECK(std::memcmp(three.cube.data.data(), cube.data.data(),
                    cube.data.size() * sizeof(cube.data[0])) == 0);
  for (const auto& [name, map] : cube.maps) {
    INFO(name);
    const auto& other = three.cube.maps.at(name).values;
    CHECK(std::memcmp(other.data(), map.values.data(), other.size() * sizeof(double)) == 0);
  }
  // The integrated spectrum around H-alpha (6564.61 A in vacuum, z = 0.03, air): the line's
  // excess over the continuum 30-60 A away, after the PSF, the LSF and the noise, is the map's
  // flux within 10% (the stars' H-alpha absorption under it takes a few per cent).
  const std::vector<double> spectrum = integrated_spectrum(cube);
  const std::vector<double> wavelength = wavelength_angstrom(cube);
  const double centre = air_from_vacuum(6564.61 * 1.03);
  double line = 0, continuum = 0;
  int n_continuum = 0;
  for (std::size_t k = 0; k < spectrum.size(); ++k) {
    const double d = wavelength[k] - centre;
    if (std::abs(d) <= 8) line += spectrum[k];
    if (std::abs(d) >= 30 && std::abs(d) <= 60) {
      continuum += spectrum[k];
      ++n_continuum;
    }
  }
  REQUIRE(n_continuum > 0);
  int n_line = 0;
  for (const double w : wavelength) n_line += std::abs(w - centre) <= 8;
  const double excess = (line - n_line * continuum / n_continuum) * cube.axes.wave_step_angstrom;
  CHECK(excess * 1e-20 == Approx(halpha_map).epsilon(0.1));
}

TEST_CASE("the run loop reduces between the particle and the cube stages, a stage is listed once",
          "[pipeline]") {
  TempDir dir;
  const std::string config = example("muse_synthetic");
  const std::vector<std::string> small = {"input.synthetic.stars=3000", "input.synthetic.gas=0",
                                          "stages={}"};
  auto with = [&](const std::string& pipeline) {
    std::vector<std::string> overrides = small;
    overrides.push_back("pipeline=" + pipeline);
    return load_run_config(config, overrides);
  };
  // Without psum the loop reduces all the same: the same cube, bit for bit, and psum reported.
  const RunReport listed =
      run(with(R"(["orient", "aperture", "stellar_spectra", "psum", "flux"])"), 1, dir.path / "a");
  const RunReport implicit =
      run(with(R"(["orient", "aperture", "stellar_spectra", "flux"])"), 1, dir.path / "b");
  REQUIRE(listed.cube.data.size() == implicit.cube.data.size());
  CHECK(std::memcmp(listed.cube.data.data(), implicit.cube.data.data(),
                    listed.cube.data.size() * sizeof(listed.cube.data[0])) == 0);
  double total = 0;
  for (double v : implicit.cube.data) total += v;
  CHECK(total > 0);
  std::vector<std::string> names;
  for (const auto& s : implicit.stages) names.push_back(s.name);
  CHECK(names == std::vector<std::string>{"orient", "aperture", "stellar_spectra", "psum", "flux"});

  // A stage listed twice would deposit (or divide by D_L^2) twice: refused, naming it.
  CHECK_THROWS_WITH(
      run(with(R"(["orient", "aperture", "stellar_spectra", "stellar_spectra", "psum"])"), 1,
          dir.path / "c"),
      Catch::Contains("stage \"stellar_spectra\" is listed twice"));
  CHECK_THROWS_WITH(
      run(with(R"(["orient", "aperture", "stellar_spectra", "psum", "flux", "flux"])"), 1,
          dir.path / "c"),
      Catch::Contains("stage \"flux\" is listed twice"));
  // A particle stage after the reduction, the reduction after a cube stage: refused.
  CHECK_THROWS_WITH(
      run(with(R"(["orient", "aperture", "psum", "stellar_spectra"])"), 1, dir.path / "c"),
      Catch::Contains("stages.stellar_spectra: stage \"stellar_spectra\" is a "
                      "particle stage and must come before the reduction \"psum\""));
  CHECK_THROWS_WITH(
      run(with(R"(["orient", "aperture", "stellar_spectra", "flux", "psum"])"), 1, dir.path / "c"),
      Catch::Contains("stages.psum: stage \"psum\" is the reduction and must come before a cube "
                      "stage \"flux\""));
  CHECK_FALSE(fs::exists(dir.path / "c"));
}

TEST_CASE("a stage's parameters inherit the run config's keys its entry names", "[pipeline]") {
  // orient inherits galaxy.orientation, psf the telescope's PSF, stellar_spectra the ssp policy.
  const auto& orient = stage_entry("orient", "p");
  REQUIRE(orient.inherits.size() == 1);
  CHECK(orient.inherits[0].run_key == "galaxy.orientation");
  TempDir dir;
  const std::string config = example("muse_synthetic");
  const std::vector<std::string> small = {"input.synthetic.stars=3000", "input.synthetic.gas=0",
                                          "stages={}",
                                          R"(pipeline=["orient", "aperture", "stellar_spectra"])"};
  auto edge_on = small, explicit_edge_on = small;
  edge_on.push_back("galaxy.orientation=edge-on");
  explicit_edge_on.push_back("stages.orient.orientation=edge-on");
  const RunReport a = run(load_run_config(config, edge_on), 1, dir.path / "a");
  const RunReport b = run(load_run_config(config, explicit_edge_on), 1, dir.path / "b");
  const RunReport c = run(load_run_config(config, small), 1, dir.path / "c");
  CHECK(a.cube.data == b.cube.data);
  CHECK(a.cube.data != c.cube.data);
  // A bad inherited value is named by the key the user wrote.
  auto bad = small;
  bad.push_back(R"(galaxy.orientation={"alpha_deg": "sixty"})");
  CHECK_THROWS_WITH(run(load_run_config(config, bad), 1, dir.path / "d"),
                    Catch::StartsWith("galaxy.orientation.alpha_deg:"));
  auto bad_own = small;
  bad_own.push_back(R"(stages.orient.orientation={"alpha_deg": "sixty"})");
  CHECK_THROWS_WITH(run(load_run_config(config, bad_own), 1, dir.path / "d"),
                    Catch::StartsWith("stages.orient.orientation.alpha_deg:"));
}

TEST_CASE("a spectrograph's arms: one cube each from one run, each the one-arm run's cube",
          "[pipeline][arms]") {
  // SAMI's blue and red arms (telescope given as a list): the first arm keeps the run's seed,
  // the second draws its noise from seed + 1, so each cube is bitwise the run of that arm alone.
  const std::vector<std::string> small = {"input.synthetic.stars=4000", "input.synthetic.gas=400"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), small.begin(), small.end());
    return load_run_config(example("muse_synthetic"), more);
  };
  TempDir both_dir, blue_dir, red_dir;
  const RunReport both = run(with({R"(telescope=["SAMI", "SAMI-red"])"}), 1, both_dir.path);
  const RunReport blue = run(with({"telescope=\"SAMI\""}), 1, blue_dir.path);
  const RunReport red = run(with({"telescope=\"SAMI-red\"", "seed=43"}), 1, red_dir.path);

  REQUIRE(both.arms.size() == 2);
  for (const char* file : {"cube_SAMI.fits", "cube_SAMI-red.fits", "white_light_SAMI-red.png",
                           "spectrum_SAMI.png", "summary.json"})
    CHECK(fs::exists(both_dir.path / file));
  CHECK_FALSE(fs::exists(both_dir.path / "cube.fits"));
  const Cube& blue_arm = both.arms[0];
  const Cube& red_arm = both.arms[1];
  CHECK(blue_arm.shape.n_wave == 1924);
  CHECK(red_arm.shape.n_wave == 1930);
  CHECK(red_arm.axes.wavelength_angstrom(0) == 6300.0);
  double red_light = 0;
  for (double v : red_arm.data)
    if (!std::isnan(v)) red_light += v;
  CHECK(red_light > 0);  // the red arm sees light (H-alpha's band at z = 0.05 and continuum)
  auto same = [](const Cube& a, const Cube& b) {
    REQUIRE(a.data.size() == b.data.size());
    REQUIRE(a.variance.size() == b.variance.size());
    return std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(a.data[0])) == 0 &&
           std::memcmp(a.variance.data(), b.variance.data(),
                       a.variance.size() * sizeof(a.variance[0])) == 0;
  };
  CHECK(same(blue_arm, blue.cube));
  CHECK(same(red_arm, red.cube));
  CHECK(both.cube.shape == blue.cube.shape);

  const nlohmann::json summary =
      read_json_file((both_dir.path / "summary.json").string(), "summary");
  REQUIRE(summary.at("arms").size() == 2);
  CHECK(summary["arms"][1]["telescope"] == "SAMI-red");
  CHECK(summary["arms"][1]["cube"]["n_wave"] == 1930);

  // Errors name the key; an arm whose run would not fit stops the run before any output.
  CHECK_THROWS_WITH(with({R"(telescope=["SAMI"])"}),
                    Catch::Contains("telescope: a list names the arms") &&
                        Catch::Contains("at least two entries, got 1"));
  CHECK_THROWS_WITH(with({R"(telescope=["SAMI", "SAMI"])"}),
                    Catch::Contains("telescope[1].name: \"SAMI\" is already an arm's name"));
  CHECK_THROWS_WITH(with({R"(telescope=["SAMI", {"preset": "SAMI", "name": "red/arm"}])"}),
                    Catch::Contains("telescope[1].name: an arm's name names its files"));
  TempDir refused;
  CHECK_THROWS_WITH(
      run(with({R"(telescope=["SAMI", {"preset": "SAMI-red", "spaxel_arcsec": 0.02}])",
                "devices.memory_limit_gb=0.5"}),
          1, refused.path),
      Catch::Contains("telescope arm SAMI-red: the run does not fit in memory"));
  CHECK_FALSE(fs::exists(refused.path));
}
