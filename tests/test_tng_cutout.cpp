// The genuine TNG100-1 cutout ($IFUSIM_DATA_DIR/snapshots/tng100-1_snap078_subhalo_subsample.hdf5)
// ingested and checked against numbers computed independently of ifusim by
//   /usr/bin/python3 tests/tools/tng_cutout_expected.py <that file>
// (h5py + numpy + astropy.cosmology; the script documents its conventions). The numbers below
// are that script's output, pasted.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/tng/galaxy_summary.h"
#include "io/tng/tng_reader.h"
#include "pipeline/devices.h"
#include "tng_test_util.h"

using namespace ifusim;
using ifusim::test::host;

namespace {

struct Expected {
  std::size_t n_stars = 1996, n_wind = 4, n_gas = 100;
  double stellar_mass = 2028600539.8117285, initial_mass = 3290440870.995982,
         gas_mass = 147873832.18688253;
  std::array<double, 3> center = {12465.323351918776, 58537.837872223026, 54071.05797793989};
  double half_mass_radius = 111.67661714655728;
  std::array<double, 3> bulk_velocity = {1240.9158758380638, -627.1380112152802,
                                         -88.68102617976157};
  double mw_age = 4.6265645713838275, median_age = 4.07144703218251, min_age = 0.013708485350496957,
         max_age = 9.943847842985704;
  double mw_metallicity = 0.006899088874744241;
  std::array<double, 3> first_pos = {-18.67804123746842, 9.28678043511734, 43.938991771181556};
  std::array<double, 3> first_vel = {60.94578696865801, -152.5853366043458, -8.35460625797161};
  double first_age = 9.19892480528011, first_initial_mass = 1363514.2420778498;
  double gas0_temperature = 28743168.34732416, gas0_density = 17615.290988206514;
  double gas_mw_temperature = 26209070.781103715;
};

bool have_cutout() {
  if (std::filesystem::exists(test::tng100_cutout())) return true;
  WARN("reference data missing: " << test::tng100_cutout() << " (set IFUSIM_DATA_DIR)");
  return false;
}

}  // namespace

TEST_CASE("TNG100 cutout: counts, masses, centre, ages match the independent script", "[tng]") {
  REQUIRE(have_cutout());
  const Expected e;
  auto mesh = make_mesh(Backend::cpu, 1);
  TngReadOptions opt;
  opt.path = test::tng100_cutout();
  TngIngestReport rep;
  const GalaxyData d = read_tng(*mesh, opt, &rep);

  // Counts from dataset shapes (the header's NumPart_ThisFile says 123468 / 13587).
  CHECK(rep.layout == "cutout");
  CHECK(rep.n_stars == e.n_stars);
  CHECK(rep.n_wind_dropped == e.n_wind);
  CHECK(rep.n_gas == e.n_gas);
  CHECK(d.stars.count() == e.n_stars);
  CHECK(d.gas.count() == e.n_gas);
  CHECK(rep.center_method == "shrinking spheres");

  const Galaxy& g = d.galaxy;
  CHECK(g.simulation == "L75n1820TNG");
  CHECK(g.snapshot == 78);
  CHECK(g.subhalo_id == 9);  // Header CutoutID
  CHECK(g.scale_factor == Approx(0.77058363).epsilon(1e-8));
  CHECK(g.redshift == Approx(0.29771768).epsilon(1e-7));
  CHECK(g.cosmology.hubble_param == 0.6774);
  CHECK(g.cosmology.omega_matter == 0.3089);
  CHECK(g.cosmology.omega_lambda == 0.6911);
  // The centre is computed in double on both sides: 1e-4 kpc (absolute) out of ~5e4 kpc.
  for (int c = 0; c < 3; ++c) CHECK(g.center_kpc[c] == Approx(e.center[c]).margin(1e-4));
  CHECK(g.halfmass_radius_stars_kpc == Approx(e.half_mass_radius).epsilon(1e-9));
  for (int c = 0; c < 3; ++c)
    CHECK(rep.bulk_velocity_kms[c] == Approx(e.bulk_velocity[c]).epsilon(1e-9));

  // Sums over float32 fields: relative 1e-6.
  const GalaxySummary s = summarize(d, rep);
  CHECK(s.stellar_mass_msun == Approx(e.stellar_mass).epsilon(1e-6));
  CHECK(s.stellar_initial_mass_msun == Approx(e.initial_mass).epsilon(1e-6));
  CHECK(s.gas_mass_msun == Approx(e.gas_mass).epsilon(1e-6));
  CHECK(s.mass_weighted_age_gyr == Approx(e.mw_age).epsilon(1e-6));
  CHECK(s.median_age_gyr == Approx(e.median_age).epsilon(1e-6));
  CHECK(s.mass_weighted_metallicity == Approx(e.mw_metallicity).epsilon(1e-6));

  // Ages at the snapshot's own epoch: none older than the universe at a = 0.7706 (10.4 Gyr); a
  // lookback from z = 0 would add t(1) - t(0.7706) = 3.4 Gyr to every age.
  const auto age = host(d.stars.age_gyr);
  const auto [amin, amax] = std::minmax_element(age.begin(), age.end());
  CHECK(*amin == Approx(e.min_age).margin(1e-5));
  CHECK(*amax == Approx(e.max_age).epsilon(1e-6));
  CHECK(*amax < g.cosmology.cosmic_time_gyr(g.scale_factor));

  // The first star (file row 0), field by field: float32 storage, so 1e-4 kpc, 1e-3 km/s.
  const auto pos = host(d.stars.position_kpc), vel = host(d.stars.velocity_kms);
  for (int c = 0; c < 3; ++c) {
    CHECK(pos[c] == Approx(e.first_pos[c]).margin(1e-4));
    CHECK(vel[c] == Approx(e.first_vel[c]).margin(1e-3));
  }
  CHECK(age[0] == Approx(e.first_age).epsilon(1e-6));
  CHECK(host(d.stars.initial_mass_msun)[0] == Approx(e.first_initial_mass).epsilon(1e-6));

  // Gas: density unit and the TNG FAQ temperature (relative 1e-6, float32 storage).
  CHECK(host(d.gas.density_msun_per_kpc3)[0] == Approx(e.gas0_density).epsilon(1e-6));
  const auto temp = host(d.gas.temperature_k), gmass = host(d.gas.mass_msun);
  CHECK(temp[0] == Approx(e.gas0_temperature).epsilon(1e-6));
  double tw = 0, w = 0;
  for (std::size_t i = 0; i < temp.size(); ++i) {
    tw += double(temp[i]) * gmass[i];
    w += gmass[i];
  }
  CHECK(tw / w == Approx(e.gas_mw_temperature).epsilon(1e-6));
  CHECK(d.gas.metals.components() == 10);
  CHECK(d.gas.metals.rows() == e.n_gas);
  CHECK(d.gas.sfr_msun_per_yr.rows() == e.n_gas);

  // No field holds NaN; positions are galaxy-centred (the cutout spans < 200 kpc).
  for (const float v : pos) {
    REQUIRE(std::isfinite(v));
    CHECK(std::abs(v) < 250.0f);
  }
}

