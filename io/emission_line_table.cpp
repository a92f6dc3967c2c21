#include "io/emission_line_table.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/config_error.h"
#include "data/emission_line_list.h"
#include "io/hdf5.h"

namespace ifusim {

LineRatioTable read_line_ratio_table(const std::string& file) {
  LineRatioTable t;
  t.file = file;
  const h5::File f(file);
  auto fail = [&](const std::string& what, const std::string& expected) {
    throw InputError(f.describe(what) + ": expected " + expected);
  };
  auto axis = [&](const std::string& name) {
    if (f.shape(name).size() != 1) fail(name, "a 1-D dataset");
    std::vector<double> values = f.read<double>(name);
    if (values.empty()) fail(name, "at least one value");
    for (std::size_t i = 0; i < values.size(); ++i)
      if (!std::isfinite(values[i]) || (i > 0 && !(values[i] > values[i - 1])))
        fail(name, "finite values in increasing order");
    return values;
  };
  if (!f.exists("oxygen_abundance"))
    fail("oxygen_abundance", "a 1-D dataset of 12 + log(O/H), increasing");
  t.oxygen_abundance = axis("oxygen_abundance");
  // 12 + log(O/H) of real H II regions lies between about 7 and 9.5; a table far outside holds
  // something else (log(O/H) without the 12, or Z).
  if (t.oxygen_abundance.front() < 5.0 || t.oxygen_abundance.back() > 11.0)
    fail("oxygen_abundance", "values of 12 + log(O/H) from 5 to 11");
  if (f.exists("log_ionisation_parameter"))
    t.log_ionisation_parameter = axis("log_ionisation_parameter");
  if (!f.exists("ratio_to_hbeta"))
    fail("ratio_to_hbeta", "a group of datasets named after lines (" + emission_line_names() + ")");
  const h5::Location group = f.group("ratio_to_hbeta");
  const std::size_t n_oh = t.oxygen_abundance.size();
  const std::size_t n_u = std::max<std::size_t>(1, t.log_ionisation_parameter.size());
  for (const std::string& name : group.member_names()) {
    const int index = emission_line_index(name);
    const std::string where = "ratio_to_hbeta/" + name;
    if (index < 0) fail(where, "a line name (" + emission_line_names() + ")");
    if (is_balmer_line(index))
      fail(where, "a metal line: the Balmer lines follow Case B (H-alpha / H-beta = 2.86)");
    const auto shape = group.shape(name);
    const bool matches = t.log_ionisation_parameter.empty()
                             ? shape == std::vector<hsize_t>{n_oh}
                             : shape == std::vector<hsize_t>{n_oh, n_u};
    if (!matches)
      fail(where, t.log_ionisation_parameter.empty()
                      ? "shape (" + std::to_string(n_oh) + ") like oxygen_abundance"
                      : "shape (" + std::to_string(n_oh) + ", " + std::to_string(n_u) +
                            ") of (oxygen_abundance, log_ionisation_parameter)");
    std::vector<double> values = group.read<double>(name);
    for (const double v : values)
      if (!(v >= 0.0) || !std::isfinite(v)) fail(where, "finite ratios >= 0");
    t.ratios.emplace_back(index, std::move(values));
  }
  if (t.ratios.empty()) fail("ratio_to_hbeta", "at least one line");
  return t;
}

}  // namespace ifusim
