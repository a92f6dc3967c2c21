#include "stages/psum/psum.h"

#include "core/json_params.h"

namespace ifusim {
namespace {

class PsumStage final : public Stage {
 public:
  std::string name() const override { return "psum"; }
  std::vector<std::string> needs() const override { return {"partial_cube"}; }
  std::vector<Provided> provides() const override {
    return {{"cube", "", "the reduced cube: every device's and process's partials summed"}};
  }
  void run(RunState& state) override { reduce_partials(state); }
};

std::unique_ptr<Stage> make_psum_stage(const nlohmann::json& params, const std::string& path,
                                       const StageResources&) {
  JsonParams(params, path).finish();
  return std::make_unique<PsumStage>();
}

}  // namespace

StageEntry psum_stage() {
  return {.name = "psum",
          .summary = "sum the per-device partial cubes (exact, reproducible)",
          .kind = StageKind::reduction,
          .make = &make_psum_stage};
}

}  // namespace ifusim
