// scatter_by_rows on the CPU backend (data/backend/cpu_system.h): the items that add into rows
// of one array, on bands of rows owned by the threads, plain adds. Checked against a serial
// scatter: every (item, row) pair of an item's span inside the rows is visited exactly once,
// whatever the threads, the first row, the items' spans (empty, outside, across every band) and
// the chunks.
#include <omp.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "data/backend/cpu_system.h"

using namespace ifusim;

namespace {

struct Spans {
  const std::int32_t* first;
  const std::int32_t* last;
  void operator()(std::size_t i, std::int32_t& a, std::int32_t& b) const {
    a = first[i];
    b = last[i];
  }
};

// Adds item i's value into each row of its span that `rows` holds: i + 1 at row r is
// (i + 1) << (r % 8): a row's sum tells which items reached it, and twice is not once.
struct AddRows {
  const std::int32_t* first;
  const std::int32_t* last;
  std::int64_t* sums;  // sums[r - sums_first_row]
  std::int32_t sums_first_row;
  void operator()(std::size_t i, const ScatterRows& rows) const {
    const std::int32_t a = std::max(first[i], rows.first), b = std::min(last[i], rows.end - 1);
    for (std::int32_t r = a; r <= b; ++r)
      rows.add(sums + (r - sums_first_row), static_cast<std::int64_t>(i + 1) << (r % 8));
  }
};

}  // namespace

TEST_CASE("scatter_by_rows: each item's rows once, owned bands, any threads", "[scatter]") {
  const Device device;  // a cpu device: the bands are the calling thread's OpenMP team
  const int team = omp_get_max_threads();
  std::mt19937_64 rng(7);
  for (const std::int32_t n_rows : {1, 3, 37, 500}) {
    const std::int32_t first_row = n_rows > 3 ? 5 : 0;
    const std::size_t n = 3000;
    std::vector<std::int32_t> first(n), last(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto a = static_cast<std::int32_t>(rng() % (n_rows + 20)) - 10;
      const int kind = static_cast<int>(i % 5);
      // A row, a short run, a long one, every row and beyond, none.
      const std::int32_t length = kind == 0   ? 0
                                  : kind == 1 ? 3
                                  : kind == 2 ? n_rows / 2
                                              : 2 * n_rows;
      first[i] = kind == 3 ? first_row - 4 : a + first_row;
      last[i] = kind == 4 ? first[i] - 1 : first[i] + length;
    }
    std::vector<std::int64_t> expected(static_cast<std::size_t>(n_rows), 0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::int32_t r = std::max(first[i], first_row);
           r <= std::min(last[i], first_row + n_rows - 1); ++r)
        expected[static_cast<std::size_t>(r - first_row)] += static_cast<std::int64_t>(i + 1)
                                                             << (r % 8);
    for (const int threads : {1, 2, 3, 7})
      for (const bool shared : {false, true}) {
        INFO(n_rows << " rows, " << threads << " threads, shared " << shared);
        omp_set_num_threads(threads);
        std::vector<std::int64_t> sums(static_cast<std::size_t>(n_rows), 0);
        cpu::scatter_by_rows(device, n, first_row, n_rows, shared, Spans{first.data(), last.data()},
                             AddRows{first.data(), last.data(), sums.data(), first_row});
        CHECK(sums == expected);
      }
  }
  // More items than one chunk (kScatterChunk) takes: the second chunk's items keep their own
  // indices.
  const std::size_t n = kScatterChunk + 1001;
  const std::int32_t n_rows = 13;
  std::vector<std::int32_t> row(n);
  for (std::size_t i = 0; i < n; ++i) row[i] = static_cast<std::int32_t>((i * 7) % n_rows);
  std::vector<std::int64_t> expected(n_rows, 0);
  for (std::size_t i = 0; i < n; ++i)
    expected[static_cast<std::size_t>(row[i])] += static_cast<std::int64_t>(i + 1) << (row[i] % 8);
  omp_set_num_threads(3);
  std::vector<std::int64_t> sums(n_rows, 0);
  cpu::scatter_by_rows(device, n, 0, n_rows, false, Spans{row.data(), row.data()},
                       AddRows{row.data(), row.data(), sums.data(), 0});
  CHECK(sums == expected);
  omp_set_num_threads(team);
}
