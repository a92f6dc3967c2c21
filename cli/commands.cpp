#include "cli/commands.h"

namespace ifusim::cli {

void register_commands(CLI::App& app, int& exit_code) {
  add_devices_command(app, exit_code);
  add_compare_command(app, exit_code);
}

}  // namespace ifusim::cli
