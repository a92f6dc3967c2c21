// A galaxy held in memory (io/host_galaxy.h), the input of the Python package's
// Galaxy.from_arrays: checked against the particle tables, naming the field; sharded over any
// number of devices and gathered back unchanged; and run as a config's galaxy, bitwise the same
// cube as the synthetic source it was taken from.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "io/host_galaxy.h"
#include "io/run_config.h"
#include "io/tng/synthetic_source.h"
#include "pipeline/devices.h"
#include "pipeline/runner.h"

using namespace ifusim;

namespace {

HostGalaxy two_stars() {
  HostGalaxy g;
  g.galaxy.redshift = 0.05;
  g.source = "test";
  g.stars["position_kpc"] = {{1, 0, 0, -3, 0, 0}, 2, 3};
  g.stars["velocity_kms"] = {{0, 0, 10, 0, 0, -10}, 2, 3};
  g.stars["initial_mass_msun"] = {{1e5, 3e5}, 2, 1};
  g.stars["age_gyr"] = {{1, 5}, 2, 1};
  g.stars["metallicity"] = {{0.01, 0.02}, 2, 1};
  return g;
}

void check_fails(HostGalaxy g, const std::string& message) {
  INFO(message);
  CHECK_THROWS_WITH(validate_and_complete(g), Catch::Contains(message));
}

// n stars on a ring of radius 5 kpc around `centre_kpc`, moving at `bulk_kms` along x plus
// +-200 km/s of rotation, all `age_gyr` old.
HostGalaxy ring(std::size_t n, float centre_kpc, float bulk_kms, float age_gyr) {
  HostGalaxy g;
  g.galaxy.redshift = 0.5;
  g.source = "test";
  std::vector<float> x, v;
  for (std::size_t i = 0; i < n; ++i) {
    const double phi = 2 * M_PI * static_cast<double>(i) / static_cast<double>(n);
    x.insert(x.end(), {static_cast<float>(centre_kpc + 5 * std::cos(phi)),
                       static_cast<float>(centre_kpc + 5 * std::sin(phi)), centre_kpc});
    v.insert(v.end(), {static_cast<float>(bulk_kms - 200 * std::sin(phi)),
                       static_cast<float>(200 * std::cos(phi)), 0.0f});
  }
  g.stars["position_kpc"] = {x, n, 3};
  g.stars["velocity_kms"] = {v, n, 3};
  g.stars["initial_mass_msun"] = {std::vector<float>(n, 1e5f), n, 1};
  g.stars["age_gyr"] = {std::vector<float>(n, age_gyr), n, 1};
  g.stars["metallicity"] = {std::vector<float>(n, 0.02f), n, 1};
  return g;
}

}  // namespace

TEST_CASE("host galaxy: what is legal but likely a mistake is a warning, with its numbers") {
  // At z = 0.5 the Universe (Planck 2015) is 8.6 Gyr old.
  HostGalaxy fine = ring(1000, 0, 20, 8);
  CHECK(validate_and_complete(fine).empty());

  HostGalaxy lookback = ring(1000, 0, 0, 12);  // ages from today, not from z = 0.5
  const auto age_warnings = validate_and_complete(lookback);
  REQUIRE(age_warnings.size() == 1);
  CHECK_THAT(age_warnings[0], Catch::Contains("stars.age_gyr: 1000 of 1000 stars are older than "
                                              "the Universe at z = 0.5 (8.6") &&
                                  Catch::Contains("the oldest 12 Gyr"));

  HostGalaxy in_years = ring(1000, 0, 0, 1e10f);
  CHECK_THROWS_WITH(validate_and_complete(in_years),
                    Catch::Contains("stars.age_gyr: the oldest star is 1e+10 Gyr") &&
                        Catch::Contains("years or Myr given?"));

  HostGalaxy in_the_box = ring(1000, 20000, 500, 5);  // box coordinates, bulk motion kept
  const auto warnings = validate_and_complete(in_the_box);
  REQUIRE(warnings.size() == 2);
  CHECK_THAT(warnings[0], Catch::Contains("stars.position_kpc: the stars' centre of mass is at "
                                          "(2e+04, 2e+04, 2e+04) kpc, 3.464e+04 kpc from the "
                                          "origin"));
  CHECK_THAT(warnings[1], Catch::Contains("stars.velocity_kms: the stars' mass-weighted mean "
                                          "velocity is (500, ") &&
                              Catch::Contains("not subtracted?"));
  // A few stars are a test's, not a galaxy: no centre or bulk motion is asked of them.
  HostGalaxy few = ring(10, 20000, 500, 5);
  CHECK(validate_and_complete(few).empty());
}

