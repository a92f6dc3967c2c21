#pragma once
// Checks that run unchanged on either backend: the CPU suite calls them with Backend::cpu, the
// CUDA suite (test_cuda*.cpp) with Backend::cuda, so what the CPU can test is also what the GPU
// node's check runs.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "data/collectives/reductions.h"
#include "pipeline/devices.h"
#include "stages/stellar_spectra/stellar_spectra.h"  // kSparseEntryBytes

namespace ifusim::test {

// A NaN anywhere in a field makes its largest |x| +infinity, whatever the device count and
// wherever the NaN lies (first, middle or last row of a shard); without one, the true maximum.
inline void check_max_abs_with_nan(Backend backend) {
  const std::size_t n = 1001;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i)
    host[i] = (i % 2 ? -1.0f : 1.0f) * static_cast<float>(i % 97) * 0.25f;
  for (int devices : {1, 2, 3, 7}) {
    auto mesh = make_mesh(backend, devices);
    INFO("devices: " << devices);
    CHECK(global_max_abs(*mesh, device_put(*mesh, host, 1, Sharding::sharded())) == 24.0f);
    for (std::size_t at : {std::size_t{0}, std::size_t{143}, std::size_t{500}, n - 1}) {
      std::vector<float> with_nan = host;
      with_nan[at] = std::numeric_limits<float>::quiet_NaN();
      INFO("NaN at row " << at);
      const float max = global_max_abs(*mesh, device_put(*mesh, with_nan, 1, Sharding::sharded()));
      CHECK(std::isinf(max));
      CHECK(max > 0);
    }
  }
}

// sum_by_key, the sparse histogram's sort and reduction, gives every key's exact sum and holds
// at most kSparseEntryBytes an entry at its peak, counted with the sort's scratch (Thrust's
// temporaries go through memory::allocate): the plan's estimate is a bound on what it takes.
// Allocating the result before the sort, as it once did, peaks at 48 bytes an entry.
inline void check_sum_by_key_memory(Backend backend) {
  auto mesh = make_mesh(backend, 1);
  const Device& device = mesh->device(0);
  const std::size_t n = 400000;
  std::vector<std::uint64_t> keys(n);
  std::vector<std::int64_t> values(n);
  std::map<std::uint64_t, std::int64_t> expected;
  std::uint64_t state = 12345;
  for (std::size_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    keys[i] = (state >> 33) % 50000 * 7919;  // sparse keys, about 8 pairs each
    values[i] = static_cast<std::int64_t>((state >> 17) % 2001) - 1000 + (1LL << 40);
    expected[keys[i]] += values[i];
  }
  const std::size_t before = memory::bytes_in_use(backend);
  DeviceBuffer<std::uint64_t> device_keys(device, n);
  DeviceBuffer<std::int64_t> device_values(device, n);
  device_keys.upload(keys.data(), n);
  device_values.upload(values.data(), n);
  memory::reset_peak(backend);
  const KeyedSums sums =
      IFUSIM_DISPATCH(device, sum_by_key, device, std::move(device_keys), std::move(device_values));
  const double peak_per_entry =
      static_cast<double>(memory::peak_bytes(backend) - before) / static_cast<double>(n);
  INFO("peak bytes per entry: " << peak_per_entry << " (plan: " << kSparseEntryBytes << ")");
  CHECK(peak_per_entry >= 32.0);  // the pairs and the sort's second copy: the scratch is counted
  CHECK(peak_per_entry <= kSparseEntryBytes);
  // The pairs are freed; the result holds exactly the unique keys.
  CHECK(memory::bytes_in_use(backend) - before == expected.size() * 16);
  REQUIRE(sums.size == expected.size());
  std::vector<std::uint64_t> got_keys(sums.size);
  std::vector<std::int64_t> got_values(sums.size);
  sums.keys.download(got_keys.data(), sums.size);
  sums.values.download(got_values.data(), sums.size);
  std::size_t i = 0, wrong = 0;
  for (const auto& [key, sum] : expected) {
    wrong += got_keys[i] != key || got_values[i] != sum;
    ++i;
  }
  CHECK(wrong == 0);
}

}  // namespace ifusim::test
