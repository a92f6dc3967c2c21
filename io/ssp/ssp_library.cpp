#include "io/ssp/ssp_library.h"

#include <filesystem>

#include "core/config_error.h"
#include "io/ssp/miles.h"
#include "io/ssp/pypipe3d.h"
#include "io/ssp/ssp_hdf5.h"

namespace ifusim {
namespace fs = std::filesystem;

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

std::string detect_ssp_format(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError(path + ": SSP template library not found");
  if (fs::is_directory(path, ec)) return "miles";
  if (ends_with(path, ".h5") || ends_with(path, ".hdf5")) return "hdf5";
  if (ends_with(path, ".fits") || ends_with(path, ".fits.gz") || ends_with(path, ".fit") ||
      ends_with(path, ".fits.fz"))
    return "pypipe3d";
  throw InputError(path +
                   ": cannot tell the SSP library format from the name; expected a "
                   "directory (miles), .h5/.hdf5 (hdf5) or .fits/.fits.gz (pypipe3d), or give "
                   "the format explicitly");
}

SspGrid load_ssp_library(const std::string& path, const std::string& format) {
  const std::string f = format == "auto" ? detect_ssp_format(path) : format;
  SspGrid grid;
  if (f == "miles")
    grid = read_miles_directory(path);
  else if (f == "pypipe3d")
    grid = read_pypipe3d_fits(path);
  else if (f == "hdf5")
    grid = read_ssp_hdf5(path);
  else
    throw ConfigError("SSP library format '" + format +
                      "': expected one of auto, miles, pypipe3d, hdf5");
  validate_ssp_grid(grid, path);
  return grid;
}

}  // namespace ifusim
