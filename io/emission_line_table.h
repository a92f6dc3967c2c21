#pragma once
// Reads a user's HDF5 table of emission-line ratios (the emission_lines stage's line_ratio_file;
// the format: data/line_ratio_table.h, docs/emission_lines.md).
#include <string>

#include "data/line_ratio_table.h"

namespace ifusim {

// The table in `file`, every check naming the file and the dataset (InputError).
LineRatioTable read_line_ratio_table(const std::string& file);

}  // namespace ifusim
