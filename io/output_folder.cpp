#include "io/output_folder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <system_error>

#include "core/config_error.h"

namespace ifusim {
namespace fs = std::filesystem;

namespace {

// Whether process `pid` has ended: it does not exist, or it is a zombie no parent has reaped yet
// (a killed MPI process under a container's init, say), which will write nothing more.
bool process_ended(pid_t pid) {
  if (::kill(pid, 0) == -1) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');  // the state follows "pid (comm) "
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

// Staging folders ".<name>.partial-<pid>" in `parent` whose process has ended.
void remove_stale_staging(const fs::path& parent, const std::string& name) {
  const std::string prefix = "." + name + ".partial-";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind(prefix, 0) != 0) continue;
    const std::string pid_text = file.substr(prefix.size());
    pid_t pid = 0;
    const auto [end, error] =
        std::from_chars(pid_text.data(), pid_text.data() + pid_text.size(), pid);
    if (error != std::errc() || end != pid_text.data() + pid_text.size() || pid <= 0) continue;
    if (process_ended(pid)) fs::remove_all(entry.path(), ec);
  }
}

// The staging folders of this process's live OutputFolders, for remove_live_staging(). Never
// destroyed: a signal may come while static objects are being destroyed at exit.
struct LiveStaging {
  std::mutex mutex;             // held by commit() throughout, and while the set changes
  std::set<std::string> paths;  // staging folders and lock files
  bool removed = false;         // remove_live_staging() ran: the process is ending
};
LiveStaging& live_staging() {
  static auto* live = new LiveStaging;
  return *live;
}

}  // namespace

// An exclusive flock on the lock file `path`, for the output folder `dir`.
struct OutputFolder::Lock {
  std::string path;
  int fd = -1;

  Lock(std::string lock_path, const std::string& dir) : path(std::move(lock_path)) {
    // The run that held the lock removes the file as it lets go: a lock taken on a file that is
    // no longer at `path` locks nothing anyone else sees, so it is taken again on the new one.
    for (;;) {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0)
        throw InputError(dir + ": cannot create the lock file " + path + " (" +
                         std::strerror(errno) + ")");
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int error = errno;
        ::close(fd);
        if (error == EWOULDBLOCK)
          throw InputError(dir +
                           ": another ifusim run is writing into this output folder (it holds " +
                           path + "); wait for it to end, or give this run another output folder");
        throw InputError(dir + ": cannot lock " + path + " (" + std::strerror(error) + ")");
      }
      struct stat held {
      }, now{};
      if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
          held.st_ino == now.st_ino)
        return;
      ::close(fd);
    }
  }
  ~Lock() {
    ::unlink(path.c_str());  // while still held, so that no other run holds this file
    ::close(fd);
  }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;
};

void OutputFolder::remove_live_staging() {
  LiveStaging& live = live_staging();
  std::lock_guard lock(live.mutex);
  live.removed = true;
  std::error_code ec;
  for (const auto& path : live.paths) fs::remove_all(path, ec);
}

OutputFolder::OutputFolder(std::string dir, std::vector<std::string> run_outputs)
    : dir_(std::move(dir)), run_outputs_(std::move(run_outputs)) {
  const fs::path folder = fs::absolute(dir_).lexically_normal();
  const fs::path target = folder.has_filename() ? folder : folder.parent_path();
  const fs::path parent = target.parent_path();
  const std::string name = target.filename().string();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec)
    throw InputError(dir_ + ": cannot create the output folder's parent " + parent.string() + " (" +
                     ec.message() + ")");
  if (fs::exists(target) && !fs::is_directory(target))
    throw InputError(dir_ + ": expected an output folder, found a file");
  lock_ = std::make_unique<Lock>((parent / ("." + name + ".lock")).string(), dir_);
  remove_stale_staging(parent, name);
  staging_ = (parent / ("." + name + ".partial-" + std::to_string(::getpid()))).string();
  LiveStaging& live = live_staging();
  std::lock_guard lock(live.mutex);
  if (live.removed) throw InputError(dir_ + ": the program is ending (interrupted)");
  fs::remove_all(staging_, ec);
  fs::create_directory(staging_, ec);
  if (ec)
    throw InputError(dir_ + ": cannot create the staging folder " + staging_ + " (" + ec.message() +
                     ")");
  live.paths.insert(staging_);
  live.paths.insert(lock_->path);
}

OutputFolder::~OutputFolder() {
  LiveStaging& live = live_staging();
  std::lock_guard lock(live.mutex);
  live.paths.erase(staging_);
  live.paths.erase(lock_->path);
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

std::string OutputFolder::path(const std::string& name) {
  if (std::find(run_outputs_.begin(), run_outputs_.end(), name) == run_outputs_.end())
    throw std::logic_error("OutputFolder: " + name + " is not one of the run's outputs");
  written_.push_back(name);
  return (fs::path(staging_) / name).string();
}

std::vector<std::string> OutputFolder::commit() {
  if (committed_) throw std::logic_error("OutputFolder: committed twice");
  LiveStaging& live = live_staging();
  std::lock_guard lock(live.mutex);  // an interruption waits for the moves to finish
  if (live.removed) throw InputError(dir_ + ": not written, the program is ending (interrupted)");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw InputError(dir_ + ": cannot create the output folder (" + ec.message() + ")");
  const std::string mark = "summary.json";  // its presence marks a complete set
  std::size_t step = 0;
  // Every step goes through here, so that the test seam can make any one of them fail.
  const auto attempt = [&](const auto& operation) {
    std::error_code error;
    if (fail_step_ && fail_step_(step))
      error = std::make_error_code(std::errc::io_error);
    else
      operation(error);
    ++step;
    return error;
  };
  std::vector<std::string> moved;  // new files already in dir_, removed again if a step fails
  const auto fail = [&](const fs::path& file, const std::string& what, const std::error_code& e) {
    std::error_code ignored;
    for (const auto& name : moved) fs::remove(fs::path(dir_) / name, ignored);
    throw InputError(file.string() + ": " + what + " (" + e.message() + ")");
  };
  // The earlier summary.json goes first: until the new one is in, the folder says "incomplete".
  if (const fs::path old = fs::path(dir_) / mark;
      (ec = attempt([&](std::error_code& e) { fs::remove(old, e); })))
    fail(old, "cannot remove the earlier run's summary", ec);
  // Earlier outputs this run does not replace would mix two runs: removed before any move.
  for (const auto& name : run_outputs_) {
    if (name == mark || std::find(written_.begin(), written_.end(), name) != written_.end())
      continue;
    const fs::path old = fs::path(dir_) / name;
    if ((ec = attempt([&](std::error_code& e) { fs::remove(old, e); })))
      fail(old, "cannot remove the earlier run's file", ec);
  }
  std::vector<std::string> order = written_;
  std::stable_partition(order.begin(), order.end(),
                        [&](const std::string& n) { return n != mark; });
  for (const auto& name : order) {
    const fs::path to = fs::path(dir_) / name;
    if ((ec = attempt([&](std::error_code& e) { fs::rename(fs::path(staging_) / name, to, e); })))
      fail(to, "cannot move the new file in", ec);
    moved.push_back(name);
  }
  committed_ = true;
  return written_;
}

}  // namespace ifusim
