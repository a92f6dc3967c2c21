#include "cli/app.h"

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <exception>
#include <iostream>

#include "cli/commands.h"
#include "data/collectives/processes.h"

namespace ifusim::cli {

int run(int argc, char** argv) {
  CLI::App app{"ifusim: integral-field spectroscopy datacubes from cosmological simulations"};
  app.set_version_flag("--version", std::string("ifusim ") + IFUSIM_VERSION);
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Log debugging detail");
  app.parse_complete_callback([&] {
    spdlog::set_pattern("[%H:%M:%S] [%^%l%$] %v");
    spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::info);
  });

  // Past a file-size limit (ulimit -f) a write then fails with EFBIG and the writer reports it,
  // naming the file, instead of the process dying of SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  int exit_code = 0;
  register_commands(app, exit_code);
  try {
    app.parse(argc, argv);  // runs the chosen subcommand's callback
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "ifusim: error: " << e.what() << "\n";
    // The other processes of an mpirun may wait for this one in a collective: stop them all.
    processes::abort_all(1);
    return 1;
  }
  return exit_code;
}

}  // namespace ifusim::cli
