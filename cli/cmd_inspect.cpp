#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "io/rubix/rubix_galaxy.h"
#include "io/tng/galaxy_summary.h"
#include "io/tng/tng_fields.h"
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
    std::string format = "auto";
    std::vector<double> region;  // x y z radius
    std::vector<long long> particle_ids;
    std::vector<long long> subfind_group;
  };
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "inspect",
      "Summarise what a run would ingest from a TNG cutout or snapshot directory, a SWIFT, EAGLE "
      "or Gadget-4/AREPO/GIZMO snapshot file, or a RUBIX galaxy file");
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
  cmd->add_option("--format", options->format,
                  "auto (from the file), tng, swift, eagle, gadget or rubix (input.format)")
      ->check(CLI::IsMember({"auto", "tng", "swift", "eagle", "gadget", "rubix"}));
  cmd->add_option("--region", options->region,
                  "X Y Z RADIUS: the particles within RADIUS of (X, Y, Z), comoving, in the file's "
                  "Coordinates units (input.region)")
      ->expected(4);
  cmd->add_option("--particle-ids", options->particle_ids,
                  "The particles of these ParticleIDs (input.particle_ids)");
  cmd->add_option("--subfind-group", options->subfind_group,
                  "GROUP SUBGROUP: the particles of this SUBFIND GroupNumber and SubGroupNumber "
                  "(EAGLE; input.subfind_group)")
      ->expected(2);
  cmd->callback([options, &exit_code] {
    const auto mesh = make_mesh(Backend::cpu, 1);
    GalaxyData data;
    TngIngestReport report;
    if (options->format == "rubix" ||
        (options->format == "auto" && is_rubix_galaxy(options->path))) {
      data = read_rubix_galaxy(*mesh, options->path);
      report.layout = "rubix";
      report.format = "rubix";
      report.center_method = "galaxy/center";
    } else {
      TngReadOptions read;
      read.path = options->path;
      read.snapshot = options->snapshot;
      read.subhalo_id = options->subhalo;
      read.drop_nonfinite = options->drop_nonfinite;
      read.format = options->format == "auto" ? &detect_snapshot_format(options->path)
                                              : tng::format_named(options->format);
      if (!options->region.empty()) {
        read.region_centre = {options->region[0], options->region[1], options->region[2]};
        read.region_radius = options->region[3];
      }
      read.particle_ids = options->particle_ids;
      if (!options->subfind_group.empty())
        read.subfind_group = {options->subfind_group[0], options->subfind_group[1]};
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
