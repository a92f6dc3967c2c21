#pragma once
// Are two cubes the same within a tolerance (`ifusim compare`, ifusim.compare in Python)?
#include <string>

#include "data/datacube.h"

namespace ifusim {

struct CubeComparison {
  // 0: equal within the tolerance; 1: beyond it, or NaN in either; 2: not comparable (shapes or
  // wavelength axes differ; `error` says how).
  int status = 2;
  std::string report;  // the largest differences and where they are, NaN counts, PASS/FAIL
  std::string error;   // why the cubes cannot be compared (status 2)
  bool equal() const { return status == 0; }
};

// Values pass where |a - b| <= atol + rtol * |b| (numpy.allclose, b the reference); data and,
// when both cubes have one, variance are compared. A NaN in either cube is a failure.
CubeComparison compare_cubes(const Cube& a, const Cube& b, double rtol, double atol);

}  // namespace ifusim
