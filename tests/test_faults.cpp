// Faults: a run that fails, is killed (SIGKILL) at any point, or hits a file-size limit leaves no
// partial file in its output folder, and an earlier run's cube is replaced only by a complete one.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/cube/cube_io.h"
#include "io/output_folder.h"
#include "tng_test_util.h"

using namespace ifusim;
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

// Entries of `dir` (names), empty if it does not exist.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

// Starts `ifusim run <example> --out <out> --no-progress` with its output in `log`; `shell`
// (if not empty) is run by sh first, in the child (e.g. "ulimit -f 64").
pid_t start_run(const fs::path& out, const fs::path& log, const std::string& shell = "") {
  const std::string command = (shell.empty() ? "" : shell + "; ") + "exec " + IFUSIM_BINARY +
                              " run " + IFUSIM_SOURCE_DIR +
                              "/configs/examples/muse_tng_mastar.json --no-progress --out '" +
                              out.string() + "' > '" + log.string() + "' 2>&1";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("output folder: an earlier run's files are replaced only by a committed run",
          "[faults]") {
  const test::ScratchDir tmp("faults");
  const fs::path dir = tmp.path() / "out";
  fs::create_directories(dir);
  write_text(dir / "cube.fits", "earlier cube");
  write_text(dir / "velocity.png", "earlier picture");
  write_text(dir / "notes.txt", "the user's own file");
  const std::vector<std::string> outputs = {"cube.fits", "velocity.png", "summary.json"};
  {
    OutputFolder failed(dir.string(), outputs);
    write_text(failed.path("cube.fits"), "half a cube");
    CHECK(fs::path(failed.staging_dir()).parent_path() == tmp.path());  // beside, not inside
  }  // destroyed without commit: a failed run
  CHECK(read_text(dir / "cube.fits") == "earlier cube");
  CHECK(entries(tmp.path()) == std::vector<std::string>{"out"});  // staging removed
  {
    OutputFolder ok(dir.string(), outputs);
    write_text(ok.path("cube.fits"), "new cube");
    write_text(ok.path("summary.json"), "{}");
    CHECK(ok.commit() == std::vector<std::string>{"cube.fits", "summary.json"});
  }
  CHECK(read_text(dir / "cube.fits") == "new cube");
  CHECK_FALSE(fs::exists(dir / "velocity.png"));  // not written this time: the old one goes
  CHECK(read_text(dir / "notes.txt") == "the user's own file");
  CHECK(entries(tmp.path()) == std::vector<std::string>{"out"});
}

TEST_CASE("output folder: a killed run's staging folder is removed by the next run", "[faults]") {
  const test::ScratchDir tmp("faults");
  const pid_t gone = ::fork();  // a process id that no longer exists once reaped
  if (gone == 0) ::_exit(0);
  wait_for(gone);
  const fs::path stale = tmp.path() / (".out.partial-" + std::to_string(gone));
  fs::create_directories(stale);
  write_text(stale / "cube.fits.tmp", "half a cube");
  const fs::path live = tmp.path() / (".out.partial-" + std::to_string(::getppid()));
  fs::create_directories(live);  // a run still going (its process exists): left alone
  OutputFolder next((tmp.path() / "out").string(), {"cube.fits"});
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(live));
}

TEST_CASE("a run killed (SIGKILL) at any point leaves no partial cube in its output folder",
          "[faults]") {
  const test::ScratchDir tmp("faults");
  const fs::path out = tmp.path() / "out", log = tmp.path() / "log";
  // The example run takes about a second here: kills spread over set-up, stages and writing.
  for (const int after_ms : {20, 150, 300, 450, 600, 750, 900, 1100}) {
    INFO("killed after " << after_ms << " ms");
    const pid_t pid = start_run(out, log);
    std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
    ::kill(pid, SIGKILL);
    wait_for(pid);
    // Either nothing, or (killed while moving files in) complete files only.
    for (const auto& name : entries(out)) {
      INFO(name);
      CHECK(name.find(".tmp") == std::string::npos);
      CHECK(name.find("partial") == std::string::npos);
      if (name == "cube.fits") CHECK_NOTHROW(read_cube_fits((out / name).string()));
    }
  }
  // The next run completes and removes what the killed ones left beside the folder.
  const int status = wait_for(start_run(out, log));
  INFO(read_text(log));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(entries(tmp.path()).size() == 2);  // out and log
  CHECK(read_cube_fits((out / "cube.fits").string()).shape.n_voxels() > 0);
}

TEST_CASE("a full disk (file-size limit) is a clear error and leaves no partial file", "[faults]") {
  const test::ScratchDir tmp("faults");
  const fs::path out = tmp.path() / "out", log = tmp.path() / "log";
  fs::create_directories(out);
  write_text(out / "cube.fits", "earlier cube");
  // 64 KiB per file: the 25 x 25 x 3721 cube (9 MB) cannot be written.
  const int status = wait_for(start_run(out, log, "ulimit -f 64"));
  const std::string message = read_text(log);
  INFO(message);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(message, Catch::Contains("ifusim: error: ") && Catch::Contains("cube.fits") &&
                          Catch::Contains("File too large"));
  CHECK(read_text(out / "cube.fits") == "earlier cube");  // untouched
  CHECK(entries(out) == std::vector<std::string>{"cube.fits"});
  CHECK(entries(tmp.path()).size() == 2);  // out and log: no staging folder left
}
