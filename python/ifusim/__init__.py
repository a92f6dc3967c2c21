"""ifusim: integral-field spectroscopy datacubes from cosmological simulations.

The same engine as the ``ifusim`` command line (its runner, stages and readers), called from
Python. See docs/python.md.

>>> import ifusim
>>> cube = ifusim.run("configs/examples/muse_tng_mastar.json", devices=2)
>>> cube.data.shape          # (n_wave, ny, nx), as astropy reads the FITS cube
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

# An installed package carries the telescope and pipeline presets in its own folder; a build
# tree's module finds them in the source tree it was built from.
_PRESETS = Path(__file__).with_name("configs")
if _PRESETS.is_dir():
    os.environ.setdefault("IFUSIM_CONFIG_DIR", str(_PRESETS))


def _load_pip_nccl() -> None:
    """Where PyPI's NCCL (the package nvidia-nccl, which PyPI's Linux torch brings) is installed,
    loads it before the engine. A CUDA build of the engine links the CUDA Toolkit's libnccl.so.2;
    the process then keeps that one for the soname, and torch, imported after ifusim, fails on
    the symbols of its newer NCCL ("libtorch_cuda.so: undefined symbol: ncclCommResume"). The
    newer library serves both (NCCL keeps its ABI within 2.x)."""
    import ctypes
    import importlib.util

    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except ImportError:  # no package "nvidia"
        return
    for folder in (spec.submodule_search_locations or []) if spec else []:
        library = Path(folder) / "lib" / "libnccl.so.2"
        if library.is_file():
            try:
                ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
            except OSError:  # unusable here: the engine's own NCCL then, as without it
                pass
            return


if sys.platform.startswith("linux"):
    _load_pip_nccl()

from . import _core  # noqa: E402
from . import _simulations  # noqa: E402

__version__ = _core.version

Error = _core.Error
ConfigError = _core.ConfigError
InputError = _core.InputError
for _error in (Error, ConfigError, InputError):
    _error.__module__ = "ifusim"

__all__ = [
    "Cube",
    "Galaxy",
    "Plan",
    "Comparison",
    "Error",
    "ConfigError",
    "InputError",
    "run",
    "plan",
    "vjp",
    "forward",
    "Forward",
    "read",
    "read_tng",
    "find_centre",
    "read_cube",
    "compare",
    "devices",
    "set_log_level",
]

Config = Union[str, os.PathLike, Mapping[str, Any]]
Progress = Union[None, bool, Callable[[int, int, str], None]]


def set_log_level(level: str) -> None:
    """The engine's log level: "debug", "info", "warning" (the default), "error" or "off"."""
    _core.set_log_level(level)


