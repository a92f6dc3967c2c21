// HDF5 cubes: the layout is documented in docs/outputs.md. Arrays are (n_wave, ny, nx), C order,
// i.e. the FITS cube's axes reversed, so h5py/numpy and astropy see the same array.
#include <cmath>
#include <cstdint>
#include <variant>

#include "core/config_error.h"
#include "data/host_memory.h"
#include "io/cube/cube_io.h"
#include "io/cube/plane_blocks.h"
#include "io/hdf5.h"
#include "io/temp_file.h"

namespace ifusim {
namespace {

constexpr const char* kFormat = "ifusim cube";
constexpr int kFormatVersion = 1;

// Spaxel-major floats -> (n_wave, ny, nx), written a block of wavelength planes (~64 MB) at a
// time into a contiguous dataset (the layout of one write of the whole transposed cube; the
// values are bitwise those), without a transposed copy of the cube in memory (1.3 GB of float on
// MUSE-WFM).
void write_voxels(const h5::File& f, const std::string& dataset, const CubeShape& s,
                  const std::vector<float>& values, const std::vector<hsize_t>& dims) {
  using T = float;  // the cube's own type (data/datacube.h): stored as it is held
  f.create<T>(dataset, dims, false);
  detail::for_each_plane_block<T>(
      s, values, (std::size_t(64) << 20) / sizeof(T), [&](int k0, int k1, T* block) {
        f.write_rows<T>(dataset, static_cast<hsize_t>(k0), block, static_cast<hsize_t>(k1 - k0));
      });
}

// Read as float32 (HDF5 converts a float64 dataset of an older file).
std::vector<float> from_wave_major(const CubeShape& s, const std::vector<float>& values) {
  std::vector<float> out = large_vector<float>(s.n_voxels());
  const std::size_t n_spaxels = s.n_spaxels();
  for (std::size_t sp = 0; sp < n_spaxels; ++sp)
    for (int k = 0; k < s.n_wave; ++k)
      out[sp * s.n_wave + k] = values[static_cast<std::size_t>(k) * n_spaxels + sp];
  return out;
}

// FITS-style WCS of the array (axis 1 = x = the last HDF5 dimension), for readers that know it:
// the celestial axes, and the wavelength axis for a cube (naxis 3).
void write_wcs_attributes(const h5::Location& f, const Cube& cube, const std::string& dataset,
                          int naxis) {
  const auto& a = cube.axes;
  f.set_string_attribute("CTYPE1", "RA---TAN", dataset);
  f.set_string_attribute("CTYPE2", "DEC--TAN", dataset);
  f.set_string_attribute("CUNIT1", "deg", dataset);
  f.set_string_attribute("CUNIT2", "deg", dataset);
  f.set_attribute<double>("CRPIX1", (cube.shape.nx + 1) / 2.0, dataset);
  f.set_attribute<double>("CRPIX2", (cube.shape.ny + 1) / 2.0, dataset);
  f.set_attribute<double>("CRVAL1", a.ra_deg, dataset);
  f.set_attribute<double>("CRVAL2", a.dec_deg, dataset);
  f.set_attribute<double>("CDELT1", -a.spaxel_arcsec / 3600.0, dataset);
  f.set_attribute<double>("CDELT2", a.spaxel_arcsec / 3600.0, dataset);
  if (naxis < 3) return;
  // The FITS writer's wavelength cards (a logarithmic axis as WAVE-LOG / AWAV-LOG).
  for (const auto& card : cube_wcs_cards(cube, 3)) {
    if (card.key.back() != '3') continue;
    if (const auto* text = std::get_if<std::string>(&card.value))
      f.set_string_attribute(card.key, *text, dataset);
    else
      f.set_attribute<double>(card.key, std::get<double>(card.value), dataset);
  }
}

std::string unit_attribute(const h5::Location& f, const std::string& dataset) {
  return f.has_attribute("unit", dataset) ? f.string_attribute("unit", dataset) : "";
}

}  // namespace

void write_cube_hdf5(const Cube& cube, const std::string& path) {
  validate_cube(cube, path);
  detail::TempFile temp(path);
  {
    h5::File f(temp.path(), h5::File::Mode::truncate);
    const auto& s = cube.shape;
    const std::vector<hsize_t> dims = {static_cast<hsize_t>(s.n_wave), static_cast<hsize_t>(s.ny),
                                       static_cast<hsize_t>(s.nx)};
    f.set_string_attribute("format", kFormat);
    f.set_attribute<std::int32_t>("format_version", kFormatVersion);
    f.set_string_attribute("ifusim_version", IFUSIM_VERSION);
    f.set_attribute<double>("spaxel_arcsec", cube.axes.spaxel_arcsec);
    f.set_attribute<double>("wave_start_angstrom", cube.axes.wave_start_angstrom);
    f.set_attribute<double>("wave_step_angstrom", cube.axes.wave_step_angstrom);
    // Only on a logarithmic grid (linear files stay as they were).
    if (cube.axes.is_log()) f.set_attribute<double>("wave_log10_step", cube.axes.wave_log10_step);
    f.set_string_attribute("wavelength_medium", cube.axes.wavelength_medium);
    f.set_attribute<double>("ra_deg", cube.axes.ra_deg);
    f.set_attribute<double>("dec_deg", cube.axes.dec_deg);

    write_voxels(f, "data", s, cube.data, dims);
    f.set_string_attribute("unit", cube.unit, "data");
    write_wcs_attributes(f, cube, "data", 3);
    if (!cube.variance.empty()) {
      write_voxels(f, "variance", s, cube.variance, dims);
      f.set_string_attribute("unit", squared_unit(cube.unit), "variance");
      write_wcs_attributes(f, cube, "variance", 3);
    }
    std::vector<double> wavelength(static_cast<std::size_t>(s.n_wave));
    for (int k = 0; k < s.n_wave; ++k) wavelength[k] = cube.axes.wavelength_angstrom(k);
    f.write<double>("wavelength_angstrom", wavelength, {static_cast<hsize_t>(s.n_wave)});
    f.set_string_attribute("medium", cube.axes.wavelength_medium, "wavelength_angstrom");

    if (!cube.maps.empty()) {
      const auto maps = f.create_group_ordered("maps");
      const std::vector<hsize_t> map_dims = {static_cast<hsize_t>(s.ny),
                                             static_cast<hsize_t>(s.nx)};
      for (const auto& [name, map] : cube.maps) {
        if (fits_in_float32(map.values))
          maps.write<float>(name, std::vector<float>(map.values.begin(), map.values.end()),
                            map_dims);
        else
          maps.write<double>(name, map.values, map_dims);
        maps.set_string_attribute("unit", map.unit, name);
        maps.set_string_attribute("description", map.description, name);
        write_wcs_attributes(maps, cube, name, 2);
      }
    }

    // The spatial correlation matrices (fibre-fed IFUs), as the FITS file's binary tables: one
    // group each under /correlations, by EXTNAME, with the same columns and keywords.
    if (!cube.correlations.empty()) {
      const auto correlations = f.create_group_ordered("correlations");
      for (const auto& [name, c] : cube.correlations) {
        const auto g = correlations.create_group_ordered(name);
        const std::vector<hsize_t> rows = {static_cast<hsize_t>(c.rho.size())};
        g.write<std::int32_t>("INDXI_C1", c.i_x, rows);
        g.write<std::int32_t>("INDXI_C2", c.i_y, rows);
        g.write<std::int32_t>("INDXJ_C1", c.j_x, rows);
        g.write<std::int32_t>("INDXJ_C2", c.j_y, rows);
        g.write<double>("RHOIJ", c.rho, rows);
        g.set_attribute<double>("BBWAVE", c.wavelength_angstrom);
        g.set_attribute<std::int32_t>("BBINDEX", c.plane);
        g.set_attribute<std::int64_t>("n_spaxels", static_cast<std::int64_t>(s.n_spaxels()));
      }
    }

    const auto prov = f.create_group_ordered("provenance");
    for (const auto& [key, value] : cube.provenance) prov.set_string_attribute(key, value);
    f.close();  // before the rename, reporting a full disk
  }
  temp.commit();
}

Cube read_cube_hdf5(const std::string& path) {
  h5::File f(path);
  if (!f.has_attribute("format") || f.string_attribute("format") != kFormat)
    throw InputError(path + ": attribute \"format\" of / should be \"" + kFormat +
                     "\" (not a cube written by ifusim?)");
  const auto version = f.attribute<std::int32_t>("format_version");
  if (version != kFormatVersion)
    throw InputError(path + ": format_version " + std::to_string(version) + ", this ifusim reads " +
                     std::to_string(kFormatVersion));
  Cube cube;
  const auto dims = f.shape("data");
  if (dims.size() != 3)
    throw InputError(f.describe("data") + ": expected 3 dimensions (n_wave, ny, nx), has " +
                     std::to_string(dims.size()));
  cube.shape =
      CubeShape{static_cast<int>(dims[2]), static_cast<int>(dims[1]), static_cast<int>(dims[0])};
  cube.axes.spaxel_arcsec = f.attribute<double>("spaxel_arcsec");
  cube.axes.wave_start_angstrom = f.attribute<double>("wave_start_angstrom");
  cube.axes.wave_step_angstrom = f.attribute<double>("wave_step_angstrom");
  if (f.has_attribute("wave_log10_step"))
    cube.axes.wave_log10_step = f.attribute<double>("wave_log10_step");
  cube.axes.wavelength_medium = f.string_attribute("wavelength_medium");
  cube.axes.ra_deg = f.attribute<double>("ra_deg");
  cube.axes.dec_deg = f.attribute<double>("dec_deg");
  cube.unit = unit_attribute(f, "data");
  cube.data = from_wave_major(cube.shape, f.read<float>("data"));
  if (f.exists("variance")) {
    if (f.shape("variance") != dims)
      throw InputError(f.describe("variance") + ": expected the shape of /data");
    cube.variance = from_wave_major(cube.shape, f.read<float>("variance"));
  }
  if (f.exists("maps")) {
    const auto maps = f.group("maps");
    for (const auto& name : maps.member_names()) {
      if (maps.shape(name) != std::vector<hsize_t>{static_cast<hsize_t>(cube.shape.ny),
                                                   static_cast<hsize_t>(cube.shape.nx)})
        throw InputError(maps.describe(name) + ": expected a (ny, nx) map of the cube's field");
      SkyMap& map = cube.maps[name];
      map.unit = unit_attribute(maps, name);
      if (maps.has_attribute("description", name))
        map.description = maps.string_attribute("description", name);
      map.values = maps.read<double>(name);
    }
  }
  if (f.exists("provenance")) {
    const auto prov = f.group("provenance");
    for (const auto& key : prov.attribute_names())
      cube.provenance.emplace_back(key, prov.string_attribute(key));
  }
  try {
    validate_cube(cube, path);
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
  return cube;
}

}  // namespace ifusim
