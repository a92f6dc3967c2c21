// Chunked TNG snapshots (snapdir_NNN + groups_NNN + offsets_NNN.hdf5) written by the synthetic
// generator (io/tng/synthetic_galaxy.h): a subhalo whose particles span three chunk files reads
// the same as the same galaxy written as a cutout, on any number of devices.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include "io/tng/synthetic_files.h"
#include "io/tng/tng_reader.h"
#include "pipeline/devices.h"
#include "tng_test_util.h"

using namespace ifusim;
using ifusim::test::host;

namespace {

// A central of 6000 PartType4 entries and two satellites (1500, 750) over 4 chunks: chunk k
// holds rows [N k / 4, N (k + 1) / 4) of the 8250 stars, so the central spans chunks 0, 1, 2
// and the first satellite chunks 2 and 3. The central sits across the box edge in x and z.
tng::SyntheticSnapshotSpec snapshot_spec() {
  tng::SyntheticGalaxySpec central;
  central.n_stars = 6000;
  central.n_gas = 800;
  central.seed = 20240611;
  central.redshift = 0.5;
  central.inclination_deg = 50;
  central.center_ckpc_h = {74999.0, 20000.0, 0.5};
  central.bulk_velocity_kms = {120.0, -80.0, 35.0};
  return tng::make_snapshot_spec(central, 3, 2, 4);
}

void write_fixture(const test::ScratchDir& dir, const tng::SyntheticSnapshotSpec& spec) {
  tng::write_tng_snapshot(dir.path().string(), spec);
  for (std::size_t s = 0; s < spec.subhalos.size(); ++s)
    tng::write_tng_cutout(dir.file("cutout_" + std::to_string(s) + ".hdf5"), spec.subhalos[s]);
}

}  // namespace

TEST_CASE("snapshot: a subhalo spanning three chunk files reads as its cutout", "[tng]") {
  const test::ScratchDir dir("tng_snapshot");
  const auto spec = snapshot_spec();
  write_fixture(dir, spec);
  auto mesh = make_mesh(Backend::cpu, 3);

  for (const long long id : {0LL, 1LL}) {
    INFO("subhalo " << id);
    TngReadOptions snap_opt;
    snap_opt.path = dir.path().string();
    snap_opt.snapshot = spec.snapshot;
    snap_opt.subhalo_id = id;
    TngIngestReport snap_rep, cut_rep;
    const GalaxyData s = read_tng(*mesh, snap_opt, &snap_rep);
    TngReadOptions cut_opt;
    cut_opt.path = dir.file("cutout_" + std::to_string(id) + ".hdf5");
    const GalaxyData c = read_tng(*mesh, cut_opt, &cut_rep);

    CHECK(snap_rep.layout == "snapshot");
    CHECK(snap_rep.center_method == "SubhaloPos");
    CHECK(snap_rep.n_files_read == (id == 0 ? 3u : 2u));  // the premise of the test
    CHECK(s.galaxy.subhalo_id == id);
    CHECK(s.galaxy.snapshot == spec.snapshot);
    CHECK(s.galaxy.simulation == spec.simulation_name);

    // Wind cells: the generator's own rows say which entries have formation time <= 0.
    tng::TngStarRows rows;
    tng::generate_star_rows(spec.subhalos[id], 0, spec.subhalos[id].n_stars, rows);
    const auto n_wind = static_cast<std::size_t>(std::count_if(
        rows.formation_time.begin(), rows.formation_time.end(), [](float a) { return a <= 0; }));
    REQUIRE(n_wind > 0);
    CHECK(snap_rep.n_wind_dropped == n_wind);
    CHECK(cut_rep.n_wind_dropped == n_wind);
    REQUIRE(s.stars.count() == spec.subhalos[id].n_stars - n_wind);
    REQUIRE(c.stars.count() == s.stars.count());
    REQUIRE(s.gas.count() == spec.subhalos[id].n_gas);
    REQUIRE(c.gas.count() == s.gas.count());

    // Same file values, same conversion: bitwise.
    CHECK(host(s.stars.mass_msun) == host(c.stars.mass_msun));
    CHECK(host(s.stars.initial_mass_msun) == host(c.stars.initial_mass_msun));
    CHECK(host(s.stars.metallicity) == host(c.stars.metallicity));
    CHECK(host(s.stars.age_gyr) == host(c.stars.age_gyr));
    CHECK(host(s.gas.metals) == host(c.gas.metals));
    CHECK(host(s.gas.temperature_k) == host(c.gas.temperature_k));

    // Centres differ (SubhaloPos vs shrinking spheres), box-frame positions and peculiar
    // velocities do not: 1e-4 kpc (float32 positions of < 300 kpc relative to either centre)
    // and 1e-3 km/s.
    const auto sp = host(s.stars.position_kpc), cp = host(c.stars.position_kpc);
    const auto sv = host(s.stars.velocity_kms), cv = host(c.stars.velocity_kms);
    const double box_kpc = spec.subhalos[id].box_size_ckpc_h * spec.subhalos[id].scale_factor() /
                           spec.subhalos[id].cosmology.hubble_param;
    double worst_pos = 0, worst_vel = 0;
    for (std::size_t i = 0; i < sp.size(); ++i) {
      const int k = static_cast<int>(i % 3);
      double dpos = (sp[i] + s.galaxy.center_kpc[k]) - (cp[i] + c.galaxy.center_kpc[k]);
      dpos -= box_kpc * std::round(dpos / box_kpc);  // the two centres may sit either side
      worst_pos = std::max(worst_pos, std::abs(dpos));
      worst_vel = std::max(worst_vel, std::abs((sv[i] + snap_rep.bulk_velocity_kms[k]) -
                                               (cv[i] + cut_rep.bulk_velocity_kms[k])));
    }
    CHECK(worst_pos < 1e-4);
    CHECK(worst_vel < 1e-3);

    // The shrinking-sphere centre finds the generator's centre (a disc + bulge: within 0.5 kpc),
    // the stars' bulk velocity its bulk velocity (within 10 km/s), and the half-mass radius
    // from the stars agrees with the catalog's SubhaloHalfmassRadType[4] within 5 %.
    const auto& g = spec.subhalos[id];
    const double to_kpc = g.scale_factor() / g.cosmology.hubble_param;
    for (int k = 0; k < 3; ++k) {
      double d = c.galaxy.center_kpc[k] - g.center_ckpc_h[k] * to_kpc;
      d -= box_kpc * std::round(d / box_kpc);
      CHECK(std::abs(d) < 0.5);
      double ds = s.galaxy.center_kpc[k] - g.center_ckpc_h[k] * to_kpc;
      ds -= box_kpc * std::round(ds / box_kpc);
      CHECK(std::abs(ds) < 5e-3);  // SubhaloPos is float32: half an ulp at 7.5e4 is 3.9e-3
      CHECK(std::abs(cut_rep.bulk_velocity_kms[k] - g.bulk_velocity_kms[k]) < 10.0);
    }
    CHECK(c.galaxy.halfmass_radius_stars_kpc ==
          Approx(s.galaxy.halfmass_radius_stars_kpc).epsilon(0.05));
    for (const float v : sp) REQUIRE(std::abs(v) < 300.0f);  // wrapped across the box edge
  }
}

