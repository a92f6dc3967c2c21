#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "io/hdf5.h"
#include "io/tng/synthetic_files.h"

using namespace ifusim;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() /
                       ("ifusim_test_make_galaxy_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string data_dir() {
  const char* env = std::getenv("IFUSIM_DATA_DIR");
  return env ? env : std::string(IFUSIM_SOURCE_DIR) + "/../shared/data";
}

// HDF5 storage type of a dataset: 'f' float, 'i' signed, 'u' unsigned; and its size in bytes.
std::pair<char, std::size_t> stored_type(const h5::Location& loc, const std::string& dataset) {
  const hid_t d = H5Dopen2(loc.id(), dataset.c_str(), H5P_DEFAULT);
  REQUIRE(d >= 0);
  const hid_t t = H5Dget_type(d);
  char kind = '?';
  if (H5Tget_class(t) == H5T_FLOAT) kind = 'f';
  if (H5Tget_class(t) == H5T_INTEGER) kind = H5Tget_sign(t) == H5T_SGN_NONE ? 'u' : 'i';
  const std::size_t size = H5Tget_size(t);
  H5Tclose(t);
  H5Dclose(d);
  return {kind, size};
}

std::vector<std::string> particle_fields(int type) {
  if (type == 4)
    return {"Coordinates", "GFM_InitialMass", "GFM_Metallicity", "GFM_StellarFormationTime",
            "Masses",      "ParticleIDs",     "Velocities"};
  return {"Coordinates",    "Density", "ElectronAbundance", "GFM_Metallicity",   "GFM_Metals",
          "InternalEnergy", "Masses",  "ParticleIDs",       "StarFormationRate", "Velocities"};
}

// All values of a particle group's datasets, as doubles (exact for float32/float64 and for the
// small IDs used here).
std::map<std::string, std::vector<double>> read_group(const h5::Location& g, int type) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& f : particle_fields(type)) out[f] = g.read<double>(f);
  return out;
}

void require_finite(const std::map<std::string, std::vector<double>>& fields) {
  for (const auto& [name, v] : fields)
    for (double x : v) {
      INFO(name);
      REQUIRE(std::isfinite(x));
    }
}

tng::SyntheticGalaxySpec small_galaxy() {
  tng::SyntheticGalaxySpec g;
  g.n_stars = 3000;
  g.n_gas = 600;
  g.seed = 42;
  g.redshift = 0.3;
  g.wind_fraction = 0.03;
  return g;
}

}  // namespace

