#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "io/ssp/ssp_hdf5.h"
#include "io/ssp/ssp_library.h"
#include "io/telescope.h"

namespace ifusim::cli {

namespace {

// "2.51 Angstrom FWHM", or the range and the table of a curve.
std::string describe_resolution(const ifusim::ResolutionCurve& r) {
  std::ostringstream os;
  if (r.constant()) {
    os << r.fwhm.front() << " Angstrom FWHM";
    return os.str();
  }
  os << r.min() << " to " << r.max() << " Angstrom FWHM over rest wavelength:";
  for (std::size_t i = 0; i < r.fwhm.size(); ++i)
    os << " " << r.wavelength_angstrom[i] << ": " << r.fwhm[i]
       << (i + 1 < r.fwhm.size() ? "," : "");
  return os.str();
}

std::string join(const std::vector<double>& v) {
  std::ostringstream os;
  os << std::setprecision(6);
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? " " : "") << v[i];
  return os.str();
}

void print_info(const SspGrid& g, bool json) {
  const auto& w = g.wavelength_angstrom;
  const double step = (w.back() - w.front()) / static_cast<double>(w.size() - 1);
  if (json) {
    nlohmann::json j;
    j["name"] = g.name;
    j["source"] = g.source;
    j["n_age"] = g.n_age();
    j["n_metallicity"] = g.n_metallicity();
    j["n_wave"] = g.n_wave();
    j["age_gyr"] = g.age_gyr;
    j["metallicity"] = g.metallicity;
    j["wavelength_min_angstrom"] = w.front();
    j["wavelength_max_angstrom"] = w.back();
    j["wavelength_step_angstrom"] = step;
    j["resolution_fwhm_angstrom"] = to_json(g.resolution_fwhm_angstrom, "fwhm_angstrom");
    j["z_solar"] = g.z_solar;
    j["wavelength_medium"] = g.wavelength_medium;
    j["flux_unit"] = kSspFluxUnit;
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << "name:          " << g.name << "\n"
            << "source:        " << g.source << "\n"
            << "grid:          " << g.n_age() << " ages x " << g.n_metallicity()
            << " metallicities x " << g.n_wave() << " wavelengths\n"
            << "age_gyr:       " << join(g.age_gyr) << "\n"
            << "metallicity Z: " << join(g.metallicity) << "\n"
            << std::setprecision(10) << "wavelength:    " << w.front() << " .. " << w.back()
            << " Angstrom (" << g.wavelength_medium << "), mean step " << step << " Angstrom\n"
            << "resolution:    " << describe_resolution(g.resolution_fwhm_angstrom) << "\n"
            << "z_solar:       " << g.z_solar << "\n"
            << "flux unit:     " << kSspFluxUnit << " (initial mass)\n";
}

}  // namespace

void add_templates_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("templates", "SSP template libraries: convert and inspect");
  cmd->require_subcommand(1);

  struct ConvertOptions {
    std::string input, output, format = "auto";
  };
  auto convert = std::make_shared<ConvertOptions>();
  auto* conv = cmd->add_subcommand(
      "convert", "Convert a MILES directory, pyPipe3D FITS or HDF5 grid to the HDF5 layout");
  conv->add_option("input", convert->input, "Library: directory, .fits(.gz) or .h5")->required();
  conv->add_option("output", convert->output, "Output HDF5 file (docs/ssp_format.md)")->required();
  conv->add_option("--format", convert->format, "Input format")
      ->check(CLI::IsMember({"auto", "miles", "pypipe3d", "hdf5"}));
  conv->callback([convert, &exit_code] {
    const SspGrid grid = load_ssp_library(convert->input, convert->format);
    write_ssp_hdf5(grid, convert->output);
    std::cout << "wrote " << convert->output << ": " << grid.n_age() << " ages x "
              << grid.n_metallicity() << " metallicities x " << grid.n_wave() << " wavelengths\n";
    exit_code = 0;
  });

  struct InfoOptions {
    std::string path, format = "auto";
    bool json = false;
  };
  auto info = std::make_shared<InfoOptions>();
  auto* inf = cmd->add_subcommand("info", "Print an SSP library's grid");
  inf->add_option("path", info->path, "Library: directory, .fits(.gz) or .h5")->required();
  inf->add_option("--format", info->format, "Input format")
      ->check(CLI::IsMember({"auto", "miles", "pypipe3d", "hdf5"}));
  inf->add_flag("--json", info->json, "Print JSON");
  inf->callback([info, &exit_code] {
    print_info(load_ssp_library(info->path, info->format), info->json);
    exit_code = 0;
  });
}

}  // namespace ifusim::cli
