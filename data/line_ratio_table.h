#pragma once
// A user's table of line ratios, as read from its file (io/emission_line_table.h): what the
// emission_lines stage uses instead of its calibrations for the lines the table names.
#include <string>
#include <utility>
#include <vector>

namespace ifusim {

// The file's /oxygen_abundance (12 + log O/H, increasing), optionally /log_ionisation_parameter
// (increasing), and /ratio_to_hbeta/<line name> of shape (n_oh) or (n_oh, n_u): the line's
// luminosity over H-beta's. Lines it names replace their relation in the stage; Balmer lines stay
// Case B.
struct LineRatioTable {
  std::string file;
  std::vector<double> oxygen_abundance;
  std::vector<double> log_ionisation_parameter;  // empty: ratios depend on O/H only
  // Index into kEmissionLines (data/emission_line_list.h), values (n_oh x n_u, row-major).
  std::vector<std::pair<int, std::vector<double>>> ratios;
};

}  // namespace ifusim