class Cube:
    """A simulated cube: flux (and variance) as numpy arrays of shape (n_wave, ny, nx).

    ``data``, ``var`` and the ``maps`` are views of the engine's own buffers, not copies; the
    cube keeps them alive.
    """

    def __init__(self, core: "_core.Cube", summary: Optional[dict] = None):
        self._core = core
        self.summary: dict = summary or {}
        self.maps: dict = {}
        self.map_units: dict = {}
        for name in core.map_names():
            values, unit, _description = core.map(name)
            self.maps[name] = values
            self.map_units[name] = unit

    data = property(lambda self: self._core.data, doc="flux, (n_wave, ny, nx)")
    var = property(lambda self: self._core.var, doc="variance, (n_wave, ny, nx), or None")
    unit = property(lambda self: self._core.unit, doc="BUNIT of data")
    medium = property(lambda self: self._core.medium, doc='"air" or "vacuum"')
    spaxel_arcsec = property(lambda self: self._core.spaxel_arcsec)
    provenance = property(lambda self: self._core.provenance, doc="the run's config, input, ...")

    @property
    def shape(self) -> tuple:
        return self._core.shape

    @property
    def wavelength(self):
        """The wavelength of each plane's centre in Angstrom (in ``medium``): linear, or
        logarithmic (``wave_log10_step`` > 0, as MaNGA's LOGCUBE; docs/outputs.md)."""
        import numpy as np

        c = self._core
        if c.wave_log10_step > 0:
            return np.asarray(c.wavelength_angstrom)
        return c.wave_start_angstrom + c.wave_step_angstrom * np.arange(c.shape[0])

    @property
    def wave_log10_step(self) -> float:
        """dlog10(lambda) per plane of a logarithmic wavelength axis; 0 for a linear one."""
        return self._core.wave_log10_step

    @property
    def wcs(self):
        """The cube's astropy.wcs.WCS (axes x, y, wavelength), as written into its FITS file."""
        from astropy.io import fits
        from astropy.wcs import WCS

        header = fits.Header()
        header["NAXIS"] = 3
        for axis, n in zip((1, 2, 3), reversed(self.shape)):
            header[f"NAXIS{axis}"] = n
        for key, value, comment in self._core.wcs_cards(3):
            header[key] = (value, comment)
        return WCS(header)

    def to_fits(self, path: Union[str, os.PathLike]) -> None:
        """Writes the cube as the CLI does (docs/outputs.md): DATA, STAT and the maps."""
        self._write(path, (".fits", ".fit", ".fts"))

    def to_hdf5(self, path: Union[str, os.PathLike]) -> None:
        """Writes the cube as the CLI's cube.h5 (docs/outputs.md)."""
        self._write(path, (".h5", ".hdf5"))

    def _write(self, path, suffixes) -> None:
        path = os.fspath(path)
        if not path.lower().endswith(suffixes):
            raise ValueError(f"{path}: expected a file name ending in {' or '.join(suffixes)}")
        self._core.write(path)

    def __repr__(self) -> str:
        n_wave, ny, nx = self.shape
        return (
            f"<ifusim.Cube {nx} x {ny} spaxels x {n_wave} wavelengths, "
            f"{self.wavelength[0]:.2f}-{self.wavelength[-1]:.2f} Angstrom ({self.medium}), "
            f"unit {self.unit!r}, maps {sorted(self.maps)}>"
        )


