#pragma once

namespace ifusim::cli {
// Parses the command line and runs the chosen subcommand; returns the process exit code.
int run(int argc, char** argv);
}  // namespace ifusim::cli
