#pragma once
// The run config: one JSON file describing a run (docs/config.md). Everything is read and
// validated here, before anything runs; errors name the key's path.
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/cosmology.h"
#include "data/device.h"
#include "data/telescope.h"
#include "io/host_galaxy.h"
#include "io/tng/synthetic_galaxy.h"

namespace ifusim {

struct StageConfig {
  std::string name;
  nlohmann::json params;  // the run's "stages.<name>" object, or {}
};

struct RunConfig {
  std::string config_path;  // the file it was read from ("" for an in-memory config)
  nlohmann::json document;  // the whole config after --set overrides (provenance)

  // input: a file (input.file), a synthetic galaxy made in memory (input.synthetic), or a
  // galaxy the caller holds in memory (parse_run_config's `galaxy`)
  std::string input_file;  // absolute, ${IFUSIM_DATA_DIR} expanded; "" when synthetic
  std::optional<tng::SyntheticGalaxySpec> synthetic;
  std::shared_ptr<const HostGalaxy> galaxy;
  std::string input_format;  // "auto", "tng", "swift", "eagle", "gadget" or "rubix"
  // Whether input_file is read as a RUBIX galaxy: input.format "rubix", or "auto" and the file
  // has RUBIX's layout.
  bool input_is_rubix() const;
  std::optional<long long> subhalo_id;
  std::optional<int> snapshot;
  bool drop_nonfinite = false;
  bool read_gas = true;
  // Which particles of a SWIFT, EAGLE or Gadget file (docs/formats.md): input.region (centre
  // and radius, comoving, in the file's Coordinates units), input.particle_ids,
  // input.subfind_group ([GroupNumber, SubGroupNumber]).
  std::optional<std::array<double, 3>> region_centre;
  double region_radius = 0;
  std::vector<long long> particle_ids;
  std::optional<std::array<long long, 2>> subfind_group;
  // Stars streamed through the stages in blocks of this many rows, never all held (0: the
  // galaxy is held at once; docs/streaming.md). Not for a galaxy the caller holds.
  std::size_t stream_block_stars = 0;

  // galaxy
  double redshift = 0.0;  // observed redshift of the galaxy
  nlohmann::json orientation = "face-on";
  double ra_deg = 0.0, dec_deg = 0.0;  // recorded; not used for extinction (no dust map)
  // galaxy.ebv_mw: the Milky Way's E(B-V) towards the galaxy (mag), for the foreground_dust stage;
  // absent: not given (no foreground extinction unless that stage gives its own ebv_mag).
  std::optional<double> ebv_mw_mag;

  // cosmology: "planck2015" (default), "snapshot" (the snapshot header's), or explicit
  std::string cosmology_source = "planck2015";
  Cosmology cosmology;

  Telescope telescope;
  // A spectrograph with several arms (`telescope` given as a list, e.g. ["SAMI", "SAMI-red"]):
  // one cube for each, in the list's order; `telescope` is the first. Empty for one telescope.
  std::vector<Telescope> arms;

  // templates
  std::string ssp_library;
  std::string ssp_format = "auto";
  nlohmann::json ssp_params;  // interpolation, outside_grid

  std::vector<StageConfig> stages;  // in order

  Backend backend = Backend::cpu;
  int n_devices = 1;
  bool oversubscribe_host = false;        // more host devices than threads (devices.oversubscribe)
  std::optional<double> memory_limit_gb;  // per device memory space, instead of what it has

  std::string output_dir;
  bool write_fits = true, write_hdf5 = true, write_png = true;
  std::uint64_t seed = 0;
};

// The reference-data folder: $IFUSIM_DATA_DIR, else ../shared/data beside the project.
std::string data_dir();

// A path as provenance records it: "${IFUSIM_DATA_DIR}/..." where it lies under the data
// folder (so that cubes made on two machines from the same data say the same), else unchanged.
std::string provenance_path(const std::string& path);

// A path as a config gives it: "${IFUSIM_DATA_DIR}/..." in the reference data folder; other
// relative paths relative to the config file's folder (to the working directory when
// config_path is "").
std::string resolve_path(const std::string& value, const std::string& config_path);

// Applies "key.path=value" (value as JSON when it parses, else as a string).
void apply_override(nlohmann::json& document, const std::string& assignment);

// With `galaxy` (validated, validate_and_complete) the run simulates that galaxy: the config's
// `input` section is then ignored but for input.read_gas, and galaxy.redshift defaults to the
// galaxy's own redshift.
RunConfig parse_run_config(const nlohmann::json& document, const std::string& config_path,
                           std::shared_ptr<const HostGalaxy> galaxy = nullptr);
// The config file's JSON (comments allowed) with the --set overrides applied.
nlohmann::json load_config_document(const std::string& path,
                                    const std::vector<std::string>& overrides);
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides,
                          std::shared_ptr<const HostGalaxy> galaxy = nullptr);

}  // namespace ifusim
