// Bad cutouts: broken copies of a generated fixture, each giving one clear InputError that
// names the file and the dataset or attribute.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <limits>

#include "io/hdf5.h"
#include "io/tng/synthetic_files.h"
#include "io/tng/tng_reader.h"
#include "pipeline/devices.h"
#include "tng_test_util.h"

using namespace ifusim;

namespace {

tng::SyntheticGalaxySpec small_galaxy() {
  tng::SyntheticGalaxySpec g;
  g.n_stars = 400;
  g.n_gas = 60;
  g.seed = 99;
  g.redshift = 0.1;
  g.subhalo_id = 12;
  g.snapshot = 91;
  return g;
}

}  // namespace

TEST_CASE("cutout: each bad input gives its error", "[tng]") {
  const test::ScratchDir dir("tng_errors");
  const std::string good = dir.file("good.hdf5");
  tng::write_tng_cutout(good, small_galaxy());
  auto mesh = make_mesh(Backend::cpu, 3);
  int n = 0;
  // A fresh broken copy: `edit` changes it through h5::File.
  auto broken = [&](auto&& edit) {
    const std::string path = dir.file("broken_" + std::to_string(n++) + ".hdf5");
    std::filesystem::copy_file(good, path);
    {
      h5::File f(path, h5::File::Mode::read_write);
      edit(f);
    }
    TngReadOptions opt;
    opt.path = path;
    return opt;
  };

  TngReadOptions ok;
  ok.path = good;
  TngIngestReport rep;
  REQUIRE_NOTHROW(read_tng(*mesh, ok, &rep));
  REQUIRE(rep.n_stars > 0);

  TngReadOptions missing;
  missing.path = dir.file("nope.hdf5");
  CHECK_THROWS_AS(read_tng(*mesh, missing), InputError);
  CHECK_THROWS_WITH(read_tng(*mesh, missing), Catch::Contains("nope.hdf5: no such file"));

  CHECK_THROWS_WITH(read_tng(*mesh, broken([](h5::File& f) { f.remove("PartType4"); })),
                    Catch::Contains(":/PartType4: group not found (no star particles)"));
  CHECK_THROWS_WITH(
      read_tng(*mesh, broken([](h5::File& f) { f.remove("PartType4/GFM_InitialMass"); })),
      Catch::Contains(":/PartType4/GFM_InitialMass: required dataset missing"));
  CHECK_THROWS_WITH(read_tng(*mesh, broken([](h5::File& f) { f.remove("Header"); })),
                    Catch::Contains(":/Header: group not found"));
  CHECK_THROWS_WITH(read_tng(*mesh, broken([](h5::File& f) {
                      auto m = f.read<float>("PartType4/Masses");
                      m.pop_back();
                      f.write<float>("PartType4/Masses", m, {m.size()});
                      for (const char* a : {"a_scaling", "h_scaling", "to_cgs"})
                        f.set_attribute<double>(a, 1.0, "PartType4/Masses");
                    })),
                    Catch::Contains(":/PartType4/Masses: shape mismatch: 399 rows, expected 400"));
  CHECK_THROWS_WITH(read_tng(*mesh, broken([](h5::File& f) {
                      const auto v = f.read<float>("PartType0/Velocities");
                      std::vector<float> two;  // keep x, y of each row
                      for (std::size_t i = 0; i < v.size(); ++i)
                        if (i % 3 != 2) two.push_back(v[i]);
                      f.write<float>("PartType0/Velocities", two, {two.size() / 2, 2});
                    })),
                    Catch::Contains(":/PartType0/Velocities: shape mismatch: 2 component(s) per "
                                    "row, expected 3"));
  CHECK_THROWS_WITH(read_tng(*mesh, broken([](h5::File& f) {
                      f.set_attribute<double>("to_cgs", 1.0, "PartType4/GFM_Metallicity");
                    })),
                    Catch::Contains(":/PartType4/GFM_Metallicity: expected a dimensionless"));
  CHECK_THROWS_WITH(read_tng(*mesh, broken([](h5::File& f) {
                      f.set_attribute<double>("to_cgs", 0.0, "PartType4/Masses");
                    })),
                    Catch::Contains(":/PartType4/Masses: attribute to_cgs = 0 (dimensionless)"));

  // A missing unit attribute: rewrite the dataset without attributes.
  CHECK_THROWS_WITH(read_tng(*mesh, broken([](h5::File& f) {
                      const auto v = f.read<float>("PartType4/GFM_Metallicity");
                      f.write<float>("PartType4/GFM_Metallicity", v, {v.size()});
                    })),
                    Catch::Contains(":/PartType4/GFM_Metallicity: attribute \"to_cgs\" not found"));

  TngReadOptions wrong_id = ok;
  wrong_id.subhalo_id = 13;
  CHECK_THROWS_WITH(read_tng(*mesh, wrong_id),
                    Catch::Contains("\"CutoutID\" is 12, subhalo 13 was asked for"));

  // Non-finite values: an error saying how many and where, unless drop_nonfinite.
  std::size_t first_nan = 0;
  auto nan_masses = [&first_nan](h5::File& f) {
    auto m = f.read<float>("PartType4/Masses");
    auto sft = f.read<float>("PartType4/GFM_StellarFormationTime");
    int planted = 0;
    for (std::size_t i = 0; i < m.size() && planted < 3; ++i)
      if (sft[i] > 0 && i > 100) {
        if (planted == 0) first_nan = i;
        m[i] = planted == 1 ? std::numeric_limits<float>::infinity()
                            : std::numeric_limits<float>::quiet_NaN();
        ++planted;
      }
    f.write_rows<float>("PartType4/Masses", 0, m.data(), m.size());
  };
  const TngReadOptions nan_opt = broken(nan_masses);
  CHECK_THROWS_WITH(read_tng(*mesh, nan_opt),
                    Catch::Contains(":/PartType4/Masses: 3 non-finite value(s) (NaN or Inf), "
                                    "the first at row " +
                                    std::to_string(first_nan) + " of ") &&
                        // the option a run takes (`run` has no --drop-nonfinite)
                        Catch::Contains("--set input.drop_nonfinite=true"));
  TngReadOptions drop = nan_opt;
  drop.drop_nonfinite = true;
  TngIngestReport drop_rep;
  const GalaxyData dropped = read_tng(*mesh, drop, &drop_rep);
  CHECK(drop_rep.n_nonfinite_dropped == 3);
  CHECK(drop_rep.n_stars == rep.n_stars - 3);
  CHECK(drop_rep.n_wind_dropped == rep.n_wind_dropped);
  for (const float m : test::host(dropped.stars.mass_msun)) REQUIRE(std::isfinite(m));

  // Spread over the three devices' slices, found by their concurrent reads and added up.
  const TngReadOptions nan_z = broken([](h5::File& f) {
    auto z = f.read<float>("PartType0/GFM_Metallicity");
    for (const std::size_t i : {5, 30, 55}) z[i] = std::numeric_limits<float>::quiet_NaN();
    f.write_rows<float>("PartType0/GFM_Metallicity", 0, z.data(), z.size());
  });
  CHECK_THROWS_WITH(read_tng(*mesh, nan_z),
                    Catch::Contains(":/PartType0/GFM_Metallicity: 3 non-finite value(s) (NaN or "
                                    "Inf), the first at row 5 of "));
  TngReadOptions drop_z = nan_z;
  drop_z.drop_nonfinite = true;
  TngIngestReport z_rep;
  const GalaxyData dz = read_tng(*mesh, drop_z, &z_rep);
  CHECK(z_rep.n_gas == 57);
  CHECK(z_rep.n_nonfinite_dropped == 3);
  CHECK(dz.gas.count() == 57);
}