class Galaxy:
    """A galaxy held in memory: star particles and gas cells as arrays, in the readers' units.

    Fields are named as in ``ifusim inspect`` (data/galaxy_data.h): positions in physical kpc
    relative to the galaxy's centre, velocities in km/s relative to its bulk motion, masses in
    Msun, metallicities as mass fractions, ages in Gyr at the galaxy's epoch.
    """

    STAR_FIELDS = {
        "position_kpc": "kpc",
        "velocity_kms": "km/s",
        "initial_mass_msun": "Msun",
        "mass_msun": "Msun",
        "age_gyr": "Gyr",
        "metallicity": "",
        "smoothing_length_kpc": "kpc",
    }
    GAS_FIELDS = {
        "position_kpc": "kpc",
        "velocity_kms": "km/s",
        "mass_msun": "Msun",
        "density_msun_per_kpc3": "Msun/kpc3",
        "metallicity": "",
        "sfr_msun_per_yr": "Msun/yr",
        "internal_energy_km2_s2": "km2/s2",
        "electron_abundance": "",
        "metals": "",
    }

    def __init__(self, core: "_core.Galaxy"):
        self._core = core

    @classmethod
    def from_arrays(
        cls,
        stars: Mapping[str, Any],
        gas: Optional[Mapping[str, Any]] = None,
        redshift: float = 0.0,
        centre: str = "none",
    ) -> "Galaxy":
        """A galaxy from arrays of any simulation (pynbody, swiftsimio, yt, ...).

        ``stars`` needs position_kpc (N, 3), velocity_kms (N, 3), initial_mass_msun, age_gyr and
        metallicity (N,); mass_msun (default: the initial mass) and smoothing_length_kpc are
        optional. ``gas`` (optional) needs position_kpc, velocity_kms, mass_msun,
        density_msun_per_kpc3, metallicity and sfr_msun_per_yr; internal_energy_km2_s2,
        electron_abundance and metals (N, 10) are optional. Arrays (or lists) of floats or
        integers are held as float32; astropy Quantities (and unyt arrays) are converted to the
        field's unit. ``redshift`` is the galaxy's epoch, and the observed redshift unless the
        run's config gives one. What is legal but likely a mistake is a ``UserWarning`` with its
        numbers: ages older than the Universe at ``redshift`` (lookback times?), positions whose
        centre of mass lies far from the origin (not centred?), a mean velocity over 100 km/s
        (bulk motion left in?); ages above 100 Gyr (years?) are an InputError.

        ``centre``: "none" (the arrays are centred and at rest already) or "shrinking_spheres":
        the centre and bulk velocity the snapshot readers find (``Galaxy.centre()``, the same
        C++ code) are subtracted from the stars' and the gas's positions and velocities, in
        float64 before the fields are held as float32.

        Raises InputError naming the field for an unknown name, a wrong shape or unit, a
        missing required field, or a value that is not finite or out of range.
        """
        return cls._from_converted(stars, gas, redshift, centre, "ifusim.Galaxy.from_arrays")

    @classmethod
    def _from_converted(cls, stars, gas, redshift, centre, source, box_kpc=None) -> "Galaxy":
        stars = _convert_units(stars, cls.STAR_FIELDS, "stars")
        gas = _convert_units(gas or {}, cls.GAS_FIELDS, "gas")
        stars, gas, _found = _simulations.centre_arrays(stars, gas, centre, box_kpc)
        return cls(_core.galaxy_from_arrays(stars, gas, float(redshift), source))

    @classmethod
    def from_swiftsimio(
        cls,
        data: Any,
        *,
        centre: str = "shrinking_spheres",
        region: Optional[Tuple[Any, Any]] = None,
        read_gas: bool = True,
        redshift: Optional[float] = None,
        cosmology: Any = None,
    ) -> "Galaxy":
        """A galaxy from a swiftsimio dataset (``swiftsimio.load(path, mask=...)``: SWIFT
        snapshots, COLIBRE, FLAMINGO, EAGLE-XL).

        Every array is converted by swiftsimio to physical units (``to_physical``: the a-scale
        exponent of each dataset applied; SWIFT has no h factors). Stars: Coordinates,
        Velocities, Masses, InitialMasses (else Masses), MetalMassFractions, and ages at the
        snapshot's epoch from BirthScaleFactors through the snapshot's own cosmology (its
        Cosmology group, ``data.metadata.cosmology``, astropy; ``cosmology=`` to give another)
        or from BirthTimes in a run without cosmology; SmoothingLengths times the snapshot's
        "Kernel gamma" (HydroScheme), the kernel's support radius, where both are present.
        Gas (``read_gas``): Coordinates, Velocities, Masses, Densities, MetalMassFractions,
        StarFormationRates (SWIFT's negative values, the last star-formation epoch of a
        particle that forms no stars, are rates of 0) and InternalEnergies.

        ``region``: (centre, radius) in physical kpc or as unyt quantities: only the particles
        within it, in the periodic box (a swiftsimio mask reads less; this selects what was
        read). ``centre``: "shrinking_spheres" (the readers' centre and bulk velocity, found in
        the periodic box) or "none". ``redshift``: the galaxy's, default the snapshot's.
        """
        return cls._galaxy_of(_simulations.from_swiftsimio(
            data, centre=centre, region=region, read_gas=read_gas, redshift=redshift,
            cosmology=cosmology))

    @classmethod
    def from_pynbody(
        cls,
        sim: Any,
        *,
        centre: str = "shrinking_spheres",
        read_gas: bool = True,
        redshift: Optional[float] = None,
    ) -> "Galaxy":
        """A galaxy from a pynbody SimSnap (``pynbody.load``: tipsy/NIHAO, ChaNGa, Gadget,
        GIZMO, RAMSES, ...; a halo or any sub-snapshot of one).

        Arrays are converted with pynbody's unit system (``SimArray.in_units``, which applies
        the snapshot's a and h): pos (kpc), vel (km/s), mass and massform (Msol; massform,
        where stored, is the initial mass), metals; ages are pynbody's derived ``age`` (the
        snapshot's time minus ``tform``, in Gyr). Gas (``read_gas``): pos, vel, mass, rho,
        metals, sfr (required: ifusim's gas needs it), u and ne where stored. The snapshot
        itself is not changed. ``centre``: "shrinking_spheres" (ours, the readers' code, in the
        periodic box when the snapshot has one), "pynbody" (``pynbody.analysis.center``, mode
        "ssc", with its central velocity) or "none". ``redshift``: default the snapshot's.
        """
        return cls._galaxy_of(_simulations.from_pynbody(
            sim, centre=centre, read_gas=read_gas, redshift=redshift))

    @classmethod
    def _galaxy_of(cls, converted: dict) -> "Galaxy":
        return cls(_core.galaxy_from_arrays(
            converted["stars"], converted["gas"], converted["redshift"], converted["source"]))

    def centre(self) -> "_simulations.Centre":
        """(position_kpc, velocity_kms, halfmass_radius_kpc) of this galaxy's stars: the
        centre by shrinking spheres on current mass (Power et al. 2003), the mass-weighted
        velocity of the stars within the half-mass radius, and that radius, found by the same
        C++ code as the snapshot readers' (io/tng/stellar_centre.cpp), in the galaxy's frame.
        A galaxy read by ifusim or made with centre="shrinking_spheres" has a centre of zero
        up to the float32 rounding of its positions."""
        stars = self.stars
        mass = stars.get("mass_msun", stars["initial_mass_msun"])
        return _simulations.find_centre(stars["position_kpc"], stars["velocity_kms"], mass)

    n_stars = property(lambda self: self._core.n_stars)
    n_gas = property(lambda self: self._core.n_gas)
    redshift = property(lambda self: self._core.redshift)
    source = property(lambda self: self._core.source)

    @property
    def stars(self) -> dict:
        """The star fields as float32 views (N,) or (N, k)."""
        return self._core.fields("stars")

    @property
    def gas(self) -> dict:
        """The gas fields as float32 views (N,) or (N, k)."""
        return self._core.fields("gas")

    def __repr__(self) -> str:
        return (
            f"<ifusim.Galaxy {self.n_stars} stars, {self.n_gas} gas cells, z = {self.redshift:g}"
            f" ({self.source})>"
        )