TEST_CASE("host galaxy: every field checked against the tables and named in errors") {
  HostGalaxy ok = two_stars();
  REQUIRE_NOTHROW(validate_and_complete(ok));
  CHECK(ok.galaxy.scale_factor == Approx(1 / 1.05));
  // Half the mass (3e5 of 4e5) sits at r = 3 kpc.
  CHECK(ok.galaxy.halfmass_radius_stars_kpc == Approx(3.0));

  HostGalaxy g = two_stars();
  g.stars["position_kpc"].components = 2;
  check_fails(g, "stars.position_kpc: shape (2, 2), expected (N, 3)");
  g = two_stars();
  g.stars["age_gyr"].values[1] = -1;
  check_fails(g, "stars.age_gyr: row 1 is -1");
  g = two_stars();
  g.stars["metallicity"].values[0] = std::nanf("");
  check_fails(g, "stars.metallicity: row 0 is nan; expected finite metal mass fractions");
  g = two_stars();
  g.stars["spaxel_index"] = {{0, 0}, 2, 1};  // derived by a stage, not an input
  check_fails(g, "stars.spaxel_index: unknown field");
  g = two_stars();
  g.stars.erase("age_gyr");
  check_fails(g, "stars.age_gyr: required field missing");
  g = two_stars();
  g.stars["mass_msun"] = {{1, 2, 3}, 3, 1};
  check_fails(g, "stars.mass_msun: 3 rows, but stars.age_gyr has 2");
  g = two_stars();
  g.gas["position_kpc"] = {{0, 0, 0}, 1, 3};
  g.gas["velocity_kms"] = {{0, 0, 0}, 1, 3};
  g.gas["mass_msun"] = {{1e6}, 1, 1};
  check_fails(g, "gas.density_msun_per_kpc3: required field missing");
  g = two_stars();
  g.galaxy.redshift = -0.5;
  check_fails(g, "redshift: ");
}

TEST_CASE("host galaxy: sharded over 1, 2 and 3 devices and gathered back unchanged") {
  const auto source = make_mesh(Backend::cpu, 1);
  tng::SyntheticGalaxySpec spec;
  spec.n_stars = 5000;
  spec.n_gas = 700;
  spec.wind_fraction = 0.0;
  const GalaxyData made = tng::make_synthetic_galaxy(*source, spec);
  HostGalaxy host = host_galaxy_of(made, "synthetic");
  REQUIRE(host.n_stars() == 5000);
  REQUIRE(host.n_gas() == 700);
  REQUIRE_NOTHROW(validate_and_complete(host));
  for (int devices : {1, 2, 3}) {
    const auto mesh = make_mesh(Backend::cpu, devices);
    const GalaxyData placed = put_host_galaxy(*mesh, host, true);
    CHECK(placed.stars.position_kpc.shards().size() == static_cast<std::size_t>(devices));
    const HostGalaxy back = host_galaxy_of(placed, "again");
    CHECK(back.stars.size() == host.stars.size());
    CHECK(back.gas.size() == host.gas.size());
    for (const auto& [name, field] : host.stars) CHECK(back.stars.at(name).values == field.values);
    for (const auto& [name, field] : host.gas) CHECK(back.gas.at(name).values == field.values);
    CHECK(put_host_galaxy(*mesh, host, false).gas.count() == 0);
  }
}

