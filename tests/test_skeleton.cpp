#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <optional>

#include "helpers.h"
#include "pipeline/devices.h"
#include "pipeline/registry.h"
#include "ssp_fixture.h"
#include "tests/cube_tolerance.h"

using namespace ifusim;

namespace {

const nlohmann::json kSkeleton = nlohmann::json::parse(R"([
  {"stage": "spaxel_grid", "params": {"n_spaxels": 24, "spaxel_size_kpc": 0.75}},
  {"stage": "mass_image"},
  {"stage": "psum"}
])");

const std::vector<std::string> kInputs = {"stars.position_kpc", "stars.mass_msun",
                                          "stars.initial_mass_msun"};

Cube run_skeleton(Backend backend, int n_devices, const test::HostStars& host,
                  const nlohmann::json& stages = kSkeleton) {
  auto mesh = make_mesh(backend, n_devices);
  RunState state(*mesh);
  state.data.stars = test::put_stars(*mesh, host);
  for (const auto& stage : make_stages(stages, "stages", kInputs)) run_stage(*stage, state);
  REQUIRE(state.cube.has_value());
  return std::move(*state.cube);
}

}  // namespace

TEST_CASE("skeleton: one star lands in the spaxel its position says", "[skeleton]") {
  test::HostStars one = test::random_stars(1, 7);
  // Grid of 24 x 0.75 kpc: x in [-9, 9). x = 1.1 -> ix = floor(10.1 / 0.75) = 13;
  // y = -4.0 -> iy = floor(5.0 / 0.75) = 6.
  one.position_kpc = {1.1f, -4.0f, 3.0f};
  one.mass_msun = {2.5e6f};
  const Cube cube = run_skeleton(Backend::cpu, 1, one);
  REQUIRE(cube.shape == CubeShape{24, 24, 1});
  for (int iy = 0; iy < 24; ++iy)
    for (int ix = 0; ix < 24; ++ix)
      CHECK(cube.at(ix, iy, 0) == ((ix == 13 && iy == 6) ? 2.5e6 : 0.0));
}

TEST_CASE("a stage's partials last until the reduction: a second deposit starts afresh",
          "[skeleton]") {
  // The stage keeps handles on the partials its first block declared (PartialHandle); after the
  // reduction took them, running it again declares new ones instead of adding to freed ones.
  const auto host = test::random_stars(2000, 11);
  auto mesh = make_mesh(Backend::cpu, 2);
  RunState state(*mesh);
  state.data.stars = test::put_stars(*mesh, host);
  const auto stages = make_stages(kSkeleton, "stages", kInputs);
  Stage& grid = *stages[0];
  Stage& image = *stages[1];
  run_stage(grid, state);
  run_stage(image, state);
  reduce_partials(state);
  REQUIRE(state.cube.has_value());
  const Cube first = std::move(*state.cube);
  state.cube.reset();
  CHECK(state.partials.empty());
  run_stage(image, state);  // the same stage object, a new deposit
  CHECK(state.partials.size() == 1);
  reduce_partials(state);
  REQUIRE(state.cube.has_value());
  CHECK(state.cube->data == first.data);  // not twice the mass
  double total = 0;
  for (double v : first.data) total += v;
  CHECK(total > 0);
}

TEST_CASE("a partial handle is not fooled by a new run state at a freed one's address",
          "[skeleton]") {
  // A stage object reused for a second run (benchmarks and tests do so) must declare new
  // partials, also when the new RunState is made where the first one was.
  auto mesh = make_mesh(Backend::cpu, 1);
  struct Partial : PartialResult {
    void reduce(RunState&) override {}
  };
  PartialHandle<Partial> handle;
  std::optional<RunState> state;
  state.emplace(*mesh);
  const RunState* first_address = &*state;
  handle.declare(*state, std::make_unique<Partial>());
  CHECK(handle.get(*state) != nullptr);
  state.reset();
  state.emplace(*mesh);  // std::optional keeps its storage: the same address
  REQUIRE(&*state == first_address);
  CHECK(handle.get(*state) == nullptr);
  handle.declare(*state, std::make_unique<Partial>());
  reduce_partials(*state);
  CHECK(handle.get(*state) == nullptr);
}

