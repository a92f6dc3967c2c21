// The exact reductions stages build their fixed-point scales on (data/collectives/reductions.h).
#include "backend_checks.h"

using namespace ifusim;

TEST_CASE("global_max_abs: a NaN gives +inf for any device count and position (cpu)",
          "[reductions]") {
  test::check_max_abs_with_nan(Backend::cpu);
}

TEST_CASE("sum_by_key: exact sums, and its peak memory within the plan's bytes an entry (cpu)",
          "[reductions]") {
  test::check_sum_by_key_memory(Backend::cpu);
}
