#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace ifusim {

// The one mesh axis: particles are split along it.
inline constexpr const char* kParticlesAxis = "particles";

// Global index range [begin, end) of a shard along the leading axis.
struct IndexRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
  bool empty() const { return end == begin; }
  bool operator==(const IndexRange&) const = default;
};

// How one field is laid out on the mesh (NamedSharding(mesh, P("particles")) / P()).
// Partial is the state of a per-device partial sum (the datacube) until psum reduces it.
class Sharding {
 public:
  enum class Kind { sharded, replicated, partial };
  static Sharding sharded(std::string axis = kParticlesAxis) {
    return {Kind::sharded, std::move(axis)};
  }
  static Sharding replicated() { return {Kind::replicated, ""}; }
  static Sharding partial(std::string axis = kParticlesAxis) {
    return {Kind::partial, std::move(axis)};
  }

  Kind kind() const { return kind_; }
  const std::string& axis() const { return axis_; }
  std::string to_string() const;  // "Sharded(particles)", "Replicated", "Partial(particles)"
  bool operator==(const Sharding&) const = default;

 private:
  Sharding(Kind kind, std::string axis) : kind_(kind), axis_(std::move(axis)) {}
  Kind kind_;
  std::string axis_;
};

// The split rule: n items over d devices gives every device n / d and the first n % d devices
// one more. Devices beyond n get an empty range (idle, never padded).
std::vector<IndexRange> split_evenly(std::size_t n, std::size_t n_devices);

}  // namespace ifusim
