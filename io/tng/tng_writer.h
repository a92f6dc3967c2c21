#pragma once
// Writes galaxies in the IllustrisTNG file layout (tng_rows.h gives the units): as an API subhalo
// cutout (one HDF5 file: Header, PartType0, PartType4), or as a multi-chunk snapshot
// (snapdir_NNN/snap_NNN.K.hdf5) with its group catalog (groups_NNN/fof_subhalo_tab_NNN.K.hdf5)
// and offsets file (offsets_NNN.hdf5). Any galaxy: the writer asks a TngGalaxySource for its rows
// block by block, so memory is bounded by a block, and knows nothing of how they were made.
//
// Every particle dataset carries a_scaling, h_scaling, to_cgs (physical cgs = value *
// a^a_scaling * h^h_scaling * to_cgs) as TNG files do, from the field table (tng_fields.h).
// HDF5 objects are created without timestamps, so the same rows give byte-identical files.
// Outputs are written under temporary names and renamed at the end (io/temp_file.h): an error
// leaves no partial output.
#include <string>
#include <vector>

#include "io/tng/tng_rows.h"

namespace ifusim::tng {

// Writes the galaxy as a TNG API subhalo cutout; a type with no particles has no group, as in
// TNG.
void write_tng_cutout(const std::string& path, const TngGalaxySource& galaxy);

// A snapshot made of several subhalos, each in a FoF group, plus optional particles of a group
// that belong to none of its subhalos ("inner fuzz") and particles in no group at all ("outer
// fuzz"). Particles of each type are ordered as in TNG: by group; within a group by subhalo, then
// the group's fuzz; the unassociated particles last. Chunk file k holds rows
// [N k / K, N (k + 1) / K) of each type's global array. All parts must share redshift, cosmology
// and box size; their ParticleIDs are written as their sources make them. The layout points at
// the sources, which must outlive the write.
struct TngSnapshotLayout {
  int snapshot = 99;
  int n_chunks = 3;  // snapshot and group catalog files
  std::string simulation_name = "ifusim-synthetic";
  std::vector<const TngGalaxySource*> subhalos;  // each with at least one particle
  // group_of_subhalo[s] = FoF group of subhalo s: empty means all in group 0; otherwise
  // non-decreasing from 0 without gaps (the first subhalo of a group is its central).
  std::vector<int> group_of_subhalo;
  // Empty, or one per group: its particles in no subhalo (nullptr or no particles for none).
  std::vector<const TngGalaxySource*> group_fuzz;
  // Particles in no group, at the end of each type's array (nullptr or no particles for none).
  const TngGalaxySource* unassociated = nullptr;

  int n_groups() const { return group_of_subhalo.empty() ? 1 : group_of_subhalo.back() + 1; }
};

// Writes base_dir/snapdir_NNN/, base_dir/groups_NNN/ and base_dir/offsets_NNN.hdf5. Existing
// outputs are an error (nothing is overwritten); should moving one into place fail, those
// already moved are removed again.
void write_tng_snapshot(const std::string& base_dir, const TngSnapshotLayout& layout);

// File names of the layout (NNN zero-padded to three digits, as TNG).
std::string snapshot_chunk_path(const std::string& base_dir, int snapshot, int chunk);
std::string group_catalog_chunk_path(const std::string& base_dir, int snapshot, int chunk);
std::string offsets_path(const std::string& base_dir, int snapshot);

// Half-mass radii as the group catalog computes them (SubhaloHalfmassRadType): mass summed in
// 0.002 dex bins of log10(r / kpc) over [-3, 3) (smaller and larger radii fall into the end
// bins), the radius interpolated in log r within the bin where the cumulative mass reaches half.
// The result depends only on the bins' sums, so any exact way of adding them gives the same
// radius (the catalog adds in particle order, the in-memory source, synthetic_source.h, in
// fixed point).
inline constexpr int kRadiusBins = 3000;
int radius_bin(double r_kpc);
double half_mass_radius_kpc(const std::vector<double>& mass_per_bin);  // kRadiusBins sums

}  // namespace ifusim::tng
