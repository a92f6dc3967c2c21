#include <spdlog/spdlog.h>

#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "pipeline/runner.h"

namespace ifusim::cli {

void add_run_command(CLI::App& app, int& exit_code) {
  struct Options {
    std::string config;
    std::string backend;
    int devices = -1;
    std::string out;
    std::vector<std::string> overrides;
    bool no_progress = false;
  };
  auto o = std::make_shared<Options>();
  auto* cmd =
      app.add_subcommand("run", "Simulate the IFU cube of a galaxy described by a run config");
  cmd->add_option("config", o->config, "Run config (JSON), see docs/config.md")->required();
  cmd->add_option("--backend", o->backend, "cpu or cuda (overrides devices.backend)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--devices", o->devices, "Number of devices (overrides devices.count)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--out", o->out, "Output folder (overrides output.dir)");
  cmd->add_option("--set", o->overrides, "Override a config value: key.path=value (repeatable)");
  cmd->add_flag("--no-progress", o->no_progress, "No progress bar");
  cmd->callback([o, &exit_code] {
    const RunConfig config = load_run_config(o->config, o->overrides);
    RunOptions options;
    if (!o->backend.empty()) options.backend = backend_from_string(o->backend);
    if (o->devices >= 0) options.n_devices = o->devices;
    if (!o->out.empty()) options.output_dir = o->out;
    options.progress = !o->no_progress;
    const RunReport report = run_pipeline(config, options);
    std::cout << "written to " << report.output_dir << ":";
    for (const auto& f : report.files) std::cout << " " << f;
    std::cout << "\n(" << report.total_seconds << " s; timings and memory: summary.json)\n";
    exit_code = 0;
  });
}

}  // namespace ifusim::cli
