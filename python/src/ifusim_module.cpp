// ifusim._core: the Python package's bridge to the same runner, stages and readers as the CLI
// (pybind11). The package's public API is python/ifusim/__init__.py; this module stays thin:
// conversions, the GIL, Ctrl-C and exception types. Arrays handed to Python are views of the
// C++ objects' own buffers (their base is the owning object), never copies.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "core/json_params.h"
#include "data/runtime.h"
#include "io/cube/cube_compare.h"
#include "io/cube/cube_io.h"
#include "io/host_galaxy.h"
#include "io/rubix/rubix_galaxy.h"
#include "io/run_config.h"
#include "io/telescope.h"
#include "io/tng/stellar_centre.h"
#include "io/tng/tng_fields.h"
#include "io/tng/tng_reader.h"
#include "pipeline/devices.h"
#include "pipeline/plan.h"
#include "pipeline/runner.h"

namespace py = pybind11;
using namespace ifusim;

namespace {

// A view of `values` (spaxel-major: (ny, nx, n_wave) in C order) as (n_wave, ny, nx), the axis
// order astropy gives a FITS cube; `owner` keeps the buffer alive. float32, as the cube holds
// its voxels (data/datacube.h) and the FITS file stores them.
py::array cube_view(const Cube& cube, std::vector<float>& values, py::handle owner) {
  const py::ssize_t nx = cube.shape.nx, ny = cube.shape.ny, n_wave = cube.shape.n_wave;
  const py::ssize_t item = sizeof(float);
  return py::array_t<float>({n_wave, ny, nx}, {item, nx * n_wave * item, n_wave * item},
                            values.data(), owner);
}

// A host field (rows x components, row-major) as an (N,) or (N, k) float32 view. Strides are
// given, not left to pybind11: before 2.12 (Debian's 2.10) it derives them from the item size in
// numpy 1's descriptor layout, which numpy 2 changed (1-D views then read the wrong elements).
py::array field_view(HostField& field, py::handle owner) {
  const auto rows = static_cast<py::ssize_t>(field.rows);
  const auto item = static_cast<py::ssize_t>(sizeof(float));
  if (field.components == 1) return py::array_t<float>({rows}, {item}, field.values.data(), owner);
  const auto k = static_cast<py::ssize_t>(field.components);
  return py::array_t<float>({rows, k}, {k * item, item}, field.values.data(), owner);
}

// Python arrays or lists (floats or integers, shape (N,) or (N, k)) to host fields, named
// "set.name" in errors; the table's checks follow in validate_and_complete.
std::map<std::string, HostField> host_fields(const py::dict& arrays, const std::string& set) {
  std::map<std::string, HostField> out;
  for (const auto& [key, value] : arrays) {
    const std::string name = py::str(key);
    const std::string where = set + "." + name;
    const py::array array = py::array::ensure(value);
    if (!array) throw InputError(where + ": expected an array of numbers");
    // Floats and integers (masses given as int64, lists of ints), converted to float32 as
    // every field is held; booleans, strings, complex or object arrays are refused.
    const char kind = array.dtype().kind();
    if (kind != 'f' && kind != 'i' && kind != 'u')
      throw InputError(where + ": dtype " +
                       py::str(static_cast<const py::handle&>(array.dtype())).cast<std::string>() +
                       ", expected an array of real numbers (floats or integers)");
    if (array.ndim() < 1 || array.ndim() > 2)
      throw InputError(where + ": " + std::to_string(array.ndim()) +
                       " dimensions, expected (N,) or (N, k)");
    const auto values =
        py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(array);
    HostField field;
    field.rows = static_cast<std::size_t>(array.shape(0));
    field.components = array.ndim() == 2 ? static_cast<int>(array.shape(1)) : 1;
    field.values.assign(values.data(), values.data() + values.size());
    out[name] = std::move(field);
  }
  return out;
}

std::shared_ptr<const HostGalaxy> galaxy_from_arrays(const py::dict& stars, const py::dict& gas,
                                                     double redshift, std::string source) {
  auto galaxy = std::make_shared<HostGalaxy>();
  galaxy->stars = host_fields(stars, "stars");
  galaxy->gas = host_fields(gas, "gas");
  galaxy->galaxy.simulation = "arrays";
  galaxy->galaxy.redshift = redshift;
  galaxy->source = std::move(source);
  // What is legal but likely a mistake (ages older than the Universe, uncentred positions, a
  // bulk velocity left in) is a Python warning, which the caller can filter or make an error.
  for (const std::string& warning : validate_and_complete(*galaxy))
    if (PyErr_WarnEx(PyExc_UserWarning, warning.c_str(), 2) != 0) throw py::error_already_set();
  return galaxy;
}

RunConfig make_config(const std::string& config, bool is_path,
                      const std::vector<std::string>& overrides,
                      std::shared_ptr<const HostGalaxy> galaxy) {
  if (is_path) return load_run_config(config, overrides, std::move(galaxy));
  nlohmann::json document = parse_json(config, "config");
  for (const auto& o : overrides) apply_override(document, o);
  return parse_run_config(document, "", std::move(galaxy));
}

RunOptions make_options(std::optional<int> devices, std::optional<std::string> backend,
                        std::optional<std::string> out) {
  RunOptions o;
  if (backend) o.backend = backend_from_string(*backend);
  o.n_devices = devices;
  o.output_dir = out;
  o.write_outputs = out.has_value();
  o.progress = false;
  return o;
}

// The engine's gradients as {field: float64 array (n,) or (n, k)}, n the particles of the
// field's set.
py::dict gradients_dict(const ParticleGradients& grads, std::size_t n_stars, std::size_t n_gas) {
  py::dict gradients;
  for (const auto& [name, values] : grads.fields) {
    const std::size_t rows = name.rfind("gas.", 0) == 0 ? n_gas : n_stars;
    if (rows == 0 || values.size() % rows != 0)
      throw std::logic_error("gradient " + name + ": " + std::to_string(values.size()) +
                             " values for " + std::to_string(rows) + " particles");
    const auto n = static_cast<py::ssize_t>(rows);
    const auto k = static_cast<py::ssize_t>(values.size() / rows);
    py::array_t<double> out = k == 1 ? py::array_t<double>({n}) : py::array_t<double>({n, k});
    std::copy(values.begin(), values.end(), out.mutable_data());
    gradients[py::str(name)] = out;
  }
  return gradients;
}

// The progress hook of a run from Python: takes the GIL back between steps to let Python handle a
// pending signal (Ctrl-C raises KeyboardInterrupt, which unwinds the run) and to call `progress`.
std::function<void(std::size_t, std::size_t, const std::string&)> python_progress(
    py::object progress) {
  return [progress](std::size_t done, std::size_t total, const std::string& step) {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (!progress.is_none()) progress(done, total, step);
  };
}

// A cotangent from Python, (ny, nx, n_wave) float64 in C order (the package transposes Cube.data's
// (n_wave, ny, nx) axes to the cube's spaxel-major order first), checked against the cube's shape
// and read in place by the engine (the caller holds the array). ValueError (std::invalid_argument)
// naming both shapes.
std::span<const double> cotangent_values(const py::array_t<double, py::array::c_style>& cotangent,
                                         const CubeShape& shape) {
  if (cotangent.ndim() != 3)
    throw std::invalid_argument("cotangent: " + std::to_string(cotangent.ndim()) +
                                " dimensions, expected the shape of Cube.data (n_wave, ny, nx)");
  const std::array<py::ssize_t, 3> given = {cotangent.shape(2), cotangent.shape(0),
                                            cotangent.shape(1)};  // as (n_wave, ny, nx)
  if (given[0] != shape.n_wave || given[1] != shape.ny || given[2] != shape.nx)
    throw std::invalid_argument("cotangent: shape (" + std::to_string(given[0]) + ", " +
                                std::to_string(given[1]) + ", " + std::to_string(given[2]) +
                                "), expected the shape of Cube.data (n_wave, ny, nx) = (" +
                                std::to_string(shape.n_wave) + ", " + std::to_string(shape.ny) +
                                ", " + std::to_string(shape.nx) + ")");
  return {cotangent.data(), shape.n_voxels()};
}

// The run, with the GIL released. Between steps the progress hook takes the GIL back to let
// Python handle a pending signal (Ctrl-C raises KeyboardInterrupt, which unwinds the run and
// leaves no output) and to call the user's callback.
py::tuple run(const std::string& config, bool is_path, const std::vector<std::string>& overrides,
              std::optional<int> devices, std::optional<std::string> backend,
              std::optional<std::string> out, std::shared_ptr<const HostGalaxy> galaxy,
              py::object progress) {
  const RunConfig run_config = make_config(config, is_path, overrides, std::move(galaxy));
  RunOptions options = make_options(devices, backend, out);
  options.on_progress = python_progress(progress);
  std::optional<RunReport> report;
  {
    py::gil_scoped_release release;
    report = run_pipeline(run_config, options);
  }
  auto cube = std::make_shared<Cube>(std::move(report->cube));
  std::vector<std::shared_ptr<Cube>> arms;  // a spectrograph's arms, each its own cube
  for (Cube& arm : report->arms) arms.push_back(std::make_shared<Cube>(std::move(arm)));
  return py::make_tuple(cube, report->summary.dump(), report->output_dir, report->files, arms);
}

// Reverse mode (docs/gradients.md, "From Python"): the run forward, then dL/d each particle field
// for `cotangent`, dL/d the cube, given as (ny, nx, n_wave) float64 in C order (the package
// transposes Cube.data's (n_wave, ny, nx) axes to the cube's spaxel-major order before the call).
// Its shape is checked against the cube the forward run made; the GIL is released meanwhile (the
// array is held by the caller, its buffer read without the GIL). Returns (the forward cube, its
// summary, {field: float64 array (n,) or (n, k)}).
py::tuple vjp(const std::string& config, bool is_path, const std::vector<std::string>& overrides,
              std::optional<int> devices, std::optional<std::string> backend,
              std::shared_ptr<const HostGalaxy> galaxy,
              const py::array_t<double, py::array::c_style>& cotangent, py::object progress) {
  const RunConfig run_config = make_config(config, is_path, overrides, std::move(galaxy));
  RunOptions options = make_options(devices, backend, std::nullopt);
  options.on_progress = python_progress(progress);
  // Read while the engine runs without the GIL: the caller holds the array.
  auto cotangent_of = [&](const CubeShape& shape) { return cotangent_values(cotangent, shape); };
  std::optional<VjpReport> report;
  {
    py::gil_scoped_release release;
    report = run_pipeline_vjp(run_config, options, cotangent_of);
  }
  const nlohmann::json& summary = report->forward.summary;
  const py::dict gradients =
      gradients_dict(report->gradients, summary.at("n_stars").get<std::size_t>(),
                     summary.at("n_gas").get<std::size_t>());
  auto cube = std::make_shared<Cube>(std::move(report->forward.cube));
  return py::make_tuple(cube, summary.dump(), gradients);
}

// A forward run kept for its VJP (ifusim.forward, docs/gradients.md "A forward kept for its
// backward"): the engine's ForwardSession until release() or until Python drops the handle. One
// call at a time (the lock), the GIL released while the engine works.
struct KeptForward {
  std::optional<ForwardSession> session;
  std::mutex mutex;
};

// The run forward, kept: (the cube, its summary, the handle).
py::tuple forward(const std::string& config, bool is_path,
                  const std::vector<std::string>& overrides, std::optional<int> devices,
                  std::optional<std::string> backend, std::shared_ptr<const HostGalaxy> galaxy,
                  py::object progress) {
  const RunConfig run_config = make_config(config, is_path, overrides, std::move(galaxy));
  RunOptions options = make_options(devices, backend, std::nullopt);
  options.on_progress = python_progress(progress);
  auto kept = std::make_shared<KeptForward>();
  {
    py::gil_scoped_release release;
    kept->session.emplace(run_config, options);
  }
  RunReport& report = kept->session->report();
  auto cube = std::make_shared<Cube>(std::move(report.cube));
  return py::make_tuple(cube, report.summary.dump(), kept);
}

// The kept forward's VJP: {field: float64 array} for `cotangent` ((ny, nx, n_wave), C order).
py::dict kept_vjp(KeptForward& kept, const py::array_t<double, py::array::c_style>& cotangent) {
  ParticleGradients gradients;
  std::size_t n_stars = 0, n_gas = 0;
  {
    std::unique_lock lock(kept.mutex, std::defer_lock);
    {
      py::gil_scoped_release release;  // another thread's call may hold the lock meanwhile
      lock.lock();
    }
    if (!kept.session)
      throw std::runtime_error(
          "ifusim.Forward.vjp: this forward run was released (release(), or the JAX wrapper after "
          "its backward); run ifusim.forward again");
    const std::span<const double> values = cotangent_values(cotangent, kept.session->cube_shape());
    n_stars = kept.session->n_stars();
    n_gas = kept.session->n_gas();
    py::gil_scoped_release release;
    gradients = kept.session->backward(values);
  }
  return gradients_dict(gradients, n_stars, n_gas);
}

py::tuple plan(const std::string& config, bool is_path, const std::vector<std::string>& overrides,
               std::optional<int> devices, std::optional<std::string> backend,
               std::shared_ptr<const HostGalaxy> galaxy) {
  const RunConfig run_config = make_config(config, is_path, overrides, std::move(galaxy));
  py::gil_scoped_release release;
  const RunPlan p = plan_pipeline(run_config, make_options(devices, backend, std::nullopt));
  py::gil_scoped_acquire gil;
  return py::make_tuple(p.report, p.problems);
}

// ifusim.read: any format the CLI reads (input.format), by the same readers.
std::shared_ptr<const HostGalaxy> read_snapshot_galaxy(
    const std::string& path, const std::string& format, std::optional<long long> subhalo,
    std::optional<int> snapshot, bool read_gas, bool drop_nonfinite,
    std::optional<std::array<double, 4>> region, std::vector<long long> particle_ids,
    std::optional<std::array<long long, 2>> subfind_group) {
  const std::string resolved = resolve_path(path, "");
  if (format == "rubix" || (format == "auto" && is_rubix_galaxy(resolved))) {
    py::gil_scoped_release release;
    const auto mesh = make_mesh(Backend::cpu, 1);
    return std::make_shared<const HostGalaxy>(
        host_galaxy_of(read_rubix_galaxy(*mesh, resolved), "RUBIX " + provenance_path(resolved)));
  }
  TngReadOptions o;
  o.path = resolved;
  o.format = format == "auto" ? &detect_snapshot_format(resolved) : tng::format_named(format);
  if (!o.format)
    throw ConfigError("format: expected auto, tng, swift, eagle, gadget or rubix, got \"" + format +
                      "\"");
  o.subhalo_id = subhalo;
  o.snapshot = snapshot;
  o.read_gas = read_gas;
  o.drop_nonfinite = drop_nonfinite;
  if (region) {
    o.region_centre = std::array<double, 3>{(*region)[0], (*region)[1], (*region)[2]};
    o.region_radius = (*region)[3];
  }
  o.particle_ids = std::move(particle_ids);
  o.subfind_group = subfind_group;
  py::gil_scoped_release release;
  const auto mesh = make_mesh(Backend::cpu, 1);
  const GalaxyData data = read_tng(*mesh, o);
  std::string source = std::string(o.format->title) + " " + provenance_path(o.path);
  if (subhalo) source += " subhalo " + std::to_string(*subhalo);
  return std::make_shared<const HostGalaxy>(host_galaxy_of(data, std::move(source)));
}

// The centre (kpc), bulk velocity (km/s) and stellar half-mass radius (kpc) of stars given as
// arrays, by the readers' own shrinking spheres (io/tng/stellar_centre.h): positions (N, 3) in
// kpc, current masses (N,) and velocities (N, 3) in km/s, all float64. With a periodic box
// (box_kpc > 0) offsets wrap as in a snapshot. Without one, the positions are handed over
// shifted so that the smallest is 1 kpc on every axis, in a box four times their extent: no
// offset then wraps (|offset| < box / 2) and the centre, inside the stars' hull, needs no
// wrapping back (0 < centre < box), so the arithmetic is that of open space.
py::tuple stellar_centre(
    const py::array_t<double, py::array::c_style | py::array::forcecast>& positions_kpc,
    const py::array_t<double, py::array::c_style | py::array::forcecast>& masses_msun,
    const py::array_t<double, py::array::c_style | py::array::forcecast>& velocities_kms,
    double box_kpc) {
  const auto n = static_cast<std::size_t>(masses_msun.size());
  if (n == 0) throw InputError("stars: no stars to find a centre of");
  if (positions_kpc.ndim() != 2 || positions_kpc.shape(1) != 3 ||
      static_cast<std::size_t>(positions_kpc.shape(0)) != n)
    throw InputError("stars.position_kpc: expected (N, 3) for N = " + std::to_string(n) +
                     " masses");
  if (velocities_kms.ndim() != 2 || velocities_kms.shape(1) != 3 ||
      static_cast<std::size_t>(velocities_kms.shape(0)) != n)
    throw InputError("stars.velocity_kms: expected (N, 3) for N = " + std::to_string(n) +
                     " masses");
  std::vector<double> coordinates(positions_kpc.data(), positions_kpc.data() + 3 * n);
  const std::vector<double> masses(masses_msun.data(), masses_msun.data() + n);
  const std::vector<double> velocities(velocities_kms.data(), velocities_kms.data() + 3 * n);
  for (std::size_t i = 0; i < n; ++i) {
    bool finite = std::isfinite(masses[i]) && masses[i] > 0;
    for (int k = 0; k < 3; ++k)
      finite =
          finite && std::isfinite(coordinates[3 * i + k]) && std::isfinite(velocities[3 * i + k]);
    if (!finite)
      throw InputError("stars: star " + std::to_string(i) +
                       " has a position, velocity or mass that is not finite (or a mass <= 0)");
  }
  std::array<double, 3> shift{0, 0, 0};
  double box = box_kpc;
  if (!(box_kpc > 0)) {
    std::array<double, 3> lo, hi;
    lo.fill(std::numeric_limits<double>::infinity());
    hi.fill(-std::numeric_limits<double>::infinity());
    for (std::size_t i = 0; i < n; ++i)
      for (int k = 0; k < 3; ++k) {
        lo[k] = std::min(lo[k], coordinates[3 * i + k]);
        hi[k] = std::max(hi[k], coordinates[3 * i + k]);
      }
    double extent = 0;
    for (int k = 0; k < 3; ++k) {
      shift[k] = lo[k] - 1.0;
      extent = std::max(extent, hi[k] - lo[k]);
    }
    box = 4.0 * (extent + 2.0);
    for (std::size_t i = 0; i < n; ++i)
      for (int k = 0; k < 3; ++k) coordinates[3 * i + k] -= shift[k];
  }
  tng::StellarCentre found;
  {
    py::gil_scoped_release release;
    const tng::VisitStarBlocks visit = [&](bool with_velocities,
                                           const std::function<void(const tng::CentreBlock&)>& f) {
      f({coordinates.data(), masses.data(), with_velocities ? velocities.data() : nullptr, n});
    };
    // Every star held at once (budget n): the result is bitwise that of any budget.
    found = tng::find_stellar_centre(visit, box, 1.0, 1.0, n);
  }
  // Tuples of floats, not numpy arrays made here: pybind11 before 2.12 (Debian's 2.10) reads
  // the item size of an array it creates from numpy 1's descriptor layout, which numpy 2
  // changed, so such arrays had wrong strides under numpy 2 (the package's wrapper makes them).
  const auto& c = found.center_code;
  const auto& v = found.bulk_velocity_kms;
  return py::make_tuple(py::make_tuple(c[0] + shift[0], c[1] + shift[1], c[2] + shift[2]),
                        py::make_tuple(v[0], v[1], v[2]), found.halfmass_radius_kpc);
}
}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "ifusim's C++ engine; use the ifusim package, not this module";
  m.attr("version") = IFUSIM_VERSION;
  // Log to stderr (spdlog's default logger writes to stdout, which a program's output owns).
  spdlog::set_default_logger(spdlog::stderr_color_mt("ifusim"));
  spdlog::set_pattern("[ifusim] [%l] %v");
  spdlog::set_level(spdlog::level::warn);

  const py::object error = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      "ifusim.Error", "Base of the errors ifusim raises for bad configs and inputs.",
      PyExc_Exception, nullptr));
  m.attr("Error") = error;
  py::register_exception<ConfigError>(m, "ConfigError", error);
  py::register_exception<InputError>(m, "InputError", error);

  py::class_<Cube, std::shared_ptr<Cube>>(m, "Cube")
      .def_property_readonly("data",
                             [](py::object self) {
                               return cube_view(self.cast<Cube&>(), self.cast<Cube&>().data, self);
                             })
      .def_property_readonly("var",
                             [](py::object self) -> py::object {
                               Cube& c = self.cast<Cube&>();
                               if (c.variance.empty()) return py::none();
                               return cube_view(c, c.variance, self);
                             })
      .def_property_readonly(
          "shape",
          [](const Cube& c) { return py::make_tuple(c.shape.n_wave, c.shape.ny, c.shape.nx); })
      .def_property_readonly("unit", [](const Cube& c) { return c.unit; })
      .def_property_readonly("medium", [](const Cube& c) { return c.axes.wavelength_medium; })
      .def_property_readonly("wave_start_angstrom",
                             [](const Cube& c) { return c.axes.wave_start_angstrom; })
      .def_property_readonly("wave_step_angstrom",
                             [](const Cube& c) { return c.axes.wave_step_angstrom; })
      .def_property_readonly("wave_log10_step",
                             [](const Cube& c) { return c.axes.wave_log10_step; })
      .def_property_readonly("wavelength_angstrom",
                             [](const Cube& c) {
                               std::vector<double> w(static_cast<std::size_t>(c.shape.n_wave));
                               for (int k = 0; k < c.shape.n_wave; ++k)
                                 w[k] = c.axes.wavelength_angstrom(k);
                               return w;
                             })
      .def_property_readonly("spaxel_arcsec", [](const Cube& c) { return c.axes.spaxel_arcsec; })
      .def_property_readonly("provenance",
                             [](const Cube& c) {
                               py::dict d;
                               for (const auto& [k, v] : c.provenance) d[py::str(k)] = v;
                               return d;
                             })
      .def("map_names",
           [](const Cube& c) {
             std::vector<std::string> names;
             for (const auto& [name, map] : c.maps) names.push_back(name);
             return names;
           })
      .def("map",
           [](py::object self, const std::string& name) {
             SkyMap& map = self.cast<Cube&>().maps.at(name);
             const Cube& c = self.cast<Cube&>();
             return py::make_tuple(
                 py::array_t<double>({c.shape.ny, c.shape.nx},
                                     {static_cast<py::ssize_t>(c.shape.nx * sizeof(double)),
                                      static_cast<py::ssize_t>(sizeof(double))},
                                     map.values.data(), self),
                 map.unit, map.description);
           })
      .def("wcs_cards",
           [](const Cube& c, int naxis) {
             py::list cards;
             for (const auto& card : cube_wcs_cards(c, naxis))
               cards.append(py::make_tuple(card.key, card.value, card.comment));
             return cards;
           })
      .def("write", [](const Cube& c, const std::string& path) {
        py::gil_scoped_release release;
        write_cube(c, path);
      });

  py::class_<HostGalaxy, std::shared_ptr<HostGalaxy>>(m, "Galaxy")
      .def_property_readonly("n_stars", &HostGalaxy::n_stars)
      .def_property_readonly("n_gas", &HostGalaxy::n_gas)
      .def_property_readonly("redshift", [](const HostGalaxy& g) { return g.galaxy.redshift; })
      .def_property_readonly("source", [](const HostGalaxy& g) { return g.source; })
      .def_property_readonly("halfmass_radius_stars_kpc",
                             [](const HostGalaxy& g) { return g.galaxy.halfmass_radius_stars_kpc; })
      .def("fields", [](py::object self, const std::string& set) {
        HostGalaxy& g = self.cast<HostGalaxy&>();
        py::dict out;
        for (auto& [name, field] : set == "stars" ? g.stars : g.gas)
          out[py::str(name)] = field_view(field, self);
        return out;
      });

  m.def("galaxy_from_arrays", &galaxy_from_arrays, py::arg("stars"), py::arg("gas"),
        py::arg("redshift"), py::arg("source"));
  m.def("stellar_centre", &stellar_centre, py::arg("positions_kpc"), py::arg("masses_msun"),
        py::arg("velocities_kms"), py::arg("box_kpc"));
  m.def("read", &read_snapshot_galaxy, py::arg("path"), py::arg("format"), py::arg("subhalo"),
        py::arg("snapshot"), py::arg("read_gas"), py::arg("drop_nonfinite"), py::arg("region"),
        py::arg("particle_ids"), py::arg("subfind_group"));
  m.def("run", &run, py::arg("config"), py::arg("is_path"), py::arg("overrides"),
        py::arg("devices"), py::arg("backend"), py::arg("out"), py::arg("galaxy"),
        py::arg("progress"));
  m.def("vjp", &vjp, py::arg("config"), py::arg("is_path"), py::arg("overrides"),
        py::arg("devices"), py::arg("backend"), py::arg("galaxy"), py::arg("cotangent"),
        py::arg("progress"));
  m.def("forward", &forward, py::arg("config"), py::arg("is_path"), py::arg("overrides"),
        py::arg("devices"), py::arg("backend"), py::arg("galaxy"), py::arg("progress"));
  py::class_<KeptForward, std::shared_ptr<KeptForward>>(m, "Forward")
      .def("vjp", &kept_vjp, py::arg("cotangent"))
      .def("release",
           [](KeptForward& kept) {
             py::gil_scoped_release release;
             const std::lock_guard lock(kept.mutex);
             kept.session.reset();
           })
      .def_property_readonly("released", [](KeptForward& kept) {
        py::gil_scoped_release release;
        const std::lock_guard lock(kept.mutex);
        return !kept.session.has_value();
      });
  m.def("plan", &plan, py::arg("config"), py::arg("is_path"), py::arg("overrides"),
        py::arg("devices"), py::arg("backend"), py::arg("galaxy"));
  m.def("read_cube", [](const std::string& path) {
    py::gil_scoped_release release;
    return std::make_shared<Cube>(read_cube(path));
  });
  m.def("compare", [](const Cube& a, const Cube& b, double rtol, double atol) {
    const CubeComparison r = compare_cubes(a, b, rtol, atol);
    return py::make_tuple(r.status, r.report, r.error);
  });
  m.def("devices", [](const std::string& backend, int count) {
    const auto mesh = make_mesh(backend_from_string(backend), count);
    std::vector<std::string> out;
    for (std::size_t d = 0; d < mesh->size(); ++d) out.push_back(mesh->device(d).description);
    return out;
  });
  // A run config's `telescope` entry (preset name, object or preset with fields replaced) resolved
  // as a run resolves it: ifusim.analysis reads the cube's resolution and PSF from it.
  m.def("telescope", [](const std::string& entry_json) {
    const Telescope t = parse_telescope_entry(nlohmann::json::parse(entry_json), "telescope");
    return nlohmann::json{{"name", t.name},
                          {"lsf_fwhm_angstrom", to_json(t.lsf_fwhm_angstrom, "fwhm_angstrom")},
                          {"psf_fwhm_arcsec", to_json(t.psf_fwhm_arcsec, "fwhm_arcsec")}}
        .dump();
  });
  // The folder of telescope presets; the pipeline presets are its sibling `pipelines`.
  m.def("telescope_preset_dir", [] { return telescope_preset_dir(); });
  // The reference data folder ${IFUSIM_DATA_DIR} stands for in a cube's provenance.
  m.def("data_dir", [] { return data_dir(); });
  m.def("cuda_device_count", [] { return runtime::cuda_device_count(); });
  m.def("set_log_level", [](const std::string& level) {
    const auto l = spdlog::level::from_str(level);
    if (l == spdlog::level::off && level != "off")
      throw ConfigError("log level '" + level +
                        "': expected trace, debug, info, warning, error, critical or off");
    spdlog::set_level(l);
  });
}