def _convert_units(arrays: Mapping[str, Any], units: Mapping[str, str], where: str) -> dict:
    """Quantities (astropy, unyt) to plain arrays in the field's unit; other values unchanged."""
    out = {}
    for name, value in arrays.items():
        unit = units.get(name)
        if unit is not None and hasattr(value, "unit") and hasattr(value, "to"):
            try:
                value = value.to(unit or "dimensionless").value
            except Exception as e:  # astropy UnitConversionError, unyt's own
                raise InputError(
                    f"{where}.{name}: unit {value.unit} cannot be converted to "
                    f"{unit or 'dimensionless'} ({e})"
                ) from None
        out[name] = value
    return out


def _config_args(config: Config, overrides: Optional[Mapping[str, Any]]):
    """(text, is_path, overrides as key=value) for the engine."""
    if isinstance(config, Mapping):
        text, is_path = json.dumps(config), False
    else:
        text, is_path = os.fspath(config), True
    assignments = [f"{k}={json.dumps(v)}" for k, v in (overrides or {}).items()]
    return text, is_path, assignments


def _progress_callback(progress: Progress):
    """The callable the engine calls between steps: the user's, a tqdm bar, or None."""
    if callable(progress):
        return progress, None
    interactive = hasattr(sys, "ps1") or "ipykernel" in sys.modules
    if progress is False or (progress is None and not interactive):
        return None, None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None, None  # silent without tqdm
    bar = tqdm(total=1, desc="ifusim", unit="step")

    def update(done: int, total: int, step: str) -> None:
        bar.total = total
        bar.n = done
        bar.set_postfix_str(step, refresh=False)
        bar.refresh()

    return update, bar


