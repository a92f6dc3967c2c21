#pragma once
// One entry point for every SSP template format the project reads.
#include <string>

#include "data/ssp_grid.h"

namespace ifusim {

// "miles" (directory of MILES FITS files), "pypipe3d" (pyPipe3D template FITS, .fits/.fits.gz),
// "hdf5" (the project's layout, docs/ssp_format.md) or "auto": a directory -> miles,
// .h5/.hdf5 -> hdf5, .fits/.fits.gz -> pypipe3d. Throws InputError (path missing, format not
// recognised) or ConfigError (unknown format name).
std::string detect_ssp_format(const std::string& path);
SspGrid load_ssp_library(const std::string& path, const std::string& format = "auto");

}  // namespace ifusim
