#include "cli/commands.h"

namespace ifusim::cli {

void register_commands(CLI::App& app, int& exit_code) {
  add_run_command(app, exit_code);
  add_plan_command(app, exit_code);
  add_devices_command(app, exit_code);
  add_stages_command(app, exit_code);
  add_templates_command(app, exit_code);
  add_inspect_command(app, exit_code);
  add_make_galaxy_command(app, exit_code);
  add_compare_command(app, exit_code);
  add_survey_command(app, exit_code);
  add_analyse_command(app, exit_code);
}

CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(input, value)) return "expected a number, got " + input;
        return value >= 0 ? "" : "expected a number >= 0, got " + input;
      },
      "NUMBER >= 0", "non_negative");
}

}  // namespace ifusim::cli