def run(
    config: Config,
    *,
    devices: Optional[int] = None,
    backend: Optional[str] = None,
    overrides: Optional[Mapping[str, Any]] = None,
    galaxy: Optional[Galaxy] = None,
    out: Optional[Union[str, os.PathLike]] = None,
    progress: Progress = None,
) -> Union[Cube, Dict[str, Cube]]:
    """Simulates a cube, as ``ifusim run`` does.

    config: a run config file (JSON, docs/config.md) or a dict of the same schema.
    devices, backend: override devices.count and devices.backend ("cpu" or "cuda").
    overrides: {"key.path": value}, as the CLI's --set.
    galaxy: simulate this Galaxy; the config's input section is then ignored (but for
        input.read_gas), and galaxy.redshift defaults to the galaxy's redshift.
    out: also write the CLI's output folder here (cube.fits, pictures, summary.json; cube.h5 too
        with overrides={"output.hdf5": True}); by default nothing is written.
    progress: a callable (done, total, step), True for a tqdm bar (when tqdm is installed),
        False for none; by default a bar in interactive sessions and notebooks only.

    Returns the cube; for a spectrograph's arms (``telescope`` a list, e.g. ["SAMI",
    "SAMI-red"]) a dict of one cube per arm, keyed by the arm's telescope name, in the list's
    order.

    The GIL is released while the engine runs. Ctrl-C stops the run between steps with
    KeyboardInterrupt and leaves no output behind.
    """
    text, is_path, assignments = _config_args(config, overrides)
    callback, bar = _progress_callback(progress)
    try:
        core, summary, _out_dir, _files, arms = _core.run(
            text,
            is_path,
            assignments,
            devices,
            backend,
            None if out is None else os.fspath(out),
            None if galaxy is None else galaxy._core,
            callback,
        )
    finally:
        if bar is not None:
            bar.close()
    summary = json.loads(summary)
    if arms:
        return {
            arm_summary["telescope"]: Cube(arm, arm_summary)
            for arm, arm_summary in zip(arms, summary["arms"])
        }
    return Cube(core, summary)


def _spaxel_major(cotangent: Any):
    """dL/d(cube) from Cube.data's axes (n_wave, ny, nx) to the engine's spaxel-major order,
    (ny, nx, n_wave), float64 and C-contiguous (no copy where it is already so underneath)."""
    import numpy as np

    array = np.asarray(cotangent, dtype=np.float64)
    if array.ndim != 3:
        raise ValueError(
            f"cotangent: shape {array.shape}, expected the shape of Cube.data (n_wave, ny, nx)"
        )
    return np.ascontiguousarray(np.moveaxis(array, 0, -1))


def vjp(
    config: Config,
    galaxy: Galaxy,
    cotangent: Any,
    *,
    overrides: Optional[Mapping[str, Any]] = None,
    devices: Optional[int] = None,
    backend: Optional[str] = None,
    progress: Progress = None,
) -> Dict[str, Any]:
    """Gradients of a loss with respect to the galaxy's particle fields (reverse mode).

    Runs ``config`` on ``galaxy`` forward, as :func:`run` does, then its vector-Jacobian
    product: ``cotangent`` is dL/d(cube) for a loss L, a numpy array shaped like the run's
    ``Cube.data``, (n_wave, ny, nx) (NaN where the cube is NaN is fine: those voxels send
    nothing back). Returns {field name: float64 array} keyed by the names
    :meth:`Galaxy.from_arrays` takes ("stars.initial_mass_msun", "stars.age_gyr",
    "stars.metallicity", "stars.velocity_kms"; "stars.position_kpc" where the aperture's
    smoothing is "kernel"; with the emission_lines stage also
    "gas.sfr_msun_per_yr", "gas.metallicity", "gas.velocity_kms" and, where the gas has metals,
    "gas.metals"; with the dust stage also "gas.mass_msun" and the derived "stars.dust_av" and
    "gas.dust_av", dL/dA_V), each shaped like its field: (n,), (n, 3) or (n, 10).

    The gradient is that of the noiseless cube (a noise stage's adjoint is the identity).
    Refused (ifusim.ConfigError naming the stage or key): stages with no adjoint (mass_image),
    the exact spectral method, a spectrograph's arms; a cotangent
    of the wrong shape is a ValueError naming its shape and the cube's. docs/gradients.md.
    """
    spaxel_major = _spaxel_major(cotangent)
    text, is_path, assignments = _config_args(config, overrides)
    callback, bar = _progress_callback(progress)
    try:
        _cube, _summary, gradients = _core.vjp(
            text, is_path, assignments, devices, backend, galaxy._core, spaxel_major, callback
        )
    finally:
        if bar is not None:
            bar.close()
    return dict(gradients)