TEST_CASE("skeleton: image bitwise equal for 1, 2, 3, 4 and 7 devices", "[skeleton]") {
  const auto host = test::random_stars(30011, 2024);
  const Cube one = run_skeleton(Backend::cpu, 1, host);

  // Against a double-precision reference: each pixel within half a quantum per star in it,
  // and total mass in the field conserved to the same bound.
  std::vector<double> reference(one.data.size(), 0.0);
  std::vector<int> count(one.data.size(), 0);
  for (std::size_t i = 0; i < host.size(); ++i) {
    const double fx = (host.position_kpc[3 * i] + 9.0) / 0.75,
                 fy = (host.position_kpc[3 * i + 1] + 9.0) / 0.75;
    if (fx < 0 || fy < 0 || fx >= 24 || fy >= 24) continue;
    const std::size_t s = static_cast<std::size_t>(fy) * 24 + static_cast<std::size_t>(fx);
    reference[s] += host.mass_msun[i];
    ++count[s];
  }
  double max_mass = 0;
  for (float m : host.mass_msun) max_mass = std::max<double>(max_mass, m);
  const double quantum = FixedPointScale::for_bound(host.size() * max_mass, "test sums").quantum();
  double total = 0, total_ref = 0;
  int nonzero = 0;
  for (std::size_t s = 0; s < reference.size(); ++s) {
    REQUIRE(std::isfinite(one.data[s]));
    // The quanta of the fixed-point sums and the image's float32 (tests/cube_tolerance.h).
    CHECK(std::abs(one.data[s] - reference[s]) <=
          0.5 * count[s] * quantum + test::kFloatRounding * reference[s]);
    total += one.data[s];
    total_ref += reference[s];
    nonzero += reference[s] > 0;
  }
  CHECK(nonzero > 400);  // the test sees a real image, not an empty one
  CHECK(std::abs(total - total_ref) <=
        0.5 * host.size() * quantum + test::kFloatRounding * total_ref);

  for (int d : {2, 3, 4, 7}) {
    const Cube many = run_skeleton(Backend::cpu, d, host);
    REQUIRE(many.data.size() == one.data.size());
    CHECK(std::memcmp(many.data.data(), one.data.data(), one.data.size() * sizeof(one.data[0])) ==
          0);
  }
}

TEST_CASE("skeleton: more devices than stars leaves devices idle, not padded", "[skeleton]") {
  const auto host = test::random_stars(3, 11, 2.0);
  const Cube one = run_skeleton(Backend::cpu, 1, host);
  const Cube eight = run_skeleton(Backend::cpu, 8, host);
  CHECK(one.data == eight.data);
  double total = 0;
  for (double v : eight.data) total += v;
  CHECK(total > 0);
}

TEST_CASE("stage lists are validated before anything runs", "[skeleton]") {
  CHECK_THROWS_WITH(
      make_stages(nlohmann::json::parse(R"([{"stage": "mass_image"}])"), "stages", kInputs),
      Catch::Contains("stages[0]: stage \"mass_image\" needs stars.spaxel_index"));
  CHECK_THROWS_WITH(
      make_stages(
          nlohmann::json::parse(
              R"([{"stage": "spaxel_grid", "params": {"n_spaxels": 4, "spaxel_size_kpc": -1}}])"),
          "stages", kInputs),
      Catch::Contains("stages[0].params.spaxel_size_kpc: expected a number > 0, got -1"));
  CHECK_THROWS_WITH(
      make_stages(
          nlohmann::json::parse(
              R"([{"stage": "spaxel_grid", "params": {"n_spaxels": 4, "spaxel_size_kpc": 1, "colour": 2}}])"),
          "stages", kInputs),
      Catch::Contains("stages[0].params.colour: unknown key"));
  CHECK_THROWS_WITH(
      make_stages(nlohmann::json::parse(R"([{"stage": "telescope"}])"), "stages", kInputs),
      Catch::Contains("stages[0].stage: expected one of"));
}

namespace {

// A particle stage that provides what it is given, to check what check_stages accepts.
class ProvidingStage final : public Stage {
 public:
  explicit ProvidingStage(std::vector<Provided> provides) : provides_(std::move(provides)) {}
  std::string name() const override { return "providing"; }
  std::vector<std::string> needs() const override { return {}; }
  std::vector<Provided> provides() const override { return provides_; }
  void run(RunState&) override {}

