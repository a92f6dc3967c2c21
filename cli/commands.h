#pragma once
#include <CLI/CLI.hpp>

namespace ifusim::cli {

// Each subcommand lives in its own cli/cmd_*.cpp and adds itself to the app with a callback
// that stores its exit code. The list of them is in commands.cpp.
void add_devices_command(CLI::App& app, int& exit_code);
void add_compare_command(CLI::App& app, int& exit_code);

void register_commands(CLI::App& app, int& exit_code);

}  // namespace ifusim::cli
