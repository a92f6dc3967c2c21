#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <numeric>

#include "data/galaxy_data.h"
#include "data/sharded_array.h"
#include "pipeline/devices.h"

using namespace ifusim;

TEST_CASE("split_evenly: N / D each, one more to the first N % D devices", "[sharding]") {
  for (std::size_t d = 1; d <= 8; ++d) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, d - 1, d, d + 1, std::size_t{1000003}}) {
      const auto ranges = split_evenly(n, d);
      REQUIRE(ranges.size() == d);
      std::size_t next = 0;
      for (std::size_t i = 0; i < d; ++i) {
        CHECK(ranges[i].begin == next);
        CHECK(ranges[i].size() == n / d + (i < n % d ? 1 : 0));
        next = ranges[i].end;
      }
      CHECK(next == n);
    }
  }
  CHECK_THROWS(split_evenly(5, 0));
}

TEST_CASE("device_put: shards hold exactly their rows, idle devices hold nothing", "[sharding]") {
  for (int d : {1, 2, 3, 5, 8}) {
    auto mesh = make_mesh(Backend::cpu, d);
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t(d - 1), std::size_t(d + 1),
                          std::size_t{1000}}) {
      std::vector<float> host(n * 3);
      std::iota(host.begin(), host.end(), 1.0f);
      auto array = device_put(*mesh, host, 3, Sharding::sharded());
      REQUIRE(array.rows() == n);
      REQUIRE(array.shards().size() == static_cast<std::size_t>(d));
      for (const auto& shard : array.shards()) {
        CHECK(shard.replica_id == 0);
        CHECK(shard.buffer.size() == shard.range.size() * 3);  // never padded
        const auto rows = array.download_shard(*shard.device);
        for (std::size_t i = 0; i < shard.range.size(); ++i)
          for (int c = 0; c < 3; ++c)
            CHECK(rows[i * 3 + c] == host[(shard.range.begin + i) * 3 + c]);
        // Component planes on the device: x of every row, then y, then z.
        const auto y = array.local(*shard.device, 1);
        for (std::size_t i = 0; i < y.size; ++i)
          CHECK(y[i] == host[(shard.range.begin + i) * 3 + 1]);
      }
      CHECK(array.to_host() == host);
    }
  }
}

TEST_CASE("replicated arrays: one full copy per device with replica ids 0..D-1", "[sharding]") {
  auto mesh = make_mesh(Backend::cpu, 4);
  const std::vector<double> table = {3540.5, 3541.4, 3542.3};
  auto array = device_put(*mesh, table, 1, Sharding::replicated());
  for (std::size_t d = 0; d < 4; ++d) {
    const auto& shard = array.shards()[d];
    CHECK(shard.replica_id == static_cast<int>(d));
    CHECK(shard.range == IndexRange{0, 3});
    CHECK(array.download_shard(*shard.device) == table);
  }
}

TEST_CASE("from_callback: each device is asked for exactly its own range", "[sharding]") {
  for (int d : {1, 3, 7}) {
    auto mesh = make_mesh(Backend::cpu, d);
    const std::size_t n = 10;  // 7 devices: 2,2,2,1,1,1,1
    std::mutex m;
    std::vector<IndexRange> asked;
    auto array = from_callback<std::int64_t>(
        *mesh, n, 2, Sharding::sharded(), [&](IndexRange r, std::int64_t* out) {
          {
            std::lock_guard lock(m);
            asked.push_back(r);
          }
          for (std::size_t i = r.begin; i < r.end; ++i) {
            out[(i - r.begin) * 2] = static_cast<std::int64_t>(i);
            out[(i - r.begin) * 2 + 1] = -static_cast<std::int64_t>(i);
          }
        });
    std::sort(asked.begin(), asked.end(), [](auto a, auto b) { return a.begin < b.begin; });
    CHECK(asked == split_evenly(n, d));
    for (const auto& shard : array.shards()) {
      const auto rows = array.download_shard(*shard.device);
      for (std::size_t i = 0; i < shard.range.size(); ++i)
        CHECK(rows[2 * i] == static_cast<std::int64_t>(shard.range.begin + i));
    }
  }
  SECTION("more devices than rows: the idle ones are never asked") {
    auto mesh = make_mesh(Backend::cpu, 5);
    std::atomic<int> calls{0};
    auto array =
        from_callback<float>(*mesh, 2, 1, Sharding::sharded(), [&](IndexRange r, float* out) {
          ++calls;
          REQUIRE(r.size() == 1);
          out[0] = 1.0f;
        });
    CHECK(calls == 2);
    CHECK(array.shards()[4].range.empty());
    CHECK(array.shards()[4].buffer.data() == nullptr);
  }
}

