#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/config_error.h"

namespace ifusim::cli {

// `ifusim analyse CUBE --out maps.fits ...`: the observed maps of a cube (Voronoi bins with
// vorbin, pPXF kinematics, emission lines; docs/analysis.md) are made by the Python package's
// ifusim.analysis, with the field's own libraries; this command hands its arguments to
// `$IFUSIM_PYTHON -m ifusim.analysis` (default python3), replacing this process, so that the
// exit status, the messages and Ctrl-C are the module's.
void add_analyse_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "analyse",
      "Observed maps of a cube: Voronoi bins and pPXF kinematics (runs python3 -m "
      "ifusim.analysis; --help lists its options)");
  cmd->prefix_command();  // every argument after `analyse` goes to the module, --help too
  cmd->set_help_flag("");
  cmd->callback([cmd, &exit_code] {
    const char* env = std::getenv("IFUSIM_PYTHON");
    const std::string python = env && *env ? env : "python3";
    std::vector<std::string> args = {python, "-m", "ifusim.analysis"};
    for (const auto& a : cmd->remaining()) args.push_back(a);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The CLI blocks SIGINT and SIGTERM for its own clean-up thread (cli/app.cpp); a blocked
    // mask survives exec, so unblock them for the module.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
    execvp(argv[0], argv.data());
    const std::string why = std::strerror(errno);
    exit_code = 1;
    throw InputError("analyse: cannot run " + python + " -m ifusim.analysis (" + why +
                     "); set IFUSIM_PYTHON to an interpreter with the ifusim package and its "
                     "'analysis' extra (pip install \".[analysis]\", docs/analysis.md)");
  });
}

}  // namespace ifusim::cli
