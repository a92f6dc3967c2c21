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
}

}  // namespace ifusim::cli