class Forward:
    """A forward run kept for its vector-Jacobian product (:func:`forward`).

    ``vjp(cotangent)`` gives what :func:`vjp` gives for the same run and cotangent, bitwise,
    without running the forward again; it may be called more than once. The run's state (the
    particles as the stages left them, each stage's forward state and tables: docs/gradients.md,
    "A forward kept for its backward") stays in memory until :meth:`release`, the end of a
    ``with`` block, or until the object is dropped.
    """

    def __init__(self, core: "_core.Forward", shape: tuple):
        self._core = core
        self.shape = tuple(shape)  # the cube's, (n_wave, ny, nx)

    def vjp(self, cotangent: Any) -> Dict[str, Any]:
        """{field name: float64 array} for ``cotangent`` = dL/d(cube), shaped like
        ``Cube.data``, as :func:`vjp` returns it. RuntimeError once released; ValueError for
        another shape, naming it and the cube's."""
        return dict(self._core.vjp(_spaxel_major(cotangent)))

    def release(self) -> None:
        """Frees the run's state now (a later :meth:`vjp` raises RuntimeError)."""
        self._core.release()

    @property
    def released(self) -> bool:
        return self._core.released

    def __enter__(self) -> "Forward":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<ifusim.Forward cube {self.shape}{' released' if self.released else ''}>"


def forward(
    config: Config,
    galaxy: Galaxy,
    *,
    overrides: Optional[Mapping[str, Any]] = None,
    devices: Optional[int] = None,
    backend: Optional[str] = None,
    progress: Progress = None,
) -> Tuple[Cube, Forward]:
    """Runs ``config`` on ``galaxy`` as :func:`run` does (the cube bitwise :func:`run`'s) and
    keeps the run for its gradient: returns ``(cube, kept)``, where ``kept.vjp(cotangent)`` is
    :func:`vjp`'s result for that cotangent, bitwise, at the cost of the backward pass only.

    What :func:`vjp` refuses is refused here, when the forward runs (arms, a streamed galaxy),
    but a stage with no adjoint, found by ``kept.vjp``. The kept state's memory is held until
    ``kept.release()`` (or ``with kept:``) or until ``kept`` is dropped.
    """
    text, is_path, assignments = _config_args(config, overrides)
    callback, bar = _progress_callback(progress)
    try:
        core, summary, kept = _core.forward(
            text, is_path, assignments, devices, backend, galaxy._core, callback
        )
    finally:
        if bar is not None:
            bar.close()
    cube = Cube(core, json.loads(summary))
    return cube, Forward(kept, cube.shape)


class Plan:
    """The dry run: how the galaxy would be sharded and what each device's memory would hold."""

    def __init__(self, report: str, problems: Sequence[str]):
        self.report = report
        self.problems = list(problems)

    @property
    def fits(self) -> bool:
        """Whether the run fits in every device's memory."""
        return not self.problems

    def __str__(self) -> str:
        return self.report

    def __repr__(self) -> str:
        return f"<ifusim.Plan fits={self.fits} problems={self.problems}>"


def plan(
    config: Config,
    *,
    devices: Optional[int] = None,
    backend: Optional[str] = None,
    overrides: Optional[Mapping[str, Any]] = None,
    galaxy: Optional[Galaxy] = None,
) -> Plan:
    """``ifusim plan``: the sharding and memory estimate of a run, without reading particles."""
    text, is_path, assignments = _config_args(config, overrides)
    report, problems = _core.plan(
        text, is_path, assignments, devices, backend, None if galaxy is None else galaxy._core
    )
    return Plan(report, problems)


