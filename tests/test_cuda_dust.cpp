// The dust stage on CUDA devices against the CPU backend (built into the CUDA suite; skipped
// where there is no GPU).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "helpers.h"
#include "pipeline/devices.h"
#include "pipeline/registry.h"
#include "stages/common/particle_fields.h"

using namespace ifusim;

namespace {

std::vector<float> dust_av(Backend backend, int n_devices, const test::HostStars& stars,
                           const std::vector<float>& gas_rows) {
  const auto stages = nlohmann::json::parse(R"([
    {"stage": "spaxel_grid", "params": {"n_spaxels": 16, "spaxel_size_kpc": 1.0}},
    {"stage": "dust", "params": {"curve": "calzetti00"}}])");
  auto mesh = make_mesh(backend, n_devices);
  RunState state(*mesh);
  state.data.stars = test::put_stars(*mesh, stars);
  // gas_rows: (x, y, z, mass, Z) per particle.
  std::vector<float> position, mass, metallicity;
  for (std::size_t i = 0; i < gas_rows.size(); i += 5) {
    position.insert(position.end(), {gas_rows[i], gas_rows[i + 1], gas_rows[i + 2]});
    mass.push_back(gas_rows[i + 3]);
    metallicity.push_back(gas_rows[i + 4]);
  }
  state.data.gas.position_kpc = device_put(*mesh, position, 3, Sharding::sharded());
  state.data.gas.mass_msun = device_put(*mesh, mass, 1, Sharding::sharded());
  state.data.gas.metallicity = device_put(*mesh, metallicity, 1, Sharding::sharded());
  for (const auto& stage : make_stages(stages, "stages",
                                       {"stars.position_kpc", "stars.age_gyr", "gas.position_kpc",
                                        "gas.mass_msun", "gas.metallicity"}))
    run_stage(*stage, state);
  return state.data.stars.derived.at(fields::stars_dust_av).to_host();
}

}  // namespace

TEST_CASE("cuda: dust A_V equals the CPU backend's, bitwise, for 1, 2 and 5 logical devices",
          "[cuda]") {
  const auto stars = test::random_stars(100003, 5, 4.0);
  std::mt19937_64 rng(6);
  std::normal_distribution<double> pos(0.0, 3.0), logm(6.0, 0.4);
  std::uniform_real_distribution<double> metals(0.001, 0.03);
  std::vector<float> gas;
  for (int i = 0; i < 20000; ++i)
    for (double v : {pos(rng), pos(rng), pos(rng), std::pow(10.0, logm(rng)), metals(rng)})
      gas.push_back(static_cast<float>(v));
  const auto cpu = dust_av(Backend::cpu, 1, stars, gas);
  std::size_t attenuated = 0;
  for (float a : cpu) attenuated += a > 0 ? 1 : 0;
  REQUIRE(attenuated > 10000);
  for (int d : {1, 2, 5}) {
    const auto gpu = dust_av(Backend::cuda, d, stars, gas);
    INFO("logical devices: " << d);
    REQUIRE(gpu.size() == cpu.size());
    CHECK(std::memcmp(gpu.data(), cpu.data(), cpu.size() * sizeof(float)) == 0);
  }
}
