#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "io/rubix/rubix_galaxy.h"
#include "io/tng/galaxy_summary.h"
#include "io/tng/tng_reader.h"
#include "pipeline/devices.h"

namespace ifusim::cli {

void add_inspect_command(CLI::App& app, int& exit_code) {
  struct Options {
    std::string path;
    std::optional<long long> subhalo;
    std::optional<int> snapshot;
    bool json = false;
    bool drop_nonfinite = false;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "inspect",
      "Summarise what a run would ingest from a TNG cutout, a TNG snapshot directory or a RUBIX "
      "galaxy file");
  cmd->add_option("FILE", options->path,
                  "TNG subhalo cutout (.hdf5), snapshot directory (with snapdir_NNN/, groups_NNN/, "
                  "offsets_NNN.hdf5) or rubix_galaxy.h5")
      ->required();
  cmd->add_option("--subhalo", options->subhalo, "Subhalo id (required for a snapshot directory)");
  cmd->add_option("--snapshot", options->snapshot,
                  "Snapshot number (required for a snapshot directory)");
  cmd->add_flag("--json", options->json, "Print one JSON object");
  cmd->add_flag("--drop-nonfinite", options->drop_nonfinite,
                "Drop particles with NaN/Inf values instead of failing");
  cmd->callback([options, &exit_code] {
    const auto mesh = make_mesh(Backend::cpu, 1);
    GalaxyData data;
    TngIngestReport report;
    if (is_rubix_galaxy(options->path)) {
      data = read_rubix_galaxy(*mesh, options->path);
      report.layout = "rubix";
      report.center_method = "galaxy/center";
    } else {
      TngReadOptions read;
      read.path = options->path;
      read.snapshot = options->snapshot;
      read.subhalo_id = options->subhalo;
      read.drop_nonfinite = options->drop_nonfinite;
      data = read_tng(*mesh, read, &report);
    }
    const GalaxySummary summary = summarize(data, report);
    if (options->json)
      std::cout << to_json(summary).dump(1) << "\n";
    else
      std::cout << options->path << "\n" << to_table(summary);
    exit_code = 0;
  });
}

}  // namespace ifusim::cli