def read_tng(
    path: Union[str, os.PathLike],
    subhalo: Optional[int] = None,
    *,
    snapshot: Optional[int] = None,
    read_gas: bool = True,
    drop_nonfinite: bool = False,
) -> Galaxy:
    """An IllustrisTNG cutout, or a subhalo of a snapshot folder (with ``snapshot``), read by the
    CLI's reader: centred, in physical units, wind cells dropped. ``${IFUSIM_DATA_DIR}`` in the
    path is expanded."""
    return read(
        path,
        "tng",
        subhalo=subhalo,
        snapshot=snapshot,
        read_gas=read_gas,
        drop_nonfinite=drop_nonfinite,
    )


def read(
    path: Union[str, os.PathLike],
    format: str = "auto",
    *,
    subhalo: Optional[int] = None,
    snapshot: Optional[int] = None,
    region: Optional[Sequence[float]] = None,
    particle_ids: Optional[Sequence[int]] = None,
    subfind_group: Optional[Sequence[int]] = None,
    read_gas: bool = True,
    drop_nonfinite: bool = False,
) -> Galaxy:
    """A galaxy of any snapshot format the CLI reads (docs/formats.md), by the CLI's readers:
    ``format`` "auto" (told from the file), "tng", "swift", "eagle", "gadget" (Gadget-4, AREPO,
    GIZMO) or "rubix". Centred by shrinking spheres (TNG snapshots: the group catalogue), in
    physical units, ages at the snapshot's epoch. A SWIFT, EAGLE or Gadget file gives all its
    particles, or those within ``region`` = (x, y, z, radius) (comoving, in the file's Coordinates
    units), of ``particle_ids``, or of ``subfind_group`` = (GroupNumber, SubGroupNumber)."""
    return Galaxy(
        _core.read(
            os.fspath(path),
            format,
            subhalo,
            snapshot,
            read_gas,
            drop_nonfinite,
            None if region is None else [float(v) for v in region],
            [] if particle_ids is None else [int(v) for v in particle_ids],
            None if subfind_group is None else [int(v) for v in subfind_group],
        )
    )
def find_centre(position_kpc, velocity_kms, mass_msun, box_kpc: Optional[float] = None):
    """The readers' centre of stars given as arrays: (position_kpc, velocity_kms,
    halfmass_radius_kpc), as Galaxy.centre() finds it, in float64 (positions (N, 3) kpc,
    velocities (N, 3) km/s, current masses (N,) Msun). ``box_kpc``: the side of a periodic box
    the positions are box coordinates of (offsets then wrap to the nearest image)."""
    return _simulations.find_centre(position_kpc, velocity_kms, mass_msun, box_kpc)


def read_cube(path: Union[str, os.PathLike]) -> Cube:
    """A cube file (FITS or HDF5) written by ifusim, or any FITS cube with a TAN WCS and a
    linear wavelength axis."""
    return Cube(_core.read_cube(os.fspath(path)))


class Comparison:
    """The result of compare(): ``equal`` and the report ``ifusim compare`` prints."""

    def __init__(self, status: int, report: str, error: str):
        self.status, self.report, self.error = status, report, error

    @property
    def equal(self) -> bool:
        return self.status == 0

    def __bool__(self) -> bool:
        return self.equal

    def __str__(self) -> str:
        return self.error or self.report


def compare(
    a: Union[Cube, str, os.PathLike],
    b: Union[Cube, str, os.PathLike],
    rtol: float = 1e-5,
    atol: float = 0.0,
) -> Comparison:
    """``ifusim compare``: whether |a - b| <= atol + rtol |b| everywhere (b the reference), for
    data and, where both have one, variance. Cubes or file paths. A NaN is a failure; cubes of
    different shapes or wavelength axes are not comparable (status 2)."""
    cubes = [c if isinstance(c, Cube) else read_cube(c) for c in (a, b)]
    return Comparison(*_core.compare(cubes[0]._core, cubes[1]._core, rtol, atol))


def devices(backend: str = "cpu", count: int = 0) -> list:
    """The devices a run would use: host devices on "cpu" (default 1), GPUs on "cuda"."""
    return _core.devices(backend, count)
