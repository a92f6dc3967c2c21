#pragma once
// The contract every stage keeps: parameters parsed and validated from JSON when the stage is
// made (nothing runs until every stage of a run is made), then run() on the run's state, using
// shard_map for per-device work. Stages are listed explicitly in pipeline/registry.cpp.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/datacube.h"
#include "data/galaxy_data.h"
#include "data/mesh.h"

namespace ifusim {

// What a run carries from stage to stage.
struct RunState {
  const Mesh& mesh;
  GalaxyData data;
  CubeShape spaxels;                   // set by the spaxel stage (n_wave = 0 until spectra)
  std::optional<PartialCube> partial;  // per-device partial sums, until psum
  std::optional<Cube> cube;            // the reduced cube, after psum
};

class Stage {
 public:
  virtual ~Stage() = default;
  virtual std::string name() const = 0;
  // Names of what the stage reads and writes ("stars.spaxel_index", "partial_cube", "cube"),
  // so that a run's stage order is checked before anything runs.
  virtual std::vector<std::string> needs() const = 0;
  virtual std::vector<std::string> provides() const = 0;
  virtual void run(RunState& state) const = 0;
};

}  // namespace ifusim