TEST_CASE("make-galaxy cutout: TNG datasets, types and unit attributes", "[make-galaxy]") {
  const fs::path dir = fresh_dir("layout");
  auto g = small_galaxy();
  const std::string path = (dir / "cutout.hdf5").string();
  tng::write_tng_cutout(path, g);
  h5::File f(path);
  const h5::Location header = f.group("Header");
  CHECK(header.attribute<double>("BoxSize") == 75000.0);
  CHECK(header.attribute<double>("HubbleParam") == 0.6774);
  CHECK(header.attribute<double>("Omega0") == 0.3089);
  CHECK(header.attribute<double>("OmegaLambda") == 0.6911);
  CHECK(header.attribute<double>("Redshift") == 0.3);
  CHECK(header.attribute<double>("Time") == Approx(1.0 / 1.3).epsilon(1e-15));
  CHECK(header.attribute<std::int32_t>("NumFilesPerSnapshot") == 1);
  CHECK(header.attribute_array<std::int32_t>("NumPart_ThisFile") ==
        std::vector<std::int32_t>{600, 0, 0, 0, 3000, 0});
  CHECK(header.attribute_array<std::uint32_t>("NumPart_Total") ==
        std::vector<std::uint32_t>{600, 0, 0, 0, 3000, 0});
  CHECK(header.attribute_array<double>("MassTable").size() == 6);
  CHECK(header.string_attribute("SimulationName") == "ifusim-synthetic");
  CHECK(header.string_attribute("CutoutType") == "subhalo");

  // Shapes and TNG's storage types: Coordinates float64, ParticleIDs uint64, the rest float32.
  for (int type : {0, 4}) {
    const h5::Location p = f.group("PartType" + std::to_string(type));
    const hsize_t n = type == 4 ? 3000 : 600;
    for (const auto& name : particle_fields(type)) {
      INFO("PartType" << type << "/" << name);
      const auto shape = p.shape(name);
      REQUIRE(shape[0] == n);
      if (name == "Coordinates" || name == "Velocities")
        CHECK(shape == std::vector<hsize_t>{n, 3});
      else if (name == "GFM_Metals")
        CHECK(shape == std::vector<hsize_t>{n, 10});
      else
        CHECK(shape.size() == 1);
      const auto type_info = stored_type(p, name);
      if (name == "Coordinates")
        CHECK(type_info == std::pair<char, std::size_t>{'f', 8});
      else if (name == "ParticleIDs")
        CHECK(type_info == std::pair<char, std::size_t>{'u', 8});
      else
        CHECK(type_info == std::pair<char, std::size_t>{'f', 4});
      CHECK(p.has_attribute("a_scaling", name));
      CHECK(p.has_attribute("h_scaling", name));
      CHECK(p.has_attribute("to_cgs", name));
    }
  }

  // Unit attributes equal the real TNG100-1 cutout's, dataset by dataset.
  const std::string reference = data_dir() + "/snapshots/tng100-1_snap078_subhalo_subsample.hdf5";
  INFO("the real TNG cutout " << reference
                              << " is needed: point IFUSIM_DATA_DIR at the shared data");
  REQUIRE(fs::exists(reference));
  h5::File ref(reference);
  int compared = 0;
  for (int type : {0, 4}) {
    const std::string grp = "PartType" + std::to_string(type);
    for (const auto& name : particle_fields(type)) {
      if (!ref.exists(grp + "/" + name)) continue;
      INFO(grp << "/" << name);
      for (const char* attr : {"a_scaling", "h_scaling", "to_cgs"})
        CHECK(f.attribute<double>(attr, grp + "/" + name) ==
              ref.attribute<double>(attr, grp + "/" + name));
      ++compared;
    }
  }
  CHECK(compared == 17);  // every dataset the reference has
  fs::remove_all(dir);
}