TEST_CASE("cutout: masses, metallicities and formation times out of range are refused by row",
          "[tng]") {
  const test::ScratchDir dir("tng_bounds");
  const std::string good = dir.file("good.hdf5");
  tng::write_tng_cutout(good, small_galaxy());
  auto mesh = make_mesh(Backend::cpu, 3);
  const auto sft = h5::File(good).read<float>("PartType4/GFM_StellarFormationTime");
  // A star row (not a wind cell) in the third device's slice, and the first star row.
  std::size_t star_row = 300, first_star = 0;
  while (!(sft[star_row] > 0)) ++star_row;
  while (!(sft[first_star] > 0)) ++first_star;
  int n = 0;
  // A copy of the fixture with `dataset`'s row `row` (every row: all_rows) set to `value`.
  auto corrupt = [&](const char* dataset, std::size_t row, float value, bool all_rows = false) {
    const std::string path = dir.file("bad_" + std::to_string(n++) + ".hdf5");
    std::filesystem::copy_file(good, path);
    {
      h5::File f(path, h5::File::Mode::read_write);
      auto v = f.read<float>(dataset);
      if (all_rows)
        std::fill(v.begin(), v.end(), value);
      else
        v.at(row) = value;
      f.write_rows<float>(dataset, 0, v.data(), v.size());
    }
    TngReadOptions opt;
    opt.path = path;
    return opt;
  };
  const std::string at_star = "the first at row " + std::to_string(star_row) + " of ";
  struct Case {
    const char* dataset;
    float value;
    const char* expected;
  };
  for (const Case& c : {Case{"PartType4/GFM_InitialMass", -1e-4f, "expected > 0"},
                        Case{"PartType4/Masses", -1e-4f, "expected > 0"},
                        Case{"PartType4/Masses", 0.0f, "expected > 0"},
                        Case{"PartType4/GFM_Metallicity", -0.1f, "expected a mass fraction"},
                        Case{"PartType4/GFM_StellarFormationTime", 2.0f,
                             "expected a scale factor of formation at most the snapshot's"}}) {
    INFO(c.dataset << " = " << c.value);
    const TngReadOptions bad = corrupt(c.dataset, star_row, c.value);
    CHECK_THROWS_WITH(
        read_tng(*mesh, bad),
        Catch::Contains(std::string(":/") + c.dataset + ": 1 value(s) out of range") &&
            Catch::Contains(at_star) && Catch::Contains(c.expected));
    // Streamed in blocks, the same error during the first pass (set-up).
    TngStarStream stream(bad);
    CHECK_THROWS_WITH(stream.first_pass(*mesh, 64), Catch::Contains(std::string(":/") + c.dataset +
                                                                    ": 1 value(s) out of range") &&
                                                        Catch::Contains(at_star));
  }
  // All-zero masses: every star counted, the first star row named (was "orient: no stellar
  // half-mass radius", naming no file).
  TngReadOptions ok;
  ok.path = good;
  const std::size_t n_stars = read_tng(*mesh, ok).stars.count();
  const TngReadOptions zero = corrupt("PartType4/Masses", 0, 0.0f, true);
  CHECK_THROWS_WITH(
      read_tng(*mesh, zero),
      Catch::Contains(":/PartType4/Masses: " + std::to_string(n_stars) +
                      " value(s) out of range") &&
          Catch::Contains("the first at row " + std::to_string(first_star) + " of ") &&
          Catch::Contains("bad_"));
  // The gas too.
  CHECK_THROWS_WITH(
      read_tng(*mesh, corrupt("PartType0/Masses", 7, -1.0f)),
      Catch::Contains(":/PartType0/Masses: 1 value(s) out of range, the first at row 7 "
                      "of ") &&
          Catch::Contains(".hdf5 (-1); expected > 0"));
  CHECK_THROWS_WITH(read_tng(*mesh, corrupt("PartType0/GFM_Metallicity", 9, 1.5f)),
                    Catch::Contains(":/PartType0/GFM_Metallicity: 1 value(s) out of range"));
  // In range at the edges: a metallicity of 0, a star formed at the snapshot's scale factor.
  const double a = h5::File(good).attribute<double>("Time", "Header");
  CHECK_NOTHROW(read_tng(*mesh, corrupt("PartType4/GFM_Metallicity", star_row, 0.0f)));
  CHECK_NOTHROW(read_tng(*mesh, corrupt("PartType4/GFM_StellarFormationTime", star_row, float(a))));
}
