#include "stages/stage.h"

#include <atomic>

#include "data/collectives/psum.h"

namespace ifusim {

void PartialArray::reduce(RunState& state) {
  on_total_(state, reduce_to_host(state.mesh, sums_, scale_));
}

std::uint64_t new_partials_epoch() {
  static std::atomic<std::uint64_t> last{0};
  return ++last;
}

void reduce_partials(RunState& state) {
  // Each reduction may free its device memory before the next one allocates.
  auto partials = std::move(state.partials);
  state.partials.clear();
  state.partials_epoch = new_partials_epoch();
  for (auto& p : partials) {
    p->reduce(state);
    p.reset();
  }
}

const char* to_string(StageKind kind) {
  switch (kind) {
    case StageKind::particle:
      return "particle";
    case StageKind::reduction:
      return "reduction";
    case StageKind::cube:
      return "cube";
  }
  return "";
}

void check_cotangent_shape(const std::string& stage, const CubeShape& expected,
                           const CubeCotangent& cotangent) {
  if (expected.n_voxels() == 0)
    throw std::logic_error(stage + ": its adjoint needs its run() on the cube first");
  const std::size_t size = cotangent.values().size();
  if (!(cotangent.shape == expected) || size != expected.n_voxels())
    throw std::logic_error(stage + ": the cotangent is " + to_string(cotangent.shape) + " (" +
                           std::to_string(size) + " values), its cube " + to_string(expected));
}

void run_stage(Stage& stage, RunState& state) {
  if (stage.pass(StreamedInput::of(state.data.stars)) != Stage::Pass::none) {
    state.star_bounds();
    stage.observe(state);
    stage.end_pass(state);
  }
  stage.run(state);
}

ParticleGradients particle_vjp(const std::vector<Stage*>& stages, RunState& state,
                               const CubeCotangent& reduced) {
  ParticleGradients gradients;
  for (auto it = stages.rbegin(); it != stages.rend(); ++it)
    if (!(*it)->particle_adjoint(state, reduced, gradients))
      throw std::invalid_argument("a gradient through stage \"" + (*it)->name() +
                                  "\" is not possible: it has no particle adjoint");
  return gradients;
}

}  // namespace ifusim
