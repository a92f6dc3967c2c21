#pragma once
// ShardedArray<T>: a global (rows x components) array laid out on a mesh as a list of shards
// (jax.Array). Host-side data is row-major (rows, components) as in HDF5 and numpy; on devices
// each shard stores its rows component-major (one plane per component: structure of arrays).
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/buffer.h"
#include "data/host_memory.h"
#include "data/mesh.h"
#include "data/sharding.h"

namespace ifusim {

template <class T>
struct Shard {
  const Device* device = nullptr;
  IndexRange range;        // global rows this shard holds
  int replica_id = 0;      // which copy this is: 0..D-1 for replicated data, 0 for sharded
  DeviceBuffer<T> buffer;  // range.size() * components elements, component-major
};

template <class T>
class ShardedArray {
 public:
  using value_type = T;
  ShardedArray() = default;

  // Allocates every device's shard (uninitialised) for a global array of `rows` x `components`.
  // A Partial(particles) array is allocated once per memory space (Mesh::memory_owner) and
  // filled with zeros: the devices sharing that memory add into one buffer with integer atomics
  // (data/fixed_point.h), so `--devices 1000` on one host holds one array, not a thousand.
  ShardedArray(const Mesh& mesh, std::size_t rows, int components, Sharding sharding)
      : rows_(rows), components_(components), sharding_(std::move(sharding)) {
    if (components < 1) throw std::invalid_argument("ShardedArray: components must be >= 1");
    const auto ranges = sharding_.kind() == Sharding::Kind::sharded
                            ? split_evenly(rows, mesh.size())
                            : std::vector<IndexRange>(mesh.size(), IndexRange{0, rows});
    const bool partial = sharding_.kind() == Sharding::Kind::partial;
    shards_.resize(mesh.size());
    owner_.resize(mesh.size());
    for (std::size_t d = 0; d < mesh.size(); ++d) {
      auto& s = shards_[d];
      s.device = &mesh.device(d);
      s.range = ranges[d];
      s.replica_id = sharding_.kind() == Sharding::Kind::sharded ? 0 : static_cast<int>(d);
      owner_[d] = partial ? mesh.memory_owner(d) : d;
      if (owner_[d] != d) continue;  // shares its memory space's buffer
      s.buffer = DeviceBuffer<T>(*s.device, s.range.size() * static_cast<std::size_t>(components));
      if (partial) s.buffer.zero();
    }
  }

  std::size_t rows() const { return rows_; }
  int components() const { return components_; }
  const Sharding& sharding() const { return sharding_; }
  const std::vector<Shard<T>>& shards() const { return shards_; }
  std::vector<Shard<T>>& shards() { return shards_; }
  bool empty() const { return shards_.empty(); }

  Shard<T>& shard(const Device& device) { return shards_.at(static_cast<std::size_t>(device.id)); }
  const Shard<T>& shard(const Device& device) const {
    return shards_.at(static_cast<std::size_t>(device.id));
  }
  // The buffer holding this device's rows (its memory space's, for a partial array).
  DeviceBuffer<T>& buffer_of(const Device& device) {
    return shards_.at(owner_.at(static_cast<std::size_t>(device.id))).buffer;
  }
  const DeviceBuffer<T>& buffer_of(const Device& device) const {
    return shards_.at(owner_.at(static_cast<std::size_t>(device.id))).buffer;
  }
  // Component c of this device's shard: what kernels receive. For a partial array, the buffer
  // of the device's memory space.
  Span<T> local(const Device& device, int c = 0) const {
    const auto& s = shard(device);
    const std::size_t n = s.range.size();
    return {buffer_of(device).data() + static_cast<std::size_t>(c) * n, n};
  }

  // Fills one shard from a row-major host block of its rows (transposed to component planes).
  void upload_shard(const Device& device, const T* host_rows) {
    upload_rows(device, 0, host_rows, shard(device).range.size());
  }

