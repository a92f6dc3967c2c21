#include "cli/app.h"

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <exception>
#include <iostream>
#include <thread>

#include "cli/commands.h"
#include "data/collectives/processes.h"
#include "io/output_folder.h"

namespace ifusim::cli {

namespace {

// SIGINT (Ctrl-C) and SIGTERM end the program without leaving the run's staging folder beside
// its output folder. Removing a folder is not async-signal-safe, so no handler does it: both
// signals are blocked here, before any other thread exists (every thread inherits the mask), and
// one thread takes them in sigwait, removes the staging folders (io/output_folder.h), and ends
// the process by the same signal, restored to its default action, so that its exit status is
// what it would have been (130, 143 in a shell).
void end_cleanly_on_interrupt() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  if (pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) return;  // left as they were
  std::thread([signals] {
    int signal = 0;
    if (sigwait(&signals, &signal) != 0) return;
    OutputFolder::remove_live_staging();
    std::signal(signal, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
    std::raise(signal);  // to this thread, where it is no longer blocked: the process ends
  }).detach();
}

}  // namespace

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
  end_cleanly_on_interrupt();
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
