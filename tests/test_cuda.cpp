// The CUDA backend against the CPU backend and against itself across logical device counts,
// including one GPU split into several logical devices.
#include <catch2/catch.hpp>

#include <cstring>

#include "data/runtime.h"
#include "helpers.h"
#include "pipeline/devices.h"
#include "pipeline/registry.h"

using namespace ifusim;

namespace {

Cube run_skeleton(Backend backend, int n_devices, const test::HostStars& host) {
  const auto stages = nlohmann::json::parse(R"([
    {"stage": "spaxel_grid", "params": {"n_spaxels": 24, "spaxel_size_kpc": 0.75}},
    {"stage": "mass_image"}, {"stage": "psum"}])");
  auto mesh = make_mesh(backend, n_devices);
  RunState state(*mesh);
  state.data.stars = test::put_stars(*mesh, host);
  for (const auto& stage : make_stages(stages, "stages", {"stars.position_kpc", "stars.mass_msun"}))
    stage->run(state);
  return std::move(*state.cube);
}

}  // namespace

TEST_CASE("cuda: devices are listed with their GPU and stream", "[cuda]") {
  auto mesh = make_mesh(Backend::cuda, 4);
  REQUIRE(mesh->size() == 4);
  for (std::size_t d = 0; d < 4; ++d) {
    CHECK(mesh->device(d).stream != nullptr);
    CHECK(mesh->device(d).gpu_ordinal == static_cast<int>(d) % runtime::cuda_device_count());
  }
}

TEST_CASE("cuda: sharded arrays round-trip through GPU memory", "[cuda]") {
  auto mesh = make_mesh(Backend::cuda, 3);
  std::vector<float> host(3 * 1001);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f;
  auto array = device_put(*mesh, host, 3, Sharding::sharded());
  CHECK(array.to_host() == host);
}

TEST_CASE("cuda: skeleton image equals the CPU backend's, bitwise, for 1..7 logical devices",
          "[cuda]") {
  const auto host = test::random_stars(200003, 99);
  const Cube cpu = run_skeleton(Backend::cpu, 1, host);
  double total = 0;
  for (double v : cpu.data) total += v;
  REQUIRE(total > 0);
  for (int d : {1, 2, 3, 4, 7}) {
    const Cube gpu = run_skeleton(Backend::cuda, d, host);
    REQUIRE(gpu.data.size() == cpu.data.size());
    INFO("logical devices: " << d);
    CHECK(std::memcmp(gpu.data.data(), cpu.data.data(), cpu.data.size() * sizeof(double)) == 0);
  }
}