  // Fills `count` rows of one shard from its local row `first` on, from row-major host rows:
  // a shard can be filled block by block, with host memory bounded by the block. Rows of
  // several components are transposed, one component plane at a time, into `plane` (at least
  // `count` elements; a block's pinned staging, from_callback_blocked) or, without one, into a
  // temporary.
  void upload_rows(const Device& device, std::size_t first, const T* host_rows, std::size_t count,
                   T* plane = nullptr) {
    auto& s = shard(device);
    const std::size_t n = s.range.size(), k = static_cast<std::size_t>(components_);
    if (first > n || count > n - first)
      throw std::out_of_range("ShardedArray::upload_rows: rows outside the shard");
    if (count == 0) return;
    auto& buffer = buffer_of(device);
    if (k == 1) return buffer.upload(host_rows, count, first);
    std::vector<T> temporary;
    if (!plane) {
      temporary.resize(count);
      plane = temporary.data();
    }
    for (std::size_t c = 0; c < k; ++c) {
      for (std::size_t i = 0; i < count; ++i) plane[i] = host_rows[i * k + c];
      buffer.upload(plane, count, c * n + first);
    }
  }

  // Row-major copy of one shard's rows.
  std::vector<T> download_shard(const Device& device) const {
    const auto& s = shard(device);
    const std::size_t n = s.range.size(), k = static_cast<std::size_t>(components_);
    std::vector<T> planes = large_vector<T>(n * k);
    buffer_of(device).download(planes.data(), planes.size());
    if (k == 1) return planes;
    std::vector<T> rows = large_vector<T>(n * k);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < k; ++c) rows[i * k + c] = planes[c * n + i];
    return rows;
  }

