#pragma once
// IllustrisTNG reader: one subhalo's stars and gas into GalaxyData, in physical kpc, km/s, Msun
// and Gyr, each device reading its own slice of every field by HDF5 hyperslab (from_callback).
//
// Two layouts, as the TNG public data release writes them (Nelson et al. 2019, ComAC 6, 2):
// - a subhalo cutout: `path` is the one HDF5 file (Header, PartType0, PartType4), as the TNG web
//   API returns it. Counts come from dataset shapes (never Header/NumPart_ThisFile). No centre is
//   stored: it is found by shrinking spheres on the stars' current mass (Power et al. 2003), the
//   bulk velocity is the mass-weighted velocity of the stars within the stellar half-mass radius
//   (io/tng/stellar_centre.h).
// - a full snapshot: `path` is the directory that holds snapdir_NNN/snap_NNN.K.hdf5,
//   groups_NNN/fof_subhalo_tab_NNN.K.hdf5 and offsets_NNN.hdf5 (or
//   postprocessing/offsets/offsets_NNN.hdf5); `snapshot` and `subhalo_id` are required. The
//   subhalo's particles are the contiguous range Subhalo/SnapByType[id] + [0, SubhaloLenType[id])
//   of each type, read across chunk-file boundaries; centre, bulk velocity and half-mass radius
//   come from SubhaloPos, SubhaloVel and SubhaloHalfmassRadType[4].
//
// PartType4 rows with GFM_StellarFormationTime <= 0 are wind cells: dropped and counted.
// Ages are t(a_snapshot) - t(a_formation) with the header's cosmology. Positions are wrapped in
// the periodic box around the centre before conversion and are relative to it; velocities are
// peculiar (Velocities * sqrt(a)) minus the galaxy's. Gas temperature is derived when
// InternalEnergy and ElectronAbundance exist: T = (gamma - 1) u / k_B * mu m_p with
// mu = 4 / (1 + 3 X_H + 4 X_H x_e), X_H = 0.76, gamma = 5/3 (TNG FAQ).
#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/galaxy_data.h"
#include "data/mesh.h"
#include "io/star_stream.h"

namespace ifusim {

namespace tng {
struct SnapshotFormat;
}

// What to read. The one table-driven reader serves every format of io/tng/tng_fields.h (TNG,
// SWIFT, EAGLE, Gadget-4/AREPO/GIZMO); only TNG has the snapshot-directory layout. A galaxy of
// another format is the file's particles, or those of a region, ids or SUBFIND group
// (docs/formats.md).
struct TngReadOptions {
  const tng::SnapshotFormat* format = nullptr;  // nullptr: IllustrisTNG
  std::string path;                             // cutout file, or snapshot base directory
  std::optional<int> snapshot;                  // required for a snapshot directory
  std::optional<long long> subhalo_id;  // required for a snapshot directory; checked on a cutout
  bool drop_nonfinite = false;  // drop particles with a NaN/Inf in any field instead of failing
  bool read_gas = true;
  // Membership (formats other than TNG): a sphere around region_centre of region_radius (comoving,
  // in the file's own Coordinates units, periodic), particle ids (ParticleIDs), or a SUBFIND
  // (GroupNumber, SubGroupNumber) as EAGLE stores them per particle. All given must hold.
  std::optional<std::array<double, 3>> region_centre;
  double region_radius = 0;
  std::vector<long long> particle_ids;
  std::optional<std::array<long long, 2>> subfind_group;
};

// The format of a snapshot file from its attributes and groups: TNG (to_cgs attributes), SWIFT
// (a "Conversion factor to CGS ..." attribute, or Header "Scale-factor"), EAGLE
// (CGSConversionFactor), else Gadget-4/AREPO/GIZMO (a Header with Time and PartTypeN groups); a
// directory is a TNG snapshot. An InputError naming the file when it is none of them.
const tng::SnapshotFormat& detect_snapshot_format(const std::string& path);

struct TngIngestReport {
  std::string layout;  // "cutout" or "snapshot" (TNG), "file" (the other formats)
  std::string format;  // tng::SnapshotFormat::name
  std::size_t n_stars = 0;
  std::size_t n_wind_dropped = 0;
  std::size_t n_gas = 0;
  std::size_t n_nonfinite_dropped = 0;  // stars + gas, only with drop_nonfinite
  std::size_t n_files_read = 0;         // particle files touched (chunk files for a snapshot)
  std::string center_method;            // "SubhaloPos" or "shrinking spheres"
  std::array<double, 3> bulk_velocity_kms{0, 0, 0};  // subtracted from every velocity
};

// Row counts of the subhalo's PartType4 (stars and wind cells: winds are only told apart when
// GFM_StellarFormationTime is read) and PartType0 (0 without read_gas), from dataset shapes and
// the group catalog: no particle value is read.
struct TngCounts {
  std::size_t star_rows = 0;
  std::size_t gas_rows = 0;
};
TngCounts count_tng(const TngReadOptions& options);

// One subhalo of a snapshot's group catalog: what a survey selects on.
struct SubhaloSummary {
  long long id = 0;
  std::size_t star_rows = 0, gas_rows = 0;  // SubhaloLenType[4] (wind cells included), [0]
  double stellar_mass_msun = 0;             // SubhaloMassType[4]
  double sfr_msun_per_yr = 0;               // SubhaloSFR
};
// Every subhalo of the catalog (all its files), in id order. The snapshot's chunk file 0, the
// group catalog and the offsets file must exist: an error names the one missing.
std::vector<SubhaloSummary> read_subhalo_catalog(const std::string& snapshot_dir, int snapshot);

// Throws InputError naming the file and the dataset or attribute on bad input.
GalaxyData read_tng(const Mesh& mesh, const TngReadOptions& options,
                    TngIngestReport* report = nullptr);

// The stars of a subhalo, block by block (io/star_stream.h), bitwise read_tng's stars. A snapshot
// subhalo's centre, bulk velocity and half-mass radius come from the group catalog; a cutout's
// from shrinking spheres in passes over its stars that hold at most a block of them
// (io/tng/stellar_centre.h), during first_pass. Each block's wind cells (and with drop_nonfinite
// its non-finite rows) are dropped. The gas (with options.read_gas) is read at once, as read_tng
// reads it.
class TngStarStream final : public StarStream {
 public:
  explicit TngStarStream(const TngReadOptions& options);
  ~TngStarStream() override;
  std::size_t n_rows() const override;  // PartType4 rows, wind cells included
  GalaxyData first_pass(const Mesh& mesh, std::size_t block_rows) const override;
  Stars read(const Mesh& mesh, std::size_t first_row, std::size_t n_rows) const override;
  Gas read_gas(const Mesh& mesh) const override;
  std::set<std::string> optional_star_fields() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ifusim
