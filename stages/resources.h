#pragma once
// What some stages need beyond their parameters, loaded once by the runner (pipeline/runner.cpp)
// from files: stages never read a file themselves (they sit below io/), they get what io/ loaded.
#include <functional>
#include <memory>
#include <string>

#include "data/line_ratio_table.h"
#include "data/sky.h"
#include "data/ssp_grid.h"

namespace ifusim {

struct StageResources {
  std::shared_ptr<const SspGrid> ssp;  // the template library (stellar_spectra)
  // Reads a table of line ratios (emission_lines' line_ratio_file); `key_path` is the config key
  // that named the file. Unset where the caller loads no files.
  std::function<std::shared_ptr<const LineRatioTable>(const std::string& file,
                                                      const std::string& key_path)>
      load_line_ratio_table;
  // Read the night-sky spectrum and an atmospheric extinction table (noise's exposure model):
  // `file` is absolute or relative to the data folder ($IFUSIM_DATA_DIR); `key_path` is the config
  // key that named it. Unset where the caller loads no files.
  std::function<std::shared_ptr<const SkySpectrum>(const std::string& file,
                                                   const std::string& key_path)>
      load_sky_spectrum;
  std::function<std::shared_ptr<const ExtinctionCurve>(const std::string& file,
                                                       const std::string& key_path)>
      load_extinction_curve;
};

}  // namespace ifusim
