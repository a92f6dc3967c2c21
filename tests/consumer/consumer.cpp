// A tiny user of the installed C++ library: a synthetic galaxy seen by SAMI, run by
// ifusim::run_pipeline on the CPU backend, outputs written into argv[1]. Exits non-zero unless
// the cube is non-empty, finite (but for the spaxels masked outside the aperture, all NaN) and
// holds light.
#include <cmath>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>

#include "io/run_config.h"
#include "pipeline/runner.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    const nlohmann::json document = {
        {"input", {{"synthetic", {{"stars", 2000}, {"gas", 0}, {"seed", 1}}}}},
        {"galaxy", {{"redshift", 0.05}}},
        {"telescope", "SAMI"},
        {"ssp", {{"library", "${IFUSIM_DATA_DIR}/ssp/MILES_BASTI_CH_baseFe"}}},
        {"pipeline", "calc_ifu"},
        {"stages", {{"flux", {{"unit_scale", 1e-17}}}, {"noise", {{"snr", 15}}}}},
        {"devices", {{"backend", "cpu"}, {"count", 1}}},
        {"output", {{"dir", argv[1]}, {"png", false}}},
        {"seed", 7}};
    const ifusim::RunConfig config = ifusim::parse_run_config(document, "");
    ifusim::RunOptions options;
    options.progress = false;
    const ifusim::RunReport report = ifusim::run_pipeline(config, options);

    const ifusim::Cube& cube = report.cube;
    const std::size_t n_wave = static_cast<std::size_t>(cube.shape.n_wave);
    std::size_t masked = 0, bad = 0;
    double total = 0.0;
    for (std::size_t s = 0; s < cube.shape.n_spaxels(); ++s) {
      const float* spectrum = cube.data.data() + s * n_wave;
      std::size_t nan = 0;
      for (std::size_t k = 0; k < n_wave; ++k) {
        if (std::isnan(spectrum[k]))
          ++nan;
        else if (std::isfinite(spectrum[k]))
          total += spectrum[k];
        else
          ++bad;  // infinite
      }
      if (nan == n_wave)
        ++masked;
      else
        bad += nan;  // NaN in a spaxel inside the aperture
    }
    std::printf("cube %d x %d x %d (%zu spaxels masked), %zu files in %s, total %g %s\n",
                cube.shape.nx, cube.shape.ny, cube.shape.n_wave, masked, report.files.size(),
                report.output_dir.c_str(), total, cube.unit.c_str());
    const bool ok = cube.shape.n_voxels() > 0 && cube.data.size() == cube.shape.n_voxels() &&
                    masked < cube.shape.n_spaxels() && bad == 0 && total > 0.0 &&
                    !report.files.empty();
    std::printf("%s\n", ok ? "OK" : "FAILED: an empty, non-finite or dark cube");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
