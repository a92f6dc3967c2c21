// Faults: a run that fails, is killed (SIGKILL) at any point, or hits a file-size limit leaves no
// partial file in its output folder, and an earlier run's cube is replaced only by a complete one.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/config_error.h"
#include "io/cube/cube_io.h"
#include "io/cube/raster.h"
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

// Starts `sh -c "<shell>; exec ifusim <arguments>"` with its output in `log`; `shell` (if not
// empty) is run first, in the child (e.g. "ulimit -f 64").
pid_t start_ifusim(const std::string& arguments, const fs::path& log,
                   const std::string& shell = "") {
  const std::string command = (shell.empty() ? "" : shell + "; ") + "exec " + IFUSIM_BINARY + " " +
                              arguments + " > '" + log.string() + "' 2>&1";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// `ifusim run <example> --out <out> --no-progress <extra>`.
pid_t start_run(const fs::path& out, const fs::path& log, const std::string& shell = "",
                const std::string& extra = "") {
  return start_ifusim(std::string("run ") + IFUSIM_SOURCE_DIR +
                          "/configs/examples/muse_tng_mastar.json --no-progress --out '" +
                          out.string() + "' " + extra,
                      log, shell);
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

namespace {

// The commit tests' folder: an earlier run's complete set (cube.fits, cube.h5, two pictures,
// summary.json, each saying "earlier") and the user's own notes.txt.
const std::vector<std::string> kRunOutputs = {"cube.fits", "cube.h5", "velocity.png",
                                              "spectrum.png", "summary.json"};
// What the new run writes (no spectrum.png this time), in writing order, each saying "new".
const std::vector<std::string> kNewFiles = {"cube.fits", "cube.h5", "velocity.png", "summary.json"};

void write_earlier_run(const fs::path& dir) {
  fs::create_directories(dir);
  for (const auto& name : kRunOutputs) write_text(dir / name, "earlier " + name);
  write_text(dir / "notes.txt", "the user's own file");
}

void write_new_run(OutputFolder& out) {
  for (const auto& name : kNewFiles) write_text(out.path(name), "new " + name);
}

// What a reader may rely on: where summary.json is present, every run output beside it is of the
// run that wrote it (and every file that run wrote is there); the user's file is never touched.
void check_reader_sees_one_run(const fs::path& dir) {
  CHECK(read_text(dir / "notes.txt") == "the user's own file");
  if (!fs::exists(dir / "summary.json")) return;
  const std::string run = read_text(dir / "summary.json").substr(0, 3) == "new" ? "new" : "earlier";
  for (const auto& name : kRunOutputs) {
    INFO(name << " beside the " << run << " run's summary.json");
    if (run == "new" && name == "spectrum.png")
      CHECK_FALSE(fs::exists(dir / name));
    else
      CHECK(read_text(dir / name) == run + " " + name);
  }
}

}  // namespace

TEST_CASE("output folder: a move that fails mixes no two runs (summary.json gone, new files too)",
          "[faults]") {
  const test::ScratchDir tmp("faults");
  const fs::path dir = tmp.path() / "out";
  write_earlier_run(dir);
  // cube.h5 replaced by a folder (issue 23): the new cube.h5 cannot be moved onto it.
  fs::remove(dir / "cube.h5");
  fs::create_directories(dir / "cube.h5" / "inside");
  {
    OutputFolder out(dir.string(), kRunOutputs);
    write_new_run(out);
    CHECK_THROWS_WITH(out.commit(), Catch::Contains((dir / "cube.h5").string()) &&
                                        Catch::Contains("cannot move the new file in"));
  }
  CHECK_FALSE(fs::exists(dir / "summary.json"));  // the earlier run's is not beside a new cube
  CHECK_FALSE(fs::exists(dir / "cube.fits"));     // moved in before the failure, removed again
  CHECK(read_text(dir / "velocity.png") == "earlier velocity.png");  // not reached: marked by
  check_reader_sees_one_run(dir);                                    // the missing summary
  CHECK(entries(tmp.path()) == std::vector<std::string>{"out"});     // staging removed
}

TEST_CASE("output folder: a fault injected at every step of commit() leaves no mixed set",
          "[faults]") {
  const test::ScratchDir tmp("faults");
  const fs::path dir = tmp.path() / "out";
  // Steps: remove the earlier summary.json, remove spectrum.png (not written this time), move the
  // 4 new files in: 6. A fault at step k, for every k; at step 6 none is left to fail.
  std::size_t steps_seen = 0;
  for (std::size_t k = 0; k <= 6; ++k) {
    INFO("step " << k << " fails");
    fs::remove_all(dir);
    write_earlier_run(dir);
    bool committed = false;
    {
      OutputFolder out(dir.string(), kRunOutputs);
      write_new_run(out);
      out.inject_commit_fault([&](std::size_t step) {
        steps_seen = std::max(steps_seen, step + 1);
        return step == k;
      });
      try {
        out.commit();
        committed = true;
      } catch (const InputError& e) {
        CHECK_THAT(e.what(),
                   Catch::Contains(dir.string()) && Catch::Contains("Input/output error"));
      }
    }
    check_reader_sees_one_run(dir);
    CHECK(entries(tmp.path()) == std::vector<std::string>{"out"});  // staging removed
    CHECK(committed == (k == 6));
    if (!committed) {  // step 0 failing leaves the earlier set whole; any later one, no summary
      CHECK(fs::exists(dir / "summary.json") == (k == 0));
      for (const auto& name : entries(dir)) CHECK(read_text(dir / name).substr(0, 4) != "new ");
    } else {
      CHECK(read_text(dir / "summary.json") == "new summary.json");
    }
  }
  CHECK(steps_seen == 6);
}

TEST_CASE("output folder: a run killed (SIGKILL) at every step of commit() leaves no mixed set",
          "[faults]") {
  const test::ScratchDir tmp("faults");
  const fs::path dir = tmp.path() / "out";
  for (std::size_t k = 0; k <= 6; ++k) {
    INFO("killed before step " << k);
    fs::remove_all(dir);
    write_earlier_run(dir);
    const pid_t pid = ::fork();
    if (pid == 0) {  // the run: killed just before step k, nothing after it runs
      OutputFolder out(dir.string(), kRunOutputs);
      write_new_run(out);
      out.inject_commit_fault([k](std::size_t step) {
        if (step == k) ::kill(::getpid(), SIGKILL);
        return false;
      });
      try {
        out.commit();
      } catch (...) {
        ::_exit(1);
      }
      ::_exit(0);
    }
    const int status = wait_for(pid);
    CHECK(WIFSIGNALED(status) == (k < 6));
    check_reader_sees_one_run(dir);
    if (k >= 1 && k < 6) CHECK_FALSE(fs::exists(dir / "summary.json"));
  }
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

TEST_CASE("a run interrupted (SIGINT, SIGTERM) removes its staging folder and ends by the signal",
          "[faults]") {
  // Sent at set-up, while the stages run and while files are written (the run takes about a
  // second here, counted from its staging folder's creation).
  for (const int signal : {SIGINT, SIGTERM})
    for (const int after_ms : {0, 150, 400, 700}) {
      INFO((signal == SIGINT ? "SIGINT" : "SIGTERM") << " " << after_ms << " ms after set-up");
      const test::ScratchDir tmp("faults");
      const fs::path out = tmp.path() / "out", log = tmp.path() / "log";
      const pid_t pid = start_run(out, log);
      const fs::path staging = tmp.path() / (".out.partial-" + std::to_string(pid));
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!fs::exists(staging) && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      REQUIRE(fs::exists(staging));
      std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
      ::kill(pid, signal);
      const int status = wait_for(pid);
      INFO(read_text(log));
      if (WIFEXITED(status)) {  // finished before the signal came: nothing to check here
        WARN("the run ended (exit " << WEXITSTATUS(status) << ") before the signal");
        continue;
      }
      CHECK(WIFSIGNALED(status));
      CHECK(WTERMSIG(status) == signal);  // a shell reports 128 + signal: 130, 143
      CHECK_FALSE(fs::exists(staging));
      CHECK(entries(out).empty());
      CHECK(entries(tmp.path()) == std::vector<std::string>{"log"});  // nor its lock file
    }
}

TEST_CASE("output folder: a second run into the same folder at the same time is refused",
          "[faults]") {
  const test::ScratchDir tmp("faults");
  const fs::path dir = tmp.path() / "out";
  const std::string refused = "another ifusim run is writing into this output folder";
  {
    OutputFolder first(dir.string(), {"cube.fits"});
    write_text(first.path("cube.fits"), "first cube");
    CHECK_THROWS_WITH(OutputFolder(dir.string(), {"cube.fits"}),
                      Catch::Contains(dir.string()) && Catch::Contains(refused));
    // From another process, too.
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        OutputFolder second(dir.string(), {"cube.fits"});
      } catch (const InputError& e) {
        ::_exit(std::string(e.what()).find(refused) == std::string::npos ? 2 : 0);
      }
      ::_exit(1);  // not refused
    }
    const int status = wait_for(pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    // A folder beside it is another output: not refused.
    CHECK_NOTHROW(OutputFolder((tmp.path() / "other").string(), {"cube.fits"}));
    first.commit();
  }
  {  // the first run over, the next one writes there
    OutputFolder next(dir.string(), {"cube.fits"});
    write_text(next.path("cube.fits"), "next cube");
    next.commit();
  }
  CHECK(read_text(dir / "cube.fits") == "next cube");
  CHECK(entries(tmp.path()) == std::vector<std::string>{"out"});  // no lock file left behind
}

TEST_CASE("two ifusim runs into one output folder at once: the second is refused", "[faults]") {
  const test::ScratchDir tmp("faults");
  const fs::path out = tmp.path() / "out";
  const pid_t first = start_run(out, tmp.path() / "log1");
  const fs::path staging = tmp.path() / (".out.partial-" + std::to_string(first));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(staging) && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE(fs::exists(staging));
  const int second = wait_for(start_run(out, tmp.path() / "log2"));
  const int first_status = wait_for(first);
  const std::string second_log = read_text(tmp.path() / "log2");
  INFO(second_log);
  INFO(read_text(tmp.path() / "log1"));
  CHECK(WIFEXITED(first_status));
  CHECK(WEXITSTATUS(first_status) == 0);
  CHECK(WIFEXITED(second));
  CHECK(WEXITSTATUS(second) == 1);
  CHECK_THAT(second_log, Catch::Contains("ifusim: error: " + out.string()) &&
                             Catch::Contains("another ifusim run is writing into this output "
                                             "folder"));
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

TEST_CASE("HDF5 files at a file-size limit: the file and the reason named, no crash, no file left",
          "[faults]") {
  const test::ScratchDir tmp("faults");
  const fs::path out = tmp.path() / "out", log = tmp.path() / "log";
  fs::create_directories(out);
  SECTION("make-galaxy") {
    // HDF5 used to crash at exit (SIGSEGV in its own clean-up of the file whose close failed).
    const int status = wait_for(start_ifusim(
        "make-galaxy '" + (out / "big.hdf5").string() + "' --stars 1e5", log, "ulimit -f 256"));
    INFO(read_text(log));
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 1);
    CHECK_THAT(read_text(log), Catch::Contains("big.hdf5") && Catch::Contains("File too large"));
  }
  SECTION("the cube's HDF5 file") {
    const int status = wait_for(
        start_run(out, log, "ulimit -f 64",
                  "--set output.fits=false --set output.png=false --set output.hdf5=true"));
    INFO(read_text(log));
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 1);
    CHECK_THAT(read_text(log), Catch::Contains("cube.h5") && Catch::Contains("File too large"));
  }
  CHECK(entries(out).empty());
  CHECK(entries(tmp.path()).size() == 2);  // out and log: no temporary or staging folder left
}

TEST_CASE("a PNG at a file-size limit: the file and the reason named, no file left", "[faults]") {
  const test::ScratchDir tmp("faults");
  const fs::path png = tmp.path() / "picture.png";
  // Pixels of a hash, which deflate cannot squeeze under the limit.
  detail::Canvas canvas(400, 400, {0, 0, 0});
  for (int y = 0; y < 400; ++y)
    for (int x = 0; x < 400; ++x) {
      const unsigned h =
          (static_cast<unsigned>(x) * 2654435761u) ^ (static_cast<unsigned>(y) * 40503u);
      canvas.set(x, y,
                 {static_cast<std::uint8_t>(h), static_cast<std::uint8_t>(h >> 8),
                  static_cast<std::uint8_t>(h >> 16)});
    }
  int pipe_ends[2];
  REQUIRE(::pipe(pipe_ends) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child alone gets the limit; it reports the error's text through the pipe.
    const rlimit limit{16384, 16384};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    ::signal(SIGXFSZ, SIG_IGN);
    std::string message = "no error";
    try {
      canvas.write_png(png.string());
    } catch (const std::exception& e) {
      message = e.what();
    }
    (void)!::write(pipe_ends[1], message.data(), message.size());
    ::_exit(0);
  }
  ::close(pipe_ends[1]);
  std::string message;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipe_ends[0], buffer, sizeof buffer)) > 0;) message.append(buffer, n);
  ::close(pipe_ends[0]);
  wait_for(pid);
  CHECK_THAT(message, Catch::Contains("picture.png") && Catch::Contains("File too large"));
  CHECK(entries(tmp.path()).empty());
}
