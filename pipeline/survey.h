#pragma once
// `ifusim survey`: many cubes from one snapshot (docs/survey.md). The config is a run config
// whose `survey` section names a chunked TNG snapshot, a selection of its subhalos and the
// orientations; every (subhalo, orientation) is one run of the rest of the config, written to
// DIR/<subhalo_id>/<orientation>/, and a row of DIR/catalog.csv.
//
// The survey resumes: a row is written (the whole catalog replaced atomically) only once its run
// is complete, with a hash of the run's resolved config; a rerun skips the rows done with the same
// hash whose cube is there. A subhalo whose data is bad is a `failed` row with the error, and the
// survey goes on. Tasks run largest galaxy first.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pipeline/runner.h"

namespace ifusim {

struct SurveyTask {
  long long subhalo_id = 0;
  std::size_t star_rows = 0;    // the catalog's (wind cells included), for the order
  std::size_t gas_rows = 0;     // the catalog's
  std::string orientation;      // its name: "face-on", "edge-on", "euler_30_0_0", "random_03"
  nlohmann::json run_document;  // the run config of this cube
  std::string config_hash;      // of run_document (16 hex digits)
};

struct SurveyPlan {
  std::string config_path;  // relative paths in the run configs are relative to it
  std::string snapshot_dir;
  int snapshot = 0;
  std::vector<SurveyTask> tasks;  // largest galaxy first, then orientation order
};

// The survey's tasks from its config document (after --set overrides). Throws ConfigError naming
// the survey key on a bad section or a selection that matches nothing, and InputError naming the
// file when the snapshot has no group catalog or offsets. Every task's run config is parsed, so
// a bad run setting stops the survey before any cube is made.
SurveyPlan plan_survey(const nlohmann::json& document, const std::string& config_path);

// What the survey selects, before any cube (`ifusim survey --plan`): the subhalos, orientations
// and cubes; the catalog's star and gas rows, in all, the largest and the median subhalo; and the
// rows the cubes read in all (each cube reads its subhalo). For sizing a survey: a cube's cost is
// fixed + per_star x n_stars (docs/scaling.md).
std::string describe_survey(const SurveyPlan& plan);

struct SurveyReport {
  std::string catalog_path;
  std::size_t done = 0, failed = 0, skipped = 0;  // skipped: done by an earlier run
};

// Runs the tasks not yet done into out_dir (RunOptions::output_dir is ignored). The shared run
// settings are checked first (a ConfigError then stops the survey); an error in a task fails
// its row only.
SurveyReport run_survey(const SurveyPlan& plan, const std::string& out_dir,
                        const RunOptions& options);

}  // namespace ifusim