 private:
  std::vector<Provided> provides_;
};

void check_provides(std::vector<Provided> provides) {
  std::vector<RunStage> stages;
  stages.push_back({&stage_entry("mass_image", "stages[0]"),
                    std::make_unique<ProvidingStage>(std::move(provides)), "stages[0]"});
  check_stages(stages, kInputs);
}

}  // namespace

TEST_CASE("a field a stage derives is declared typed, and never shadows an input field",
          "[skeleton]") {
  constexpr FieldKey<float> depth{"stars", "depth_kpc", "kpc"};
  CHECK_NOTHROW(check_provides({Provided::field(depth, "how deep each star lies")}));
  CHECK(Provided::field(depth, "").field_bytes == sizeof(float));
  CHECK_THROWS_WITH(check_provides({{"stars.depth_kpc", "kpc", "untyped"}}),
                    Catch::Contains("provides stars.depth_kpc, which is an input field or not "
                                    "declared with Provided::field"));
  constexpr FieldKey<float> mass{"stars", "mass_msun", "Msun"};
  CHECK_THROWS_WITH(check_provides({Provided::field(mass, "a second mass")}),
                    Catch::Contains("provides stars.mass_msun"));
  CHECK_NOTHROW(check_provides({{"spaxels", "", "a product, not a particle field"}}));
}

TEST_CASE("every stage describes itself: kind, examples that make it, its parameter schema",
          "[skeleton]") {
  StageResources resources;
  resources.ssp = std::make_shared<const SspGrid>(test::synthetic_ssp_grid());
  std::size_t reductions = 0;
  for (const StageEntry& entry : stage_registry()) {
    INFO(entry.name);
    CHECK_FALSE(entry.summary.empty());
    reductions += entry.kind == StageKind::reduction;
    // Every example makes the stage, and the stage's name is its entry's.
    for (const auto& example : entry.examples)
      CHECK(entry.make(example, "stages." + entry.name, resources)->name() == entry.name);
    const StageParameters schema = stage_parameters(entry, resources);
    CHECK(schema.error.empty());
    for (const auto& p : schema.params) {
      INFO(p.key);
      CHECK_FALSE(p.kind.empty());  // every key read at least once by an example
    }
  }
  CHECK(reductions == 1);  // the run loop's barrier
  // The schema is what the parsing reads: defaults, required keys and their checks.
  auto find = [](const std::string& stage, const std::string& key) {
    const StageParameters s = stage_parameters(stage_entry(stage, "p"));
    for (const auto& p : s.params)
      if (p.key == key) return p;
    FAIL("no parameter " << key << " of " << stage);
    return ParamRecord{};
  };
  const ParamRecord n = find("spaxel_grid", "n_spaxels");
  CHECK(n.required);
  CHECK(n.kind == "integer");
  const ParamRecord smoothing = find("spaxel_grid", "smoothing");
  CHECK_FALSE(smoothing.required);
  CHECK(smoothing.fallback == "none");
  CHECK(find("psf", "beta").kind == "number");  // read only for a Moffat PSF: its own example
  CHECK(find("orient", "orientation.alpha_deg").fallback == 0.0);
  const ParamRecord snr = find("noise", "snr");
  CHECK(snr.required);
  REQUIRE(snr.expected.size() == 1);
  CHECK(snr.expected[0] == "a number > 0");
  // Without the library stellar_spectra still describes its parameters, and says what it lacks.
  const StageParameters spectra = stage_parameters(stage_entry("stellar_spectra", "p"));
  CHECK_THAT(spectra.error, Catch::Contains("needs an SSP template library"));
  CHECK(spectra.params.size() >= 5);
}

// CTest runs each test case by name (catch_discover_tests), and CMake splits names at ';': a
// name with one would be reported as passed without running.
TEST_CASE("every test case's name can be run by CTest: no semicolons", "[skeleton]") {
  std::size_t count = 0;
  for (const auto& test : Catch::getRegistryHub().getTestCaseRegistry().getAllTests()) {
    INFO(test.name);
    CHECK(test.name.find(';') == std::string::npos);
    ++count;
  }
  CHECK(count > 100);
}
