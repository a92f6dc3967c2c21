#pragma once
// A run's output folder, filled all at once or not at all.
//
// Files are written into a staging folder beside the output folder (".<name>.partial-<pid>" in
// its parent, on the same file system), never inside it, so a run that fails, or is killed at
// any point (SIGKILL included), leaves no partial file in the output folder. commit() moves the
// files in, replacing an earlier run's, and removes the earlier run's outputs this run did not
// write (a run without pictures leaves no old pictures beside its new cube).
//
// summary.json marks a complete set: commit() removes the earlier run's summary.json before it
// touches any other file and moves the new one in last, so a reader that finds summary.json finds
// the files of the one run that wrote it, whatever step failed or was killed. A step that fails
// removes again the new files already moved in: the folder then holds no file of the failed run
// and no summary.json (the earlier run's files not yet replaced stay, marked incomplete by the
// missing summary). A staging folder left by a killed run (its process gone, or a zombie no one
// has reaped) is removed by the next run into the same folder.
//
// One run at a time: an OutputFolder holds an exclusive flock on ".<name>.lock" in the parent
// while it lives, and a second run into the same folder, from any process, is refused with an
// InputError instead of silently replacing the first's files. The lock file is removed as the
// lock is released (a killed run's is taken over by the next run).
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ifusim {

class OutputFolder {
 public:
  // Throws InputError when another run holds the folder's lock, or the staging folder cannot be
  // made.
  // `run_outputs`: every file name a run may write here (those commit() replaces or removes).
  OutputFolder(std::string dir, std::vector<std::string> run_outputs);
  ~OutputFolder();
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;

  // The path to write output `name` (one of run_outputs) to, in the staging folder.
  std::string path(const std::string& name);
  // Moves the written files into the output folder; returns their names, in writing order.
  std::vector<std::string> commit();

  const std::string& staging_dir() const { return staging_; }

  // Removes the staging folder (and lock file) of every OutputFolder alive in this process, after a
  // commit() under way has finished (its moves are never cut in half); a commit() after this one
  // fails. For a program ending on SIGINT or SIGTERM (cli/app.cpp): it allocates and takes a lock,
  // so it is called from an ordinary thread (one waiting in sigwait), never from a signal handler.
  static void remove_live_staging();

  // Test seam (tests/test_faults.cpp), never set by a run: commit()'s file-system steps (removing
  // the earlier summary.json, removing each earlier output not replaced, moving each new file in)
  // are numbered from 0 in the order they run, and a step for which `fail_step(step)` is true
  // fails as if the file system had refused it (EIO), through the same error path.
  void inject_commit_fault(std::function<bool(std::size_t step)> fail_step) {
    fail_step_ = std::move(fail_step);
  }

 private:
  struct Lock;
  std::unique_ptr<Lock> lock_;  // released after the staging folder is removed
  std::string dir_, staging_;
  std::vector<std::string> run_outputs_, written_;
  bool committed_ = false;
  std::function<bool(std::size_t)> fail_step_;
};

}  // namespace ifusim
