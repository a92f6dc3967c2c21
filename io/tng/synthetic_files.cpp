#include "io/tng/synthetic_files.h"

#include <deque>

namespace ifusim::tng {

void write_tng_cutout(const std::string& path, const SyntheticGalaxySpec& galaxy) {
  write_tng_cutout(path, SyntheticGalaxyGenerator(galaxy));
}

void write_tng_snapshot(const std::string& base_dir, const SyntheticSnapshotSpec& spec) {
  spec.validate();
  // One generator a part, made once (each derives its mass unit from up to 65536 of its stars);
  // a deque, since generators do not move and the layout points at them.
  std::deque<SyntheticGalaxyGenerator> generators;
  const auto source = [&](const SyntheticGalaxySpec& g) -> const TngGalaxySource* {
    if (g.n_stars + g.n_gas == 0) return nullptr;
    return &generators.emplace_back(g);
  };
  TngSnapshotLayout layout;
  layout.snapshot = spec.snapshot;
  layout.n_chunks = spec.n_chunks;
  layout.simulation_name = spec.simulation_name;
  layout.group_of_subhalo = spec.group_of_subhalo;
  for (const auto& g : spec.subhalos) layout.subhalos.push_back(source(g));
  for (const auto& g : spec.group_fuzz) layout.group_fuzz.push_back(source(g));
  layout.unassociated = source(spec.unassociated);
  write_tng_snapshot(base_dir, layout);
}

}  // namespace ifusim::tng
