#pragma once
// A run's output folder, filled all at once or not at all.
//
// Files are written into a staging folder beside the output folder (".<name>.partial-<pid>" in
// its parent, on the same file system), never inside it, so a run that fails, or is killed at
// any point (SIGKILL included), leaves no partial file in the output folder. commit() moves the
// files in, replacing an earlier run's, and removes the earlier run's outputs this run did not
// write (a run without pictures leaves no old pictures beside its new cube). summary.json, when
// written, is moved last: its presence marks a complete set. A staging folder left by a killed
// run (its process gone, or a zombie no one has reaped) is removed by the next run into the same
// folder.
#include <string>
#include <vector>

namespace ifusim {

class OutputFolder {
 public:
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

 private:
  std::string dir_, staging_;
  std::vector<std::string> run_outputs_, written_;
  bool committed_ = false;
};

}  // namespace ifusim
