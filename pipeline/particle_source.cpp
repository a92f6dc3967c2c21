#include "pipeline/particle_source.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <functional>

#include "core/config_error.h"
#include "io/host_galaxy.h"
#include "io/rubix/rubix_galaxy.h"
#include "io/star_stream.h"
#include "io/tng/synthetic_source.h"
#include "io/tng/tng_fields.h"
#include "io/tng/tng_reader.h"

namespace ifusim {
namespace {

class HeldSource final : public ParticleSource {
 public:
  HeldSource(std::function<GalaxyData(const Mesh&)> read, std::string what, bool read_gas)
      : ParticleSource(read_gas), read_(std::move(read)), what_(std::move(what)) {}
  GalaxyData open(const Mesh& mesh) override {
    spdlog::info("{}", what_);
    GalaxyData data = read_(mesh);
    data.star_bounds = measure_star_bounds(mesh, data.stars);
    input_ = StreamedInput::of(data.stars);
    return data;
  }
  bool resident() const override { return true; }
  StreamedInput input() const override { return input_; }
  std::size_t n_star_blocks() const override { return 1; }
  // The held galaxy is the run's one block, in the state open() returned.
  Stars read_stars(const Mesh&, std::size_t) const override { held_only(); }
  Gas read_gas(const Mesh&) const override { held_only(); }
  Stars empty_block(const Mesh&) const override { held_only(); }

 private:
  [[noreturn]] static void held_only() {
    throw std::logic_error("a held galaxy is one resident block: nothing to read block by block");
  }
  std::function<GalaxyData(const Mesh&)> read_;
  std::string what_;  // the log line of the reading
  StreamedInput input_;
};

class StreamedSource final : public ParticleSource {
 public:
  StreamedSource(std::unique_ptr<StarStream> stream, std::size_t block_rows, std::string what,
                 bool read_gas)
      : ParticleSource(read_gas),
        stream_(std::move(stream)),
        block_rows_(block_rows),
        what_(std::move(what)) {}
  GalaxyData open(const Mesh& mesh) override {
    spdlog::info("{}", what_);
    spdlog::info("streaming the stars: {} rows in {} blocks of up to {}", stream_->n_rows(),
                 n_star_blocks(), block_rows_);
    return stream_->first_pass(mesh, block_rows_);
  }
  bool resident() const override { return false; }
  StreamedInput input() const override { return {stream_->optional_star_fields()}; }
  std::size_t n_star_blocks() const override {
    return (stream_->n_rows() + block_rows_ - 1) / block_rows_;
  }
  Stars read_stars(const Mesh& mesh, std::size_t block) const override {
    const std::size_t first = block * block_rows_;
    return stream_->read(mesh, first, std::min(block_rows_, stream_->n_rows() - first));
  }
  Gas read_gas(const Mesh& mesh) const override {
    return reads_gas() ? stream_->read_gas(mesh) : Gas{};
  }
  Stars empty_block(const Mesh& mesh) const override { return stream_->empty_block(mesh); }

 private:
  std::unique_ptr<StarStream> stream_;
  std::size_t block_rows_;
  std::string what_;
};

}  // namespace

TngReadOptions snapshot_read_options(const RunConfig& c, bool read_gas) {
  TngReadOptions options;
  options.path = c.input_file;
  options.snapshot = c.snapshot;
  options.subhalo_id = c.subhalo_id;
  options.drop_nonfinite = c.drop_nonfinite;
  options.read_gas = read_gas;
  options.format = c.input_format == "auto" ? &detect_snapshot_format(c.input_file)
                                            : tng::format_named(c.input_format);
  options.region_centre = c.region_centre;
  options.region_radius = c.region_radius;
  options.particle_ids = c.particle_ids;
  options.subfind_group = c.subfind_group;
  return options;
}

std::unique_ptr<ParticleSource> open_particle_source(const RunConfig& c, const Mesh& mesh,
                                                     bool read_gas) {
  const bool streamed = c.stream_block_stars > 0 || mesh.spans_processes();
  // Every input, held (read_all) or streamed (stream).
  std::function<GalaxyData(const Mesh&)> read_all;
  std::function<std::unique_ptr<StarStream>()> stream;
  std::string what;  // logged when the source is opened
  if (c.galaxy) {
    if (streamed)
      throw ConfigError(
          "input: a galaxy given in memory is held at once: it cannot be streamed or shared "
          "among processes");
    what = fmt::format("the galaxy given: {} stars, {} gas cells ({})", c.galaxy->n_stars(),
                       read_gas ? c.galaxy->n_gas() : 0, c.galaxy->source);
    read_all = [&c, read_gas](const Mesh& m) { return put_host_galaxy(m, *c.galaxy, read_gas); };
  } else if (c.synthetic) {
    const tng::SyntheticGalaxySpec& s = *c.synthetic;
    what = fmt::format("{} a synthetic galaxy in memory: {} stars, {} gas cells, seed {}, z = {}",
                       streamed ? "streaming" : "generating", s.n_stars, read_gas ? s.n_gas : 0,
                       s.seed, s.redshift);
    read_all = [s, read_gas](const Mesh& m) { return tng::make_synthetic_galaxy(m, s, read_gas); };
    stream = [s] { return std::make_unique<tng::SyntheticStarStream>(s); };
  } else if (c.input_is_rubix()) {
    what = fmt::format("{} RUBIX galaxy {}", streamed ? "streaming" : "reading", c.input_file);
    read_all = [&c](const Mesh& m) { return read_rubix_galaxy(m, c.input_file); };
    stream = [&c] { return std::make_unique<RubixStarStream>(c.input_file); };
  } else {
    const TngReadOptions options = snapshot_read_options(c, read_gas);
    what = fmt::format("{} {} {} {}", streamed ? "streaming" : "reading", options.format->title,
                       std::filesystem::is_directory(c.input_file)
                           ? "snapshot"
                           : (options.format == &tng::tng_format() ? "cutout" : "file"),
                       c.input_file);
    read_all = [options](const Mesh& m) {
      TngIngestReport report;
      GalaxyData data = read_tng(m, options, &report);
      spdlog::info("{} stars ({} wind cells dropped), {} gas cells; centre by {}", report.n_stars,
                   report.n_wind_dropped, report.n_gas, report.center_method);
      return data;
    };
    stream = [options] { return std::make_unique<TngStarStream>(options); };
  }
  if (!streamed) return std::make_unique<HeldSource>(std::move(read_all), what, read_gas);
  std::unique_ptr<StarStream> star_stream = stream();
  // Blocks of input.stream_block_stars rows, or across processes without it one per process.
  const auto processes = static_cast<std::size_t>(mesh.process_count());
  const std::size_t block_rows =
      c.stream_block_stars > 0
          ? c.stream_block_stars
          : std::max<std::size_t>(1, (star_stream->n_rows() + processes - 1) / processes);
  return std::make_unique<StreamedSource>(std::move(star_stream), block_rows, what, read_gas);
}

}  // namespace ifusim
