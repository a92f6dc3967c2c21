#pragma once
// Synthetic galaxies (synthetic_galaxy.h) written as IllustrisTNG files (tng_writer.h): what
// `ifusim make-galaxy` writes, and the test suite's TNG inputs.
#include <string>

#include "io/tng/synthetic_galaxy.h"
#include "io/tng/tng_writer.h"

namespace ifusim::tng {

// The galaxy as a TNG API subhalo cutout. Throws ConfigError when the spec is invalid, before
// anything is written.
void write_tng_cutout(const std::string& path, const SyntheticGalaxySpec& galaxy);

// The galaxies as a TNG snapshot with its group catalog and offsets, under base_dir (see
// write_tng_snapshot in tng_writer.h).
void write_tng_snapshot(const std::string& base_dir, const SyntheticSnapshotSpec& spec);

}  // namespace ifusim::tng