TEST_CASE("make-galaxy: reproducible from the seed, independent of the block size",
          "[make-galaxy]") {
  const fs::path dir = fresh_dir("repro");
  auto g = small_galaxy();
  g.block_rows = 1 << 20;
  tng::write_tng_cutout((dir / "a.hdf5").string(), g);
  tng::write_tng_cutout((dir / "b.hdf5").string(), g);
  g.block_rows = 7;  // many small blocks, one not full
  tng::write_tng_cutout((dir / "c.hdf5").string(), g);
  g.seed = 43;
  tng::write_tng_cutout((dir / "d.hdf5").string(), g);
  // Same seed, same block size: byte-identical files (no timestamps are stored).
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  CHECK(bytes(dir / "a.hdf5").size() > 3000 * 40);
  CHECK(bytes(dir / "a.hdf5") == bytes(dir / "b.hdf5"));
  h5::File a((dir / "a.hdf5").string()), b((dir / "b.hdf5").string()), c((dir / "c.hdf5").string()),
      d((dir / "d.hdf5").string());
  for (int type : {0, 4}) {
    const std::string grp = "PartType" + std::to_string(type);
    const auto va = read_group(a.group(grp), type), vb = read_group(b.group(grp), type),
               vc = read_group(c.group(grp), type), vd = read_group(d.group(grp), type);
    require_finite(va);
    for (const auto& [name, values] : va) {
      INFO(grp << "/" << name);
      CHECK(values == vb.at(name));                             // same seed: identical values
      CHECK(values == vc.at(name));                             // block size 7: identical values
      if (name != "ParticleIDs") CHECK(values != vd.at(name));  // another seed: another galaxy
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("make-galaxy: physics of the disc, ages, metallicities, winds and gas", "[make-galaxy]") {
  const fs::path dir = fresh_dir("physics");
  tng::SyntheticGalaxySpec g;
  g.n_stars = 40000;
  g.n_gas = 8000;
  g.seed = 7;
  g.redshift = 0.5;
  g.wind_fraction = 0.02;
  g.disc_scale_length_kpc = 3.0;
  g.center_ckpc_h = {5.0, 74990.0, 37500.0};  // straddles two box edges: the galaxy wraps
  g.bulk_velocity_kms = {100.0, -50.0, 20.0};
  const std::string path = (dir / "cutout.hdf5").string();
  tng::write_tng_cutout(path, g);
  h5::File f(path);
  const double a = 1.0 / 1.5, h = 0.6774, box = 75000.0;
  const auto stars = read_group(f.group("PartType4"), 4);
  const auto gas = read_group(f.group("PartType0"), 0);
  require_finite(stars);
  require_finite(gas);

  // Positions wrap: in x some particles sit just below the box edge and some just above 0.
  const auto& xyz = stars.at("Coordinates");
  std::size_t low = 0, high = 0;
  for (std::size_t i = 0; i < g.n_stars; ++i) {
    REQUIRE(xyz[3 * i] >= 0.0);
    REQUIRE(xyz[3 * i] < box);
    if (xyz[3 * i] < 100) ++low;
    if (xyz[3 * i] > box - 100) ++high;
  }
  CHECK(low > 1000);
  CHECK(high > 1000);

  // Physical offsets (kpc) and peculiar velocities (km/s) relative to the galaxy.
  auto offset = [&](const std::vector<double>& c, std::size_t i, int k) {
    double d = c[3 * i + k] - g.center_ckpc_h[k];
    d -= box * std::round(d / box);
    return d * a / h;
  };
  auto velocity = [&](const std::vector<double>& v, std::size_t i, int k) {
    return v[3 * i + k] * std::sqrt(a) - g.bulk_velocity_kms[k];
  };
  const auto& vel = stars.at("Velocities");
  const auto& sft = stars.at("GFM_StellarFormationTime");
  const auto& mass = stars.at("Masses");
  const auto& imass = stars.at("GFM_InitialMass");
  const auto& metal = stars.at("GFM_Metallicity");
  const Cosmology cosmo;
  const double t_snap = cosmo.cosmic_time_gyr(a);
  std::size_t wind = 0, outer = 0;
  double vphi_outer = 0, total_mass_msun = 0;
  double age_in = 0, age_out = 0, z_in = 0, z_out = 0;
  std::size_t n_in = 0, n_out = 0;
  std::vector<double> disc_r;
  for (std::size_t i = 0; i < g.n_stars; ++i) {
    if (sft[i] <= 0) {
      ++wind;
      continue;
    }
    const double x = offset(xyz, i, 0), y = offset(xyz, i, 1);
    const double r = std::hypot(x, y);
    const double vphi = (x * velocity(vel, i, 1) - y * velocity(vel, i, 0)) / std::max(r, 1e-9);
    REQUIRE(sft[i] < a);
    const double age = t_snap - cosmo.cosmic_time_gyr(sft[i]);
    REQUIRE(age > 0);
    REQUIRE(age < t_snap);
    REQUIRE(imass[i] > mass[i]);
    REQUIRE(metal[i] > 0);
    total_mass_msun += mass[i] * 1e10 / h;
    if (r > 6.0) {
      vphi_outer += vphi;
      ++outer;
    }
    if (r < 1.5) {
      age_in += age;
      z_in += metal[i];
      ++n_in;
    } else if (r > 9.0) {
      age_out += age;
      z_out += metal[i];
      ++n_out;
    }
    disc_r.push_back(r);
  }
  // Winds: expected 2% of 40000 = 800 (binomial sd 28).
  CHECK(wind > 650);
  CHECK(wind < 950);
  // The disc rotates (v_c(6 kpc) = 0.84 v_flat = 185 km/s, minus dispersion scatter).
  REQUIRE(outer > 1000);
  CHECK(vphi_outer / outer > 150.0);
  CHECK(vphi_outer / outer < 230.0);
  // Older and more metal-rich centre.
  REQUIRE(n_in > 500);
  REQUIRE(n_out > 500);
  CHECK(age_in / n_in > age_out / n_out + 1.0);  // Gyr
  CHECK(z_in / n_in > 1.5 * (z_out / n_out));
  // Stellar mass normalised to the spec within 2% (expected-value normalisation).
  CHECK(total_mass_msun == Approx(g.stellar_mass_msun).epsilon(0.02));

  // Exponential surface density: ln Sigma(R) over 2-12 kpc (beyond the bulge) is a line of
  // slope -1/R_d; least squares on 1 kpc annuli recovers R_d within 10%.
  std::vector<double> xs, ys;
  for (int b = 2; b < 12; ++b) {
    const double count =
        std::count_if(disc_r.begin(), disc_r.end(), [b](double r) { return r >= b && r < b + 1; });
    REQUIRE(count > 50);
    xs.push_back(b + 0.5);
    ys.push_back(std::log(count / (M_PI * ((b + 1.0) * (b + 1.0) - b * b))));
  }
  const double mx = std::accumulate(xs.begin(), xs.end(), 0.0) / xs.size();
  const double my = std::accumulate(ys.begin(), ys.end(), 0.0) / ys.size();
  double sxy = 0, sxx = 0;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    sxy += (xs[k] - mx) * (ys[k] - my);
    sxx += (xs[k] - mx) * (xs[k] - mx);
  }
  const double fitted_rd = -sxx / sxy;
  CHECK(fitted_rd == Approx(3.0).epsilon(0.10));

  // Gas: positive densities and energies, metals summing to one, some star formation.
  const auto& metals = gas.at("GFM_Metals");
  std::size_t star_forming = 0;
  for (std::size_t i = 0; i < g.n_gas; ++i) {
    REQUIRE(gas.at("Density")[i] > 0);
    REQUIRE(gas.at("InternalEnergy")[i] > 0);
    REQUIRE(gas.at("ElectronAbundance")[i] >= 0);
    REQUIRE(gas.at("ElectronAbundance")[i] < 1.2);
    REQUIRE(gas.at("StarFormationRate")[i] >= 0);
    REQUIRE(gas.at("Masses")[i] > 0);
    if (gas.at("StarFormationRate")[i] > 0) ++star_forming;
    const double sum = std::accumulate(&metals[10 * i], &metals[10 * i + 10], 0.0);
    REQUIRE(sum == Approx(1.0).epsilon(1e-5));
    REQUIRE(1.0 - metals[10 * i] - metals[10 * i + 1] ==
            Approx(gas.at("GFM_Metallicity")[i]).epsilon(1e-3));
  }
  CHECK(star_forming > g.n_gas / 10);
  CHECK(star_forming < g.n_gas);
  fs::remove_all(dir);
}

TEST_CASE("make-galaxy snapshot: chunks, group catalog, offsets, same particles as the cutout",
          "[make-galaxy]") {
  const fs::path dir = fresh_dir("snapshot");
  auto central = small_galaxy();
  central.center_ckpc_h = {74995.0, 20000.0, 30.0};  // wraps in x and z
  const int n_chunks = 4;
  const auto spec = tng::make_snapshot_spec(central, 4, 2, n_chunks);
  REQUIRE(spec.subhalos.size() == 4);
  REQUIRE(spec.group_of_subhalo == std::vector<int>{0, 0, 1, 1});
  tng::write_tng_snapshot(dir.string(), spec);
  // No temporary left behind.
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().find("tmp") == std::string::npos);

  // Snapshot headers.
  // make_snapshot_spec adds inner fuzz to both groups and unassociated particles.
  REQUIRE(spec.group_fuzz.size() == 2);
  REQUIRE(spec.group_fuzz[0].n_stars == 150);  // 5% of the central's 3000
  REQUIRE(spec.unassociated.n_stars == 150);
  std::array<std::uint64_t, 6> total{};
  for (const auto* parts : {&spec.subhalos, &spec.group_fuzz})
    for (const auto& s : *parts) {
      total[0] += s.n_gas;
      total[4] += s.n_stars;
    }
  total[0] += spec.unassociated.n_gas;
  total[4] += spec.unassociated.n_stars;
  std::array<std::uint64_t, 6> summed{};
  for (int k = 0; k < n_chunks; ++k) {
    h5::File f(tng::snapshot_chunk_path(dir.string(), 99, k));
    const auto hdr = f.group("Header");
    CHECK(hdr.attribute<std::int32_t>("NumFilesPerSnapshot") == n_chunks);
    const auto this_file = hdr.attribute_array<std::int32_t>("NumPart_ThisFile");
    const auto tot = hdr.attribute_array<std::uint32_t>("NumPart_Total");
    const auto high = hdr.attribute_array<std::uint32_t>("NumPart_Total_HighWord");
    for (int t = 0; t < 6; ++t) {
      summed[t] += this_file[t];
      CHECK(tot[t] == total[t]);
      CHECK(high[t] == 0);
    }
    CHECK(f.group("PartType4").shape("Masses")[0] == static_cast<hsize_t>(this_file[4]));
  }
  CHECK(summed == total);

  // Group catalog, concatenated over its files.
  std::vector<std::int32_t> lentype, grnr, glentype, gfirst, gnsubs;
  std::vector<float> masstype, subpos, hmr;
  int ngroups = 0, nsubs = 0;
  for (int k = 0; k < n_chunks; ++k) {
    h5::File f(tng::group_catalog_chunk_path(dir.string(), 99, k));
    const auto hdr = f.group("Header");
    CHECK(hdr.attribute<std::int32_t>("Ngroups_Total") == 2);
    CHECK(hdr.attribute<std::int32_t>("Nsubgroups_Total") == 4);
    CHECK(hdr.attribute<std::int32_t>("NumFiles") == n_chunks);
    const int ng = hdr.attribute<std::int32_t>("Ngroups_ThisFile");
    const int ns = hdr.attribute<std::int32_t>("Nsubgroups_ThisFile");
    ngroups += ng;
    nsubs += ns;
    auto append = [](auto& to, const auto& from) { to.insert(to.end(), from.begin(), from.end()); };
    if (ns > 0) {
      const auto S = f.group("Subhalo");
      append(lentype, S.read<std::int32_t>("SubhaloLenType"));
      append(grnr, S.read<std::int32_t>("SubhaloGrNr"));
      append(masstype, S.read<float>("SubhaloMassType"));
      append(subpos, S.read<float>("SubhaloPos"));
      append(hmr, S.read<float>("SubhaloHalfmassRadType"));
      CHECK(S.shape("SubhaloVel") == std::vector<hsize_t>{static_cast<hsize_t>(ns), 3});
      CHECK(stored_type(S, "SubhaloPos") == std::pair<char, std::size_t>{'f', 4});
      CHECK(stored_type(S, "SubhaloLenType") == std::pair<char, std::size_t>{'i', 4});
    } else {
      CHECK_FALSE(f.exists("Subhalo/SubhaloLenType"));
    }
    if (ng > 0) {
      const auto G = f.group("Group");
      append(glentype, G.read<std::int32_t>("GroupLenType"));
      append(gfirst, G.read<std::int32_t>("GroupFirstSub"));
      append(gnsubs, G.read<std::int32_t>("GroupNsubs"));
    }
  }
  REQUIRE(ngroups == 2);
  REQUIRE(nsubs == 4);
  CHECK(grnr == std::vector<std::int32_t>{0, 0, 1, 1});
  CHECK(gfirst == std::vector<std::int32_t>{0, 2});
  CHECK(gnsubs == std::vector<std::int32_t>{2, 2});
  for (std::size_t s = 0; s < 4; ++s) {
    CHECK(lentype[6 * s + 0] == static_cast<std::int32_t>(spec.subhalos[s].n_gas));
    CHECK(lentype[6 * s + 4] == static_cast<std::int32_t>(spec.subhalos[s].n_stars));
    for (int k = 0; k < 3; ++k)
      CHECK(subpos[3 * s + k] == Approx(spec.subhalos[s].center_ckpc_h[k]).margin(0.01));
  }
  // Satellites lie within 300 kpc (physical) of their group's central, groups > 1 Mpc apart.
  auto distance_kpc = [&](int s1, int s2) {
    double d2 = 0;
    for (int k = 0; k < 3; ++k) {
      double d = subpos[3 * s1 + k] - subpos[3 * s2 + k];
      d -= 75000.0 * std::round(d / 75000.0);
      d2 += d * d;
    }
    return std::sqrt(d2) / 0.6774 / 1.3;  // z = 0.3
  };
  CHECK(distance_kpc(0, 1) < 300.0);
  CHECK(distance_kpc(2, 3) < 300.0);
  CHECK(distance_kpc(0, 2) > 1000.0);
  // A group holds its subhalos and its fuzz; the unassociated particles are in no group.
  CHECK(glentype[4] == lentype[4] + lentype[6 + 4] + 150);
  CHECK(glentype[6 + 4] ==
        lentype[12 + 4] + lentype[18 + 4] + static_cast<std::int32_t>(spec.group_fuzz[1].n_stars));
  CHECK(glentype[0] ==
        lentype[0] + lentype[6] + static_cast<std::int32_t>(spec.group_fuzz[0].n_gas));
  CHECK(static_cast<std::uint64_t>(glentype[4] + glentype[10]) + 150 == total[4]);

  // Offsets: Subhalo/SnapByType is the running sum of SubhaloLenType; groups start at their
  // first subhalo.
  h5::File off(tng::offsets_path(dir.string(), 99));
  const auto sub_off = off.read<std::int64_t>("Subhalo/SnapByType");
  const auto grp_off = off.read<std::int64_t>("Group/SnapByType");
  const auto file_off = off.read<std::int64_t>("FileOffsets/SnapByType");
  std::array<std::int64_t, 6> running{};
  for (std::size_t s = 0; s < 4; ++s) {
    for (int t = 0; t < 6; ++t) {
      CHECK(sub_off[6 * s + t] == running[t]);
      running[t] += lentype[6 * s + t];
    }
    if (s == 1 || s == 3) {  // the last subhalo of its group: the group's fuzz follows
      running[0] += spec.group_fuzz[s / 2].n_gas;
      running[4] += spec.group_fuzz[s / 2].n_stars;
    }
  }
  CHECK(static_cast<std::uint64_t>(running[4]) + spec.unassociated.n_stars == total[4]);
  for (int t = 0; t < 6; ++t) {
    CHECK(grp_off[t] == 0);
    CHECK(grp_off[6 + t] == sub_off[12 + t]);
  }

  // The central's stars span three of the four chunk files; read them by offsets and compare with
  // the same galaxy written as a cutout, field by field, exactly.
  for (std::size_t s : {std::size_t{0}, std::size_t{2}}) {
    const std::string cutout = (dir / ("cutout_" + std::to_string(s) + ".hdf5")).string();
    tng::write_tng_cutout(cutout, spec.subhalos[s]);
    h5::File c(cutout);
    for (int type : {0, 4}) {
      const std::int64_t first = sub_off[6 * s + type], n = lentype[6 * s + type];
      std::map<std::string, std::vector<double>> joined;
      int files_touched = 0;
      for (int k = 0; k < n_chunks; ++k) {
        const std::int64_t lo = file_off[6 * k + type];
        const std::int64_t hi = k + 1 < n_chunks ? file_off[6 * (k + 1) + type]
                                                 : static_cast<std::int64_t>(total[type]);
        const std::int64_t b = std::max(lo, first), e = std::min(hi, first + n);
        if (b >= e) continue;
        ++files_touched;
        h5::File f(tng::snapshot_chunk_path(dir.string(), 99, k));
        const auto g = f.group("PartType" + std::to_string(type));
        for (const auto& name : particle_fields(type)) {
          const auto rows = g.read_rows<double>(name, b - lo, e - lo);
          joined[name].insert(joined[name].end(), rows.begin(), rows.end());
        }
      }
      if (s == 0 && type == 4) CHECK(files_touched == 3);
      const auto reference = read_group(c.group("PartType" + std::to_string(type)), type);
      for (const auto& [name, values] : reference) {
        INFO("subhalo " << s << " PartType" << type << "/" << name);
        CHECK(joined[name] == values);
      }
      // SubhaloMassType matches the particles' masses (float32 catalog value).
      const double sum =
          std::accumulate(reference.at("Masses").begin(), reference.at("Masses").end(), 0.0);
      CHECK(masstype[6 * s + type] == Approx(sum).epsilon(1e-5));
    }
  }
  // Stellar half-mass radius of the central: positive and of the order of the disc scale
  // length (1.68 R_d for a pure exponential disc; the bulge makes it smaller), in ckpc/h.
  const double rd_ckpc_h = central.disc_scale_length_kpc * 0.6774 * 1.3;
  CHECK(hmr[4] > 0.5 * rd_ckpc_h);
  CHECK(hmr[4] < 2.5 * rd_ckpc_h);
  fs::remove_all(dir);
}

TEST_CASE("make-galaxy: bad input gives clear errors and no partial output", "[make-galaxy]") {
  const fs::path dir = fresh_dir("errors");
  auto g = small_galaxy();
  g.wind_fraction = 1.5;
  CHECK_THROWS_WITH(tng::write_tng_cutout((dir / "x.hdf5").string(), g),
                    Catch::Contains("wind_fraction: expected a value in [0, 1)"));
  g = small_galaxy();
  g.center_ckpc_h = {80000.0, 0.0, 0.0};
  CHECK_THROWS_WITH(tng::write_tng_cutout((dir / "x.hdf5").string(), g),
                    Catch::Contains("center_ckpc_h[0]"));
  g = small_galaxy();
  CHECK_THROWS_AS(tng::write_tng_cutout((dir / "missing_dir" / "x.hdf5").string(), g), InputError);
  auto spec = tng::make_snapshot_spec(small_galaxy(), 2, 1, 2);
  spec.subhalos[1].redshift = 1.0;
  CHECK_THROWS_WITH(tng::write_tng_snapshot(dir.string(), spec),
                    Catch::Contains("subhalos[1]: expected the same redshift"));
  spec = tng::make_snapshot_spec(small_galaxy(), 2, 1, 2);
  spec.subhalos[1].first_particle_id = spec.subhalos[0].first_particle_id + 5;
  CHECK_THROWS_WITH(tng::write_tng_snapshot(dir.string(), spec),
                    Catch::Contains("first_particle_id"));
  spec = tng::make_snapshot_spec(small_galaxy(), 2, 1, 2);
  tng::write_tng_snapshot(dir.string(), spec);
  CHECK_THROWS_WITH(tng::write_tng_snapshot(dir.string(), spec), Catch::Contains("already exists"));
  // Nothing but the finished snapshot in the folder: no temporaries, no stray cutout.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"groups_099", "offsets_099.hdf5", "snapdir_099"});

  // The CLI: a validation error exits non-zero with a message and writes nothing.
  const std::string exe = IFUSIM_BINARY;
  const std::string out = (dir / "cli.hdf5").string();
  const std::string log = (dir / "cli.log").string();
  CHECK(std::system((exe + " make-galaxy " + out + " --stars 2.5 > " + log + " 2>&1").c_str()) !=
        0);
  {
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK_THAT(text, Catch::Contains("--stars: expected a whole number"));
  }
  CHECK(std::system((exe + " make-galaxy " + out + " --stars 100 --subhalos 3 > " + log + " 2>&1")
                        .c_str()) != 0);
  CHECK_FALSE(fs::exists(out));
  CHECK(std::system(
            (exe + " make-galaxy " + out + " --stars 1e3 --gas 50 --seed 5 > " + log + " 2>&1")
                .c_str()) == 0);
  h5::File f(out);
  CHECK(f.group("PartType4").shape("Masses")[0] == 1000);
  CHECK(f.group("PartType0").shape("Masses")[0] == 50);
  fs::remove_all(dir);
}
