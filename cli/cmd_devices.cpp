#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "data/runtime.h"
#include "pipeline/devices.h"

namespace ifusim::cli {

void add_devices_command(CLI::App& app, int& exit_code) {
  struct Options {
    std::string backend = "cpu";
    int devices = 0;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("devices", "List the devices a run would use");
  cmd->add_option("--backend", options->backend, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--devices", options->devices,
                  "Number of devices (cpu: host devices, default 1; cuda: default one per GPU)")
      ->check(non_negative());
  cmd->callback([options, &exit_code] {
    const Backend backend = backend_from_string(options->backend);
    if (backend == Backend::cpu && runtime::cuda_device_count() == 0)
      std::cout << "no CUDA GPU here (" << runtime::cuda_unavailable_reason()
                << "); the cpu backend runs on host devices\n";
    const auto mesh = make_mesh(backend, options->devices);
    std::cout << mesh->describe();
    exit_code = 0;
  });
}

}  // namespace ifusim::cli
