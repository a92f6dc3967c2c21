#include <sstream>

#include "data/sharded_array.h"

namespace ifusim {

std::string describe_sharding(const std::string& name, const std::string& dtype, std::size_t rows,
                              int components, const Sharding& sharding,
                              const std::vector<ShardLayout>& shards) {
  std::ostringstream out;
  out << name << ": " << dtype << "[" << rows;
  if (components > 1) out << ", " << components;
  out << "] " << sharding.to_string() << " over " << shards.size() << " device"
      << (shards.size() == 1 ? "" : "s") << "\n";
  // One row per device: its label, the global rows it holds, and a bar showing where they lie
  // within [0, rows) on a 40-column scale.
  constexpr std::size_t kWidth = 40;
  std::size_t label_width = 0;
  for (const auto& s : shards) label_width = std::max(label_width, s.device.size());
  for (const auto& s : shards) {
    std::string bar(kWidth, '.');
    if (!s.range.empty() && rows > 0) {
      const std::size_t a = s.range.begin * kWidth / rows;
      const std::size_t b = std::max(a + 1, (s.range.end * kWidth + rows - 1) / rows);
      for (std::size_t i = a; i < std::min(b, kWidth); ++i) bar[i] = '#';
    }
    out << "  " << s.device << std::string(label_width - s.device.size(), ' ') << " |" << bar
        << "| ";
    if (s.range.empty()) {
      out << "idle";
    } else {
      out << "[" << s.range.begin << ", " << s.range.end << ") " << s.range.size() << " rows";
      switch (sharding.kind()) {
        case Sharding::Kind::sharded:
          break;
        case Sharding::Kind::replicated:
          out << ", replica " << s.replica_id;
          break;
        case Sharding::Kind::partial:
          out << ", partial sum";
          break;
      }
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace ifusim