TEST_CASE("TNG100 cutout: 1, 2, 3 and 7 host devices read the same particles", "[tng]") {
  REQUIRE(have_cutout());
  TngReadOptions opt;
  opt.path = test::tng100_cutout();
  auto mesh1 = make_mesh(Backend::cpu, 1);
  const GalaxyData ref = read_tng(*mesh1, opt);
  for (const int devices : {2, 3, 7}) {
    auto mesh = make_mesh(Backend::cpu, devices);
    const GalaxyData d = read_tng(*mesh, opt);
    INFO(devices << " devices");
    CHECK(d.stars.mass_msun.shards().size() == static_cast<std::size_t>(devices));
    CHECK(d.galaxy.center_kpc == ref.galaxy.center_kpc);
    // Bitwise: every device reads and converts its own rows the same way.
    CHECK(host(d.stars.position_kpc) == host(ref.stars.position_kpc));
    CHECK(host(d.stars.velocity_kms) == host(ref.stars.velocity_kms));
    CHECK(host(d.stars.initial_mass_msun) == host(ref.stars.initial_mass_msun));
    CHECK(host(d.stars.mass_msun) == host(ref.stars.mass_msun));
    CHECK(host(d.stars.metallicity) == host(ref.stars.metallicity));
    CHECK(host(d.stars.age_gyr) == host(ref.stars.age_gyr));
    CHECK(host(d.gas.position_kpc) == host(ref.gas.position_kpc));
    CHECK(host(d.gas.metals) == host(ref.gas.metals));
    CHECK(host(d.gas.temperature_k) == host(ref.gas.temperature_k));
  }
}

TEST_CASE("ifusim inspect --json summarises the TNG100 cutout", "[tng][cli]") {
  REQUIRE(have_cutout());
  const Expected e;
  const std::string cmd =
      std::string(IFUSIM_BINARY) + " inspect --json '" + test::tng100_cutout() + "'";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  REQUIRE(pclose(p) == 0);
  const auto j = nlohmann::json::parse(out);
  CHECK(j.at("simulation") == "L75n1820TNG");
  CHECK(j.at("snapshot") == 78);
  CHECK(j.at("n_stars") == e.n_stars);
  CHECK(j.at("n_wind_dropped") == e.n_wind);
  CHECK(j.at("n_gas") == e.n_gas);
  CHECK(j.at("redshift").get<double>() == Approx(0.29771768).epsilon(1e-7));
  CHECK(j.at("scale_factor").get<double>() == Approx(0.77058363).epsilon(1e-8));
  CHECK(j.at("hubble_param").get<double>() == 0.6774);
  CHECK(j.at("stellar_mass_msun").get<double>() == Approx(e.stellar_mass).epsilon(1e-6));
  CHECK(j.at("stellar_initial_mass_msun").get<double>() == Approx(e.initial_mass).epsilon(1e-6));
  CHECK(j.at("gas_mass_msun").get<double>() == Approx(e.gas_mass).epsilon(1e-6));
  for (int c = 0; c < 3; ++c)
    CHECK(j.at("center_kpc").at(c).get<double>() == Approx(e.center[c]).margin(1e-4));
  CHECK(j.at("stellar_half_mass_radius_kpc").get<double>() ==
        Approx(e.half_mass_radius).epsilon(1e-9));
  CHECK(j.at("mass_weighted_age_gyr").get<double>() == Approx(e.mw_age).epsilon(1e-6));
  CHECK(j.at("median_age_gyr").get<double>() == Approx(e.median_age).epsilon(1e-6));
  CHECK(j.at("mass_weighted_metallicity").get<double>() == Approx(e.mw_metallicity).epsilon(1e-6));
}
