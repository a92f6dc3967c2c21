// The backward pass over the cube stages (issue 27, pipeline/vjp.h) against their forward run:
// the cube stages of the MUSE-WFM disc example (flux, the telescope's PSF and LSF, which vary
// with wavelength, aperture_mask's crop, noise) on a cube of its margin-included shape, each
// stage's run() timed, then each adjoint, last first, on a cotangent of the final cube. Prints
// the seconds and the ratio backward / forward.
//
//   build/bench/bench_adjoint [--telescope MUSE-WFM] [--side N] [--psf gaussian|moffat]
//
// --side shrinks the field to N x N spaxels (the band stays whole) where the machine cannot hold
// MUSE-WFM's (its float cube is 1.4 GB, the cotangent in double 2.8 GB).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "data/resolution_curve_json.h"
#include "io/telescope.h"
#include "pipeline/devices.h"
#include "pipeline/registry.h"
#include "pipeline/vjp.h"
#include "stages/common/spaxel_grid.h"

using namespace ifusim;

int main(int argc, char** argv) {
  const std::string telescope_name = bench::option(argc, argv, "telescope", "MUSE-WFM");
  const std::string psf_shape = bench::option(argc, argv, "psf", "gaussian");
  const Telescope telescope = load_telescope_preset(telescope_name, "telescope");
  const int side =
      std::stoi(bench::option(argc, argv, "side", std::to_string(telescope.n_spaxels_side())));

  Observation obs;
  obs.redshift = 0.03;
  obs.luminosity_distance_mpc = obs.cosmology.luminosity_distance_mpc(obs.redshift);
  obs.kpc_per_arcsec = obs.cosmology.kpc_per_arcsec(obs.redshift);
  obs.telescope = telescope;
  obs.axes.spaxel_arcsec = telescope.spaxel_arcsec;
  obs.axes.wave_start_angstrom = telescope.wave_start_angstrom;
  obs.axes.wave_step_angstrom = telescope.wave_step_angstrom;
  obs.axes.wave_log10_step = telescope.wave_log10_step;
  obs.telescope_lsf_fwhm_angstrom = telescope.lsf_fwhm_angstrom;
  obs.template_fwhm_angstrom = 2.0;  // rest frame, finer than MUSE's LSF at every wavelength
  obs.seed = 42;

  nlohmann::json psf = {{"shape", psf_shape},
                        {"fwhm_arcsec", to_json(telescope.psf_fwhm_arcsec, "fwhm_arcsec")}};
  if (psf_shape == "moffat") psf["fwhm_arcsec"] = 0.7;  // the showcase example's
  const nlohmann::json config = {
      {{"stage", "flux"}, {"params", {{"unit_scale", 1e-20}}}},
      {{"stage", "psf"}, {"params", psf}},
      {{"stage", "lsf"}},
      {{"stage", "aperture_mask"}},
      {{"stage", "noise"}, {"params", {{"snr", 20}, {"per", "angstrom"}}}}};
  auto stages = make_stages(config, "stages", {"cube", "spaxels"});
  CubeMargin margin;
  for (const auto& s : stages) {
    const CubeMargin m = s->margin(obs);
    margin.spaxels += m.spaxels;
    margin.wavelengths += m.wavelengths;
  }
  obs.margin = margin;
  const CubeShape shape{side + 2 * margin.spaxels, side + 2 * margin.spaxels,
                        telescope.n_wave() + 2 * margin.wavelengths};

  auto mesh = make_mesh(Backend::cpu, 1);
  RunState state(*mesh);
  state.observation = obs;
  SpaxelGrid grid;
  grid.n_side = shape.nx;
  grid.spaxel_size_kpc = telescope.spaxel_arcsec * obs.kpc_per_arcsec;
  state.products.put("spaxels", grid);
  Cube cube;
  cube.shape = shape;
  cube.unit = "Lsun/Angstrom";
  cube.data.resize(shape.n_voxels());
  {
    std::mt19937_64 rng(1);
    std::uniform_real_distribution<float> u(1e3f, 1e4f);
    for (float& v : cube.data) v = u(rng);
  }
  state.cube = std::move(cube);
  std::printf(
      "%s, %d x %d spaxels (margin %d spaxels, %d wavelengths): %d x %d x %d voxels, %s PSF\n",
      telescope_name.c_str(), side, side, margin.spaxels, margin.wavelengths, shape.nx, shape.ny,
      shape.n_wave, psf_shape.c_str());

  std::vector<double> forward(stages.size()), backward(stages.size());
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    stages[i]->run(state);
    forward[i] = bench::seconds_since(t0);
  }
  CubeCotangent cotangent{state.cube->shape, std::vector<double>(state.cube->shape.n_voxels())};
  {
    std::mt19937_64 rng(2);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (double& v : cotangent.values_to_change()) v = u(rng);
  }
  // Each adjoint timed, last stage first: what cube_stages_vjp does, stage by stage.
  for (std::size_t i = stages.size(); i-- > 0;) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!stages[i]->adjoint(state, cotangent)) return 1;
    backward[i] = bench::seconds_since(t0);
  }
  if (!(cotangent.shape == shape)) return 1;
  double checksum = 0.0;
  for (double v : cotangent.values()) checksum += v;
  cotangent = {};  // its memory back before the tangent's
  // The same maps forward in double (tangent): what part of the adjoint's cost is the double.
  std::vector<double> tangent_s(stages.size());
  {
    CubeCotangent t{shape, std::vector<double>(shape.n_voxels(), 1.0)};
    for (std::size_t i = 0; i < stages.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if (!stages[i]->tangent(state, t)) return 1;
      tangent_s[i] = bench::seconds_since(t0);
    }
  }
  double total_forward = 0.0, total_backward = 0.0;
  std::printf("%-14s %10s %10s %8s %10s\n", "stage", "forward s", "adjoint s", "ratio",
              "tangent s");
  for (std::size_t i = 0; i < stages.size(); ++i) {
    std::printf("%-14s %10.3f %10.3f %8.2f %10.3f\n", stages[i]->name().c_str(), forward[i],
                backward[i], backward[i] / forward[i], tangent_s[i]);
    total_forward += forward[i];
    total_backward += backward[i];
  }
  std::printf("%-14s %10.3f %10.3f %8.2f   (backward / forward; checksum %.6g)\n", "total",
              total_forward, total_backward, total_backward / total_forward, checksum);
  return 0;
}