  // The whole array on the host, row-major. Sharded: the shards concatenated; replicated:
  // replica 0. A partial array has no single value until psum reduces it.
  std::vector<T> to_host() const {
    if (sharding_.kind() == Sharding::Kind::partial)
      throw std::logic_error("to_host of a partial (unreduced) array: psum it first");
    if (sharding_.kind() == Sharding::Kind::replicated)
      return download_shard(*shards_.at(0).device);
    std::vector<T> out;
    out.reserve(rows_ * static_cast<std::size_t>(components_));
    for (const auto& s : shards_) {
      const auto part = download_shard(*s.device);
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }

  // After a collective has made every shard hold the same full value (psum).
  void mark_replicated() { sharding_ = Sharding::replicated(); }

 private:
  std::size_t rows_ = 0;
  int components_ = 1;
  Sharding sharding_ = Sharding::replicated();
  std::vector<Shard<T>> shards_;
  std::vector<std::size_t> owner_;  // per device: the shard whose buffer it uses
};

// Each device fills its own shard: callback(range, rows_out) writes the global rows
// [range.begin, range.end) row-major into rows_out (range.size() * components elements). The
// callbacks of a sharded array run concurrently, one per non-idle device (the hook for
// per-device HDF5 hyperslab reads); a replicated array calls it once and copies the result to
// every device (jax GlobalDeviceArray.from_callback).
template <class T, class Callback>
ShardedArray<T> from_callback(const Mesh& mesh, std::size_t rows, int components,
                              const Sharding& sharding, Callback&& callback) {
  ShardedArray<T> array(mesh, rows, components, sharding);
  const std::size_t k = static_cast<std::size_t>(components);
  if (sharding.kind() == Sharding::Kind::sharded) {
    shard_map(mesh, [&](const Device& device) {
      const IndexRange range = array.shard(device).range;
      if (range.empty()) return;  // an idle device reads nothing
      HostStaging<T> block(device, range.size() * k);
      callback(range, block.data());
      array.upload_shard(device, block.data());
    });
  } else {
    std::vector<T> block(rows * k);
    if (rows) callback(IndexRange{0, rows}, block.data());
    for (std::size_t d = 0; d < mesh.size(); ++d) array.upload_shard(mesh.device(d), block.data());
  }
  return array;
}

// from_callback for several sharded arrays of the same rows, filled in blocks. Every non-idle
// device calls callback(block, outs) for consecutive blocks of at most `block_rows` of its own
// rows (concurrently across devices, in order within one), where outs[a] receives array a's
// rows of the block, row-major (block.size() * components[a] elements); each block is uploaded
// as soon as it is made. Host memory is thus bounded by the block, not the shard, and a source
// that makes all fields of a row at once (a generator) runs once for all of them.
template <class T, class Callback>
std::vector<ShardedArray<T>> from_callback_blocked(const Mesh& mesh, std::size_t rows,
                                                   const std::vector<int>& components,
                                                   std::size_t block_rows, Callback&& callback) {
  if (block_rows < 1) throw std::invalid_argument("from_callback_blocked: block_rows must be >= 1");
  std::vector<ShardedArray<T>> arrays;
  for (const int k : components) arrays.emplace_back(mesh, rows, k, Sharding::sharded());
  shard_map(mesh, [&](const Device& device) {
    if (arrays.empty()) return;
    const IndexRange range = arrays.front().shard(device).range;
    if (range.empty()) return;  // an idle device makes nothing
    // Each device's blocks (and one component plane for the transposition) are made once and
    // refilled block after block: pinned on a GPU, where a block is moved by DMA as it is.
    const std::size_t first_block = std::min(block_rows, range.size());
    std::vector<HostStaging<T>> blocks;
    std::vector<T*> outs(arrays.size());
    for (std::size_t a = 0; a < arrays.size(); ++a) {
      blocks.emplace_back(device, first_block * static_cast<std::size_t>(components[a]));
      outs[a] = blocks.back().data();
    }
    HostStaging<T> plane(device, first_block);
    for (std::size_t b = range.begin; b < range.end; b += block_rows) {
      const IndexRange block{b, std::min(range.end, b + block_rows)};
      callback(block, outs);
      for (std::size_t a = 0; a < arrays.size(); ++a)
        arrays[a].upload_rows(device, b - range.begin, outs[a], block.size(), plane.data());
    }
  });
  return arrays;
}

// Places a row-major host array (rows x components) on the mesh (jax.device_put).
template <class T>
ShardedArray<T> device_put(const Mesh& mesh, const std::vector<T>& host_rows, int components,
                           const Sharding& sharding) {
  const std::size_t k = static_cast<std::size_t>(components);
  if (components < 1 || host_rows.size() % k != 0)
    throw std::invalid_argument("device_put: host array size is not a multiple of components");
  return from_callback<T>(
      mesh, host_rows.size() / k, components, sharding, [&](IndexRange r, T* out) {
        std::copy(host_rows.begin() + static_cast<std::ptrdiff_t>(r.begin * k),
                  host_rows.begin() + static_cast<std::ptrdiff_t>(r.end * k), out);
      });
}

// Element type names for describe_sharding.
template <class T>
constexpr const char* type_name() {
  if constexpr (std::is_same_v<T, float>)
    return "float32";
  else if constexpr (std::is_same_v<T, double>)
    return "float64";
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return "int32";
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return "int64";
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return "uint64";
  else
    return "?";
}

// A text picture of which device holds which rows (jax.debug.visualize_array_sharding).
struct ShardLayout {
  std::string device;
  IndexRange range;
  int replica_id;
};
std::string describe_sharding(const std::string& name, const std::string& dtype, std::size_t rows,
                              int components, const Sharding& sharding,
                              const std::vector<ShardLayout>& shards);

template <class T>
std::string describe_sharding(const std::string& name, const ShardedArray<T>& array) {
  std::vector<ShardLayout> layout;
  for (const auto& s : array.shards())
    layout.push_back(
        {s.device->description.substr(0, s.device->description.find(' ')), s.range, s.replica_id});
  return describe_sharding(name, type_name<T>(), array.rows(), array.components(), array.sharding(),
                           layout);
}

}  // namespace ifusim