TEST_CASE("snapshot: 1, 2, 3 and 7 devices read the same particles", "[tng]") {
  const test::ScratchDir dir("tng_snapshot_devices");
  const auto spec = snapshot_spec();
  tng::write_tng_snapshot(dir.path().string(), spec);
  TngReadOptions opt;
  opt.path = dir.path().string();
  opt.snapshot = spec.snapshot;
  opt.subhalo_id = 0;
  auto mesh1 = make_mesh(Backend::cpu, 1);
  const GalaxyData ref = read_tng(*mesh1, opt);
  for (const int devices : {2, 3, 7}) {
    INFO(devices << " devices");
    auto mesh = make_mesh(Backend::cpu, devices);
    const GalaxyData d = read_tng(*mesh, opt);
    CHECK(host(d.stars.position_kpc) == host(ref.stars.position_kpc));
    CHECK(host(d.stars.velocity_kms) == host(ref.stars.velocity_kms));
    CHECK(host(d.stars.mass_msun) == host(ref.stars.mass_msun));
    CHECK(host(d.stars.age_gyr) == host(ref.stars.age_gyr));
    CHECK(host(d.gas.position_kpc) == host(ref.gas.position_kpc));
    CHECK(host(d.gas.sfr_msun_per_yr) == host(ref.gas.sfr_msun_per_yr));
  }
}

TEST_CASE("snapshot: bad layouts are errors naming the file", "[tng]") {
  const test::ScratchDir dir("tng_snapshot_errors");
  const auto spec = snapshot_spec();
  tng::write_tng_snapshot(dir.path().string(), spec);
  auto mesh = make_mesh(Backend::cpu, 2);
  TngReadOptions opt;
  opt.path = dir.path().string();
  opt.snapshot = spec.snapshot;

  opt.subhalo_id = 3;
  CHECK_THROWS_WITH(read_tng(*mesh, opt),
                    Catch::Contains("subhalo id 3 out of range: Nsubgroups_Total is 3") &&
                        Catch::Contains("fof_subhalo_tab_099.0.hdf5"));
  opt.subhalo_id = -1;
  CHECK_THROWS_WITH(read_tng(*mesh, opt), Catch::Contains("out of range"));

  TngReadOptions no_number = opt;
  no_number.snapshot.reset();
  CHECK_THROWS_WITH(read_tng(*mesh, no_number),
                    Catch::Contains("needs a snapshot number and a subhalo id"));

  opt.subhalo_id = 0;
  std::filesystem::remove(tng::snapshot_chunk_path(dir.path().string(), spec.snapshot, 1));
  CHECK_THROWS_WITH(read_tng(*mesh, opt),
                    Catch::Contains("snap_099.1.hdf5: snapshot chunk file 1 of 4 missing"));
  std::filesystem::remove(tng::offsets_path(dir.path().string(), spec.snapshot));
  CHECK_THROWS_WITH(read_tng(*mesh, opt),
                    Catch::Contains("offsets_099.hdf5: offsets file missing"));
}
