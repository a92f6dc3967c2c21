#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "data/collectives/psum.h"
#include "data/fixed_point.h"
#include "pipeline/devices.h"
#include "tests/cube_tolerance.h"

using namespace ifusim;

namespace {

// Random per-device partials of mixed sign and a wide dynamic range; returns the reduced cube
// and the double-precision reference sums.
struct PsumCase {
  Cube cube;
  std::vector<long double> reference;  // summed in extended precision
  FixedPointScale scale;
};

PsumCase run_psum(int n_devices, std::size_t n, unsigned seed) {
  auto mesh = make_mesh(Backend::cpu, n_devices);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0), exponent(-6.0, 6.0);
  std::vector<std::vector<double>> values(n_devices, std::vector<double>(n));
  double max_abs = 0;
  for (auto& v : values)
    for (auto& x : v) {
      x = mantissa(rng) * std::pow(10.0, exponent(rng));
      max_abs = std::max(max_abs, std::abs(x));
    }
  PartialCube partial;
  partial.shape = {static_cast<int>(n), 1, 1};
  partial.scale = FixedPointScale::for_bound(n_devices * max_abs, "test sums");
  partial.sums = ShardedArray<std::int64_t>(*mesh, n, 1, Sharding::partial());
  PsumCase out;
  out.reference.assign(n, 0.0L);
  for (int d = 0; d < n_devices; ++d)
    for (std::size_t i = 0; i < n; ++i) out.reference[i] += values[d][i];
  // Every device adds its values into its memory space's one partial buffer, concurrently.
  shard_map(*mesh, [&](const Device& device) {
    std::int64_t* sums = partial.sums.local(device).data;
    for (std::size_t i = 0; i < n; ++i)
      atomic_add_fixed(sums + i, to_fixed(values[device.id][i], partial.scale.counts_per_unit));
  });
  out.scale = partial.scale;
  out.cube = reduce_to_cube(*mesh, partial, "test");
  // After psum every device holds the same total, and host devices share one buffer.
  for (int d = 1; d < n_devices; ++d) {
    CHECK(partial.sums.download_shard(mesh->device(d)) ==
          partial.sums.download_shard(mesh->device(0)));
    CHECK(partial.sums.local(mesh->device(d)).data == partial.sums.local(mesh->device(0)).data);
  }
  CHECK(partial.sums.sharding() == Sharding::replicated());
  return out;
}

}  // namespace

TEST_CASE("psum of random partials matches a double-precision sum", "[psum]") {
  for (int d : {1, 2, 3, 4, 7}) {
    const auto result = run_psum(d, 5000, 42u + d);
    // Each of the d contributions is rounded to the nearest quantum (d / 2 quanta at most), and
    // the exact integer total is rounded once to double (half an ulp, 2^-53 relative) and then
    // to the cube's float32 (2^-24 relative, tests/cube_tolerance.h).
    for (std::size_t i = 0; i < result.reference.size(); ++i) {
      const long double ref = result.reference[i];
      const long double tolerance =
          0.5L * d * result.scale.quantum() + std::abs(ref) * (0x1p-53L + test::kFloatRounding);
      REQUIRE(std::isfinite(result.cube.data[i]));
      REQUIRE(std::abs(result.cube.data[i] - ref) <= tolerance);
    }
  }
}

TEST_CASE("the fixed-point scale leaves headroom and never overflows", "[psum]") {
  const auto s = FixedPointScale::for_bound(1000.0, "test sums");
  CHECK(1000.0 * s.counts_per_unit <= std::ldexp(1.0, 62));
  CHECK(1000.0 * s.counts_per_unit > std::ldexp(1.0, 61));  // and uses it
  CHECK(FixedPointScale::for_bound(0.0, "test sums").counts_per_unit == 1.0);
  // A bound that is not finite (from a NaN or infinite input value) is an error naming the sums.
  for (const double bad : {std::nan(""), HUGE_VAL, -1.0})
    CHECK_THROWS_WITH(FixedPointScale::for_bound(bad, "mass sums (stars.mass_msun)"),
                      Catch::Contains("mass sums (stars.mass_msun): no fixed-point scale"));
  CHECK(to_fixed(-2.5, 1.0) == -2);  // round half to even, like the device's __double2ll_rn
  CHECK(to_fixed(3.5, 1.0) == 4);
}
