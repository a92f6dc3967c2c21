#pragma once
#include <CLI/CLI.hpp>

namespace ifusim::cli {

// Each subcommand lives in its own cli/cmd_*.cpp and adds itself to the app with a callback
// that stores its exit code. The list of them is in commands.cpp.
void add_devices_command(CLI::App& app, int& exit_code);
void add_stages_command(CLI::App& app, int& exit_code);
void add_templates_command(CLI::App& app, int& exit_code);
void add_inspect_command(CLI::App& app, int& exit_code);
void add_make_galaxy_command(CLI::App& app, int& exit_code);

void add_run_command(CLI::App& app, int& exit_code);
void add_plan_command(CLI::App& app, int& exit_code);
void add_compare_command(CLI::App& app, int& exit_code);
void add_survey_command(CLI::App& app, int& exit_code);
void add_analyse_command(CLI::App& app, int& exit_code);

void register_commands(CLI::App& app, int& exit_code);

// A number >= 0, its error saying so with the value given (CLI11's NonNegativeNumber says "not in
// range 0.000000 to" the 309 digits of the largest double).
CLI::Validator non_negative();

}  // namespace ifusim::cli