TEST_CASE("host staging on the cpu backend: aligned, not pinned, writable", "[sharding]") {
  auto mesh = make_mesh(Backend::cpu, 1);
  HostStaging<double> staging(mesh->device(0), 1001);
  REQUIRE(staging.size() == 1001);
  CHECK_FALSE(staging.pinned());
  CHECK(reinterpret_cast<std::uintptr_t>(staging.data()) % 64 == 0);
  for (std::size_t i = 0; i < staging.size(); ++i) staging.data()[i] = 0.5 * static_cast<double>(i);
  HostStaging<double> moved = std::move(staging);
  CHECK(staging.data() == nullptr);
  CHECK(moved.data()[1000] == 500.0);
}

TEST_CASE("from_callback_blocked: one callback fills several arrays, block by block",
          "[sharding]") {
  const std::size_t n = 23;
  for (int d : {1, 3, 7}) {
    for (std::size_t block_rows : {std::size_t{1}, std::size_t{4}, std::size_t{100}}) {
      INFO(d << " devices, blocks of " << block_rows);
      auto mesh = make_mesh(Backend::cpu, d);
      std::mutex m;
      std::vector<IndexRange> asked;
      auto arrays = from_callback_blocked<std::int64_t>(
          *mesh, n, {1, 3}, block_rows, [&](IndexRange r, const std::vector<std::int64_t*>& outs) {
            {
              std::lock_guard lock(m);
              asked.push_back(r);
            }
            for (std::size_t i = r.begin; i < r.end; ++i) {
              const auto v = static_cast<std::int64_t>(i);
              outs[0][i - r.begin] = v;
              for (std::size_t c = 0; c < 3; ++c)
                outs[1][(i - r.begin) * 3 + c] = 10 * v + static_cast<std::int64_t>(c);
            }
          });
      // Every device's range cut into consecutive blocks of at most block_rows.
      std::vector<IndexRange> expected;
      for (const auto& range : split_evenly(n, static_cast<std::size_t>(d)))
        for (std::size_t b = range.begin; b < range.end; b += block_rows)
          expected.push_back({b, std::min(range.end, b + block_rows)});
      std::sort(asked.begin(), asked.end(), [](auto a, auto b) { return a.begin < b.begin; });
      CHECK(asked == expected);
      REQUIRE(arrays.size() == 2);
      CHECK(arrays[1].components() == 3);
      CHECK(arrays[1].sharding() == Sharding::sharded());
      std::vector<std::int64_t> want0(n), want1(3 * n);
      for (std::size_t i = 0; i < n; ++i) {
        want0[i] = static_cast<std::int64_t>(i);
        for (std::size_t c = 0; c < 3; ++c)
          want1[3 * i + c] = 10 * static_cast<std::int64_t>(i) + static_cast<std::int64_t>(c);
      }
      CHECK(arrays[0].to_host() == want0);
      CHECK(arrays[1].to_host() == want1);
    }
  }
  auto mesh = make_mesh(Backend::cpu, 2);
  ShardedArray<float> a(*mesh, 5, 2, Sharding::sharded());  // shards of 3 and 2 rows
  const std::vector<float> rows = {1, 2, 3, 4};
  CHECK_THROWS_AS(a.upload_rows(mesh->device(1), 1, rows.data(), 2), std::out_of_range);
  a.upload_rows(mesh->device(1), 0, rows.data(), 2);
  CHECK(a.download_shard(mesh->device(1)) == rows);
}

TEST_CASE("describe_sharding draws which device holds which rows", "[sharding]") {
  auto mesh = make_mesh(Backend::cpu, 3);
  auto array = device_put(*mesh, std::vector<float>(10, 1.0f), 1, Sharding::sharded());
  CHECK(describe_sharding("stars.mass_msun", array) ==
        "stars.mass_msun: float32[10] Sharded(particles) over 3 devices\n"
        "  cpu:0 |################........................| [0, 4) 4 rows\n"
        "  cpu:1 |................############............| [4, 7) 3 rows\n"
        "  cpu:2 |............................############| [7, 10) 3 rows\n");
  auto idle = device_put(*mesh, std::vector<float>(2, 1.0f), 1, Sharding::sharded());
  CHECK(describe_sharding("x", idle) ==
        "x: float32[2] Sharded(particles) over 3 devices\n"
        "  cpu:0 |####################....................| [0, 1) 1 rows\n"
        "  cpu:1 |....................####################| [1, 2) 1 rows\n"
        "  cpu:2 |........................................| idle\n");
  auto table = device_put(*mesh, std::vector<double>(6, 1.0), 2, Sharding::replicated());
  CHECK(describe_sharding("grid", table) ==
        "grid: float64[3, 2] Replicated over 3 devices\n"
        "  cpu:0 |########################################| [0, 3) 3 rows, replica 0\n"
        "  cpu:1 |########################################| [0, 3) 3 rows, replica 1\n"
        "  cpu:2 |########################################| [0, 3) 3 rows, replica 2\n");
}

