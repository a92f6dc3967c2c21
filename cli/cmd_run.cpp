#include <spdlog/spdlog.h>

#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "data/collectives/processes.h"
#include "pipeline/plan.h"
#include "pipeline/runner.h"
#include "pipeline/survey.h"

namespace ifusim::cli {

namespace {

// What `run` and `plan` both take: the config, the devices and overrides.
struct RunArguments {
  std::string config;
  std::string backend;
  int devices = -1;
  std::string out;
  std::vector<std::string> overrides;
  bool no_progress = false;

  void add_to(CLI::App* cmd) {
    cmd->add_option("config", config, "Run config (JSON), see docs/config.md")->required();
    cmd->add_option("--backend", backend, "cpu or cuda (overrides devices.backend)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    cmd->add_option("--devices", devices, "Number of devices (overrides devices.count)")
        ->check(non_negative());
    cmd->add_option("--set", overrides, "Override a config value: key.path=value (repeatable)");
  }
  RunOptions options() const {
    RunOptions o;
    if (!backend.empty()) o.backend = backend_from_string(backend);
    if (devices >= 0) o.n_devices = devices;
    if (!out.empty()) o.output_dir = out;
    o.progress = !no_progress;
    return o;
  }
};

// --out "" would otherwise be taken for no --out, and the config's output.dir written instead.
CLI::Validator non_empty_folder() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        return input.empty() ? "expected a folder, got an empty path" : "";
      },
      "FOLDER", "non_empty_folder");
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<RunArguments>();
  auto* cmd =
      app.add_subcommand("run", "Simulate the IFU cube of a galaxy described by a run config");
  a->add_to(cmd);
  cmd->add_option("--out", a->out, "Output folder (overrides output.dir)")
      ->check(non_empty_folder());
  cmd->add_flag("--no-progress", a->no_progress, "No progress bar");
  cmd->callback([a, &exit_code] {
    const RunConfig config = load_run_config(a->config, a->overrides);
    RunOptions options = a->options();
    // Under mpirun, the processes make one cube together (docs/streaming.md).
    options.across_processes = processes::size() > 1;
    const RunReport report = run_pipeline(config, options);
    exit_code = 0;
    if (processes::rank() > 0) return;  // process 0 wrote the outputs
    std::cout << "written to " << report.output_dir << ":";
    for (const auto& f : report.files) std::cout << " " << f;
    std::cout << "\n(" << report.total_seconds << " s; timings and memory: summary.json)\n";
    exit_code = 0;
  });
}

void add_plan_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<RunArguments>();
  auto* cmd = app.add_subcommand(
      "plan",
      "Dry run: how the galaxy would be sharded and what each device's memory would hold; "
      "exits 1 when the run does not fit");
  a->add_to(cmd);
  cmd->callback([a, &exit_code] {
    const RunConfig config = load_run_config(a->config, a->overrides);
    const RunPlan plan = plan_pipeline(config, a->options());
    std::cout << plan.report;
    exit_code = plan.fits() ? 0 : 1;
  });
}

void add_survey_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<RunArguments>();
  auto* cmd = app.add_subcommand(
      "survey",
      "Many cubes from one snapshot: the config's survey section selects subhalos and "
      "orientations (docs/survey.md); resumes where an earlier run stopped");
  a->add_to(cmd);
  cmd->add_option("--out", a->out, "Survey folder (overrides output.dir)")
      ->check(non_empty_folder());
  auto plan_only = std::make_shared<bool>(false);
  cmd->add_flag("--plan", *plan_only,
                "Print the subhalos, cubes and particle rows the survey selects, and stop");
  cmd->callback([a, plan_only, &exit_code] {
    const nlohmann::json document = load_config_document(a->config, a->overrides);
    const SurveyPlan plan = plan_survey(document, a->config);
    if (*plan_only) {
      if (processes::rank() == 0) std::cout << describe_survey(plan);
      exit_code = 0;
      return;
    }
    RunOptions options = a->options();
    options.progress = false;
    const std::string out =
        a->out.empty() ? parse_run_config(plan.tasks.front().run_document, a->config).output_dir
                       : a->out;
    const SurveyReport report = run_survey(plan, out, options);
    exit_code = 0;
    if (processes::rank() > 0) return;  // process 0 keeps the catalog and reports
    std::cout << plan.tasks.size() << " cubes: " << report.done << " made, " << report.skipped
              << " done before, " << report.failed << " failed; " << report.catalog_path << "\n";
    exit_code = report.failed == 0 ? 0 : 1;
  });
}

}  // namespace ifusim::cli