TEST_CASE("host galaxy: a config's galaxy gives the cube of the synthetic source it came from") {
  const nlohmann::json config = {
      {"input", {{"synthetic", {{"stars", 4000}, {"seed", 3}, {"redshift", 0.05}}}}},
      {"galaxy", {{"redshift", 0.05}}},
      {"cosmology", "snapshot"},
      {"telescope", "SAMI"},
      {"ssp",
       {{"library", "${IFUSIM_DATA_DIR}/ssp/MaStar_CB19.12_1_5.fits.gz"},
        {"outside_grid", "clamp"}}},
      {"pipeline", {"orient", "aperture", "stellar_spectra", "psum"}}};
  RunOptions options;
  options.write_outputs = false;
  options.progress = false;
  const RunReport synthetic = run_pipeline(parse_run_config(config, ""), options);

  const auto mesh = make_mesh(Backend::cpu, 1);
  auto host = std::make_shared<HostGalaxy>(host_galaxy_of(
      tng::make_synthetic_galaxy(*mesh, parse_run_config(config, "").synthetic.value(), false),
      "arrays"));
  validate_and_complete(*host);  // keeps the source's half-mass radius
  nlohmann::json without_input = config;
  without_input.erase("input");
  without_input["galaxy"].erase("redshift");  // defaults to the galaxy's
  options.n_devices = 2;
  const RunReport given = run_pipeline(parse_run_config(without_input, "", host), options);
  REQUIRE(synthetic.cube.data.size() > 0);
  double total = 0;
  for (const double v : synthetic.cube.data) total += v;
  CHECK(total > 0);
  CHECK(given.cube.data == synthetic.cube.data);
  CHECK(given.output_dir.empty());
  CHECK(given.files.empty());
  CHECK(given.summary.at("n_stars") == 4000);

  // Without a galaxy the config needs its input; with one, no redshift means the galaxy's.
  CHECK_THROWS_AS(parse_run_config(without_input, ""), ConfigError);
  CHECK(parse_run_config(without_input, "", host).redshift == 0.05);
}

TEST_CASE("host galaxy: an uncentred galaxy's empty cube is named, not left silent") {
  HostGalaxy uncentred = ring(1000, 20000, 0, 5);  // box coordinates: far outside the field
  validate_and_complete(uncentred);
  const nlohmann::json config = {
      {"galaxy", nlohmann::json::object()},
      {"telescope", "MUSE"},
      {"ssp", {{"library", "${IFUSIM_DATA_DIR}/ssp/MaStar_CB19.12_1_5.fits.gz"}}},
      {"pipeline", {"aperture", "stellar_spectra", "psum"}}};
  RunOptions options;
  options.write_outputs = false;
  options.progress = false;
  std::ostringstream log;
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  const RunReport report =
      run_pipeline(parse_run_config(config, "", std::make_shared<HostGalaxy>(uncentred)), options);
  spdlog::set_default_logger(previous);
  CHECK_THAT(log.str(), Catch::Contains("the cube holds no light: no star fell in the") &&
                            Catch::Contains("is the galaxy centred"));
  // A centred one gives light, and no such warning.
  std::ostringstream centred_log;
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(centred_log)));
  HostGalaxy centred = ring(1000, 0, 0, 5);
  validate_and_complete(centred);
  const RunReport lit =
      run_pipeline(parse_run_config(config, "", std::make_shared<HostGalaxy>(centred)), options);
  spdlog::set_default_logger(previous);
  CHECK_THAT(centred_log.str(), !Catch::Contains("no light"));
  double total = 0;
  for (const double v : lit.cube.data) total += v;
  CHECK(total > 0);
  CHECK(report.cube.data.size() == lit.cube.data.size());
}
