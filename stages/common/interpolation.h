#pragma once
// Linear interpolation in a tabulated axis, shared by the stages that read tables: the SSP grid's
// ages and metallicities (stellar_spectra), the line-ratio table's axes (emission_lines). Host
// and device (IFUSIM_HD).
#include "data/hd.h"

namespace ifusim {

// Position of x in an ascending table of n values: the lower node and the weight of the upper
// one. Outside the table: clamped to the end node, and *outside is set.
IFUSIM_HD inline void bracket(const double* table, int n, double x, int& lower,
                              double& upper_weight, bool& outside) {
  if (n == 1 || !(x > table[0])) {
    outside = outside || x < table[0] || x != x;
    lower = 0;
    upper_weight = 0.0;
    return;
  }
  if (x >= table[n - 1]) {
    outside = outside || x > table[n - 1];
    lower = n - 2;
    upper_weight = 1.0;
    return;
  }
  int lo = 0, hi = n - 1;  // table[lo] <= x < table[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (table[mid] <= x)
      lo = mid;
    else
      hi = mid;
  }
  lower = lo;
  upper_weight = (x - table[lo]) / (table[lo + 1] - table[lo]);
}

// d(upper_weight)/dx of bracket, for reverse mode (docs/gradients.md). The weight is piecewise
// linear with kinks at the nodes: at a node the derivative is the one from the right (the cell
// [node, next node), which is the cell bracket gives a node: weight 0 at its lower end), so 0 at
// and beyond the last node and 1 / (its width) at the first; 0 where x is clamped below.
IFUSIM_HD inline double bracket_slope(const double* table, int n, double x) {
  if (n == 1 || !(x >= table[0]) || x >= table[n - 1]) return 0.0;
  int lo = 0, hi = n - 1;  // table[lo] <= x < table[hi], as in bracket
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (table[mid] <= x)
      lo = mid;
    else
      hi = mid;
  }
  return 1.0 / (table[lo + 1] - table[lo]);
}

}  // namespace ifusim