TEST_CASE("the data model declares every input field's sharding once", "[sharding]") {
  int n_fields = 0, n_derived = 0;
  Stars stars;
  Stars::for_each_field(stars, [&](const FieldSpec& spec, auto&) {
    ++n_fields;
    n_derived += spec.derived();
    CHECK(spec.sharding == Sharding::Kind::sharded);  // particle fields are split
  });
  CHECK(n_fields == 7);
  CHECK(n_derived == 0);
  Gas gas;
  int gas_fields = 0, gas_derived = 0;
  Gas::for_each_field(gas, [&](const FieldSpec& spec, auto&) {
    ++gas_fields;
    gas_derived += spec.derived();  // temperature_k, by the readers
    CHECK(spec.components >= 1);
  });
  CHECK(gas_fields == 10);
  CHECK(gas_derived == 1);
}

TEST_CASE("fields stages derive are kept by typed key, and a missing one is named", "[sharding]") {
  auto mesh = make_mesh(Backend::cpu, 2);
  constexpr FieldKey<float> av{"stars", "dust_av", "mag"};
  constexpr FieldKey<std::int32_t> av_as_int{"stars", "dust_av", ""};
  constexpr FieldKey<std::int32_t> spaxel{"stars", "spaxel_index", ""};
  DerivedFields derived;
  CHECK(derived.find(av) == nullptr);
  CHECK_THROWS_WITH(derived.at(spaxel), Catch::Contains("stars.spaxel_index: not derived"));
  derived.set(av, device_put(*mesh, std::vector<float>{0.5f, 1.5f, 2.5f}, 1, Sharding::sharded()));
  REQUIRE(derived.find(av) != nullptr);
  CHECK(derived.at(av).to_host() == std::vector<float>{0.5f, 1.5f, 2.5f});
  CHECK(derived.find(av_as_int) == nullptr);  // the same name, another type: not this field
  // A stage run again replaces its field.
  derived.set(av, device_put(*mesh, std::vector<float>{3.0f}, 1, Sharding::sharded()));
  CHECK(derived.at(av).to_host() == std::vector<float>{3.0f});
}

TEST_CASE("cpu meshes deal the threads out among host devices", "[devices]") {
  auto mesh = make_mesh(Backend::cpu, 3);
  REQUIRE(mesh->size() == 3);
  for (std::size_t d = 0; d < 3; ++d) {
    CHECK(mesh->device(d).id == static_cast<int>(d));
    CHECK(mesh->device(d).n_threads >= 1);
  }
  CHECK(mesh->describe().find("cpu:2") != std::string::npos);
}

TEST_CASE("a partial array is allocated once per memory space: 1000 host devices, one buffer",
          "[sharding][psum]") {
  auto mesh = make_mesh(Backend::cpu, 1000);
  REQUIRE(mesh->size() == 1000);
  CHECK(mesh->memory_owners().size() == 1);
  const std::size_t before = memory::bytes_in_use(Backend::cpu);
  const std::size_t n = 3721 * 25 * 25;  // a MUSE cube
  ShardedArray<std::int64_t> partial(*mesh, n, 1, Sharding::partial());
  CHECK(memory::bytes_in_use(Backend::cpu) - before == n * sizeof(std::int64_t));
  CHECK(partial.local(mesh->device(999)).data == partial.local(mesh->device(0)).data);
  // Zeroed once, at allocation, for every device to add into.
  const auto zeros = partial.download_shard(mesh->device(500));
  CHECK(std::all_of(zeros.begin(), zeros.end(), [](std::int64_t x) { return x == 0; }));
  // A sharded array still splits its rows over all 1000.
  ShardedArray<float> rows(*mesh, 2500, 1, Sharding::sharded());
  CHECK(rows.shard(mesh->device(0)).range.size() == 3);
  CHECK(rows.shard(mesh->device(999)).range.size() == 2);
}

TEST_CASE("processes on a node take GPUs of their own, and share only when there are too few",
          "[devices]") {
  using V = std::vector<int>;
  CHECK(gpus_of_process(4, 0, 1) == V{0, 1, 2, 3});  // alone: every GPU
  CHECK(gpus_of_process(4, 0, 2) == V{0, 2});        // two processes, two GPUs each
  CHECK(gpus_of_process(4, 1, 2) == V{1, 3});
  CHECK(gpus_of_process(4, 3, 4) == V{3});
  CHECK(gpus_of_process(8, 2, 3) == V{2, 5});  // 8 over 3: 3, 3 and 2 GPUs
  CHECK(gpus_of_process(2, 3, 5) == V{1});     // more processes than GPUs: shared
  // Every GPU is taken by exactly one process while there are enough of them.
  for (int gpus = 1; gpus <= 8; ++gpus)
    for (int size = 1; size <= gpus; ++size) {
      std::vector<int> takers(static_cast<std::size_t>(gpus), 0);
      for (int rank = 0; rank < size; ++rank)
        for (int g : gpus_of_process(gpus, rank, size)) ++takers[static_cast<std::size_t>(g)];
      CHECK(std::all_of(takers.begin(), takers.end(), [](int t) { return t == 1; }));
    }
  CHECK_THROWS(gpus_of_process(0, 0, 1));
  CHECK_THROWS(gpus_of_process(2, 2, 2));
}
