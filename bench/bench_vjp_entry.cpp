// The VJP entry point (issue 27, pipeline/runner.h run_pipeline_vjp) against the forward run of
// the same config: the MUSE synthetic example (configs/examples/muse_synthetic.json: MUSE 25 x
// 25 x 3721, MaStar, calc_ifu's stages, the binned method, one cpu device) at --stars held
// stars, no gas. Prints the forward run's seconds (run_pipeline, no file written), the VJP's
// forward and backward halves, and the ratios VJP / forward and backward / forward, the median of
// --reps back-to-back pairs (target: VJP <= 2 x forward, issue 27).
//
// --gas N adds N synthetic gas cells and the emission_lines stage (after stellar_spectra): the
// backward's cost with the gas's lines against without (docs/gradients.md, "Gas: the emission
// lines"); --dust 1 adds the dust stage too (calc_ifu_gas's stages; docs/gradients.md, "Dust").
//
// --smoothing kernel spreads the stars by their kNN kernels (stages.aperture.smoothing): the
// backward then makes stars.position_kpc too (docs/gradients.md, "Stars (binned engine)").
//
// --backend cuda and --telescope MUSE-WFM give the GPU target's run (issue 27: the VJP of 1e8
// stars on MUSE-WFM on one H100; scripts/gpu-check.sh).
//
//   IFUSIM_DATA_DIR=... build/bench/bench_vjp_entry [--stars 1000000] [--gas 0] [--reps 3] [--log
//   warn]
//       [--dust 0|1] [--smoothing none|kernel] [--backend cpu|cuda] [--telescope MUSE]
//       [--config configs/examples/muse_synthetic.json]
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "io/run_config.h"
#include "pipeline/runner.h"

using namespace ifusim;

int main(int argc, char** argv) {
  // --log info shows each stage's own lines (emission_lines: its gradients' seconds).
  spdlog::set_level(spdlog::level::from_str(bench::option(argc, argv, "log", "warn")));
  const std::string stars = bench::option(argc, argv, "stars", "1000000");
  const std::string gas = bench::option(argc, argv, "gas", "0");
  const int reps = std::stoi(bench::option(argc, argv, "reps", "3"));
  const std::string backend = bench::option(argc, argv, "backend", "cpu");
  const std::string telescope = bench::option(argc, argv, "telescope", "MUSE");
  const std::string config =
      bench::option(argc, argv, "config",
                    std::string(IFUSIM_SOURCE_DIR) + "/configs/examples/muse_synthetic.json");
  std::vector<std::string> overrides = {"input.synthetic.stars=" + stars,
                                        "input.synthetic.gas=" + gas, "output.png=false",
                                        "telescope=" + telescope, "devices.backend=" + backend};
  const bool dust = bench::option(argc, argv, "dust", "0") == "1";
  const std::string smoothing = bench::option(argc, argv, "smoothing", "none");
  overrides.push_back("stages.aperture.smoothing=" + smoothing);
  if (std::stod(gas) > 0)
    overrides.push_back(std::string(R"(pipeline=["orient", "aperture", )") +
                        (dust ? R"("dust", )" : "") +
                        R"("stellar_spectra", "emission_lines", "psum", "flux", )"
                        R"("psf", "lsf", "aperture_mask", "noise"])");
  const RunConfig c = load_run_config(config, overrides);
  RunOptions options;
  options.write_outputs = false;
  options.progress = false;
  const Cube first = run_pipeline(c, options).cube;
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> g(first.data.size());
  for (double& v : g) v = normal(rng);
  std::printf(
      "%s %d x %d x %d, %s stars, %s gas cells, calc_ifu%s, smoothing %s, binned, 1 %s device, "
      "%d reps\n",
      telescope.c_str(), first.shape.nx, first.shape.ny, first.shape.n_wave, stars.c_str(),
      gas.c_str(),
      std::stod(gas) > 0 ? (dust ? " + dust + emission_lines" : " + emission_lines") : "",
      smoothing.c_str(), backend.c_str(), reps);
  std::vector<double> forward, vjp, vjp_forward, backward, ratio;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)run_pipeline(c, options);
    forward.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const VjpReport report = run_pipeline_vjp(c, options, g);
    vjp.push_back(report.forward_seconds + report.backward_seconds);
    vjp_forward.push_back(report.forward_seconds);
    backward.push_back(report.backward_seconds);
    ratio.push_back(vjp.back() / forward.back());
    std::printf("  rep %d: forward %.3f s, vjp %.3f s (its forward %.3f s, backward %.3f s)\n", r,
                forward.back(), vjp.back(), vjp_forward.back(), backward.back());
  }
  std::printf("forward run        %8.3f s (median)\n", bench::median(forward));
  std::printf("vjp (fwd + back)   %8.3f s (median): forward half %.3f s, backward %.3f s\n",
              bench::median(vjp), bench::median(vjp_forward), bench::median(backward));
  std::printf("ratio vjp / forward run   %.2f (median of pairs; target <= 2)\n",
              bench::median(ratio));
  std::printf("ratio backward / forward  %.2f\n",
              bench::median(backward) / bench::median(vjp_forward));
  return 0;
}
