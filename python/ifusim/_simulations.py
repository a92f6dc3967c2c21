"""Galaxies from other programs' snapshot readers: swiftsimio (SWIFT) and pynbody (tipsy/NIHAO,
ChaNGa, Gadget, GIZMO, RAMSES, ...), and the readers' centre finder on arrays.

Each converter reads what the library gives, converts it to the fields of Galaxy.from_arrays
(physical kpc, km/s, Msun, Gyr, mass fractions) with the library's own unit system, and centres
the galaxy by the readers' shrinking spheres (io/tng/stellar_centre.h) unless told otherwise.
The libraries are imported only when called: ifusim itself does not need them.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Mapping, Optional, Tuple

import numpy as np

from . import _core

Centre = namedtuple("Centre", ["position_kpc", "velocity_kms", "halfmass_radius_kpc"])
Centre.__doc__ = """The centre of a galaxy's stars (kpc), their bulk velocity (km/s: the
mass-weighted velocity of the stars within the half-mass radius) and their half-mass radius
(kpc), as the snapshot readers find them."""

CENTRE_METHODS = ("none", "shrinking_spheres")


def _error(message: str) -> Exception:
    return _core.InputError(message)


def _check_centre(method: str, methods: Tuple[str, ...]) -> None:
    if method not in methods:
        raise _error(f"centre={method!r}: expected one of {', '.join(map(repr, methods))}")


def find_centre(
    position_kpc: Any, velocity_kms: Any, mass_msun: Any, box_kpc: Optional[float] = None
) -> Centre:
    """Shrinking spheres on current stellar mass (Power et al. 2003, MNRAS 338, 14, sect. 2.5)
    and the mass-weighted velocity inside the stellar half-mass radius: the C++ code the
    snapshot readers run (io/tng/stellar_centre.cpp), on float64 arrays. ``box_kpc``: the
    periodic box's side in physical kpc, when the positions are box coordinates that may wrap."""
    position = np.asarray(position_kpc, dtype=np.float64)
    velocity = np.asarray(velocity_kms, dtype=np.float64)
    mass = np.asarray(mass_msun, dtype=np.float64).reshape(-1)
    centre, bulk, halfmass = _core.stellar_centre(
        position, mass, velocity, float(box_kpc) if box_kpc else 0.0
    )
    return Centre(np.array(centre, dtype=np.float64), np.array(bulk, dtype=np.float64),
                  float(halfmass))


def _offsets(position_kpc: Any, centre_kpc: np.ndarray, box_kpc: Optional[float]) -> np.ndarray:
    """Positions relative to the centre, in float64; the nearest image in a periodic box."""
    d = np.asarray(position_kpc, dtype=np.float64) - centre_kpc
    if box_kpc:
        d -= box_kpc * np.floor(d / box_kpc + 0.5)
    return d


def centre_arrays(
    stars: Mapping[str, Any],
    gas: Mapping[str, Any],
    method: str,
    box_kpc: Optional[float] = None,
) -> Tuple[dict, dict, Optional[Centre]]:
    """The star and gas fields with ``method``'s centre and bulk velocity subtracted (float64),
    and the centre (None for "none")."""
    _check_centre(method, CENTRE_METHODS)
    stars, gas = dict(stars), dict(gas or {})
    if method == "none":
        return stars, gas, None
    for name in ("position_kpc", "velocity_kms"):
        if name not in stars:
            raise _error(f"stars.{name}: required to find the centre (centre={method!r})")
    if "mass_msun" in stars:
        mass, mass_name = stars["mass_msun"], "mass_msun"
    elif "initial_mass_msun" in stars:
        mass, mass_name = stars["initial_mass_msun"], "initial_mass_msun"
    else:
        raise _error(f"stars.mass_msun or stars.initial_mass_msun: required (centre={method!r})")
    try:
        found = find_centre(stars["position_kpc"], stars["velocity_kms"], mass, box_kpc)
    except ValueError as e:  # numpy could not make float arrays of them
        raise _error(f"stars.position_kpc, velocity_kms or {mass_name}: {e}") from None
    for fields in (stars, gas):
        if "position_kpc" in fields:
            fields["position_kpc"] = _offsets(fields["position_kpc"], found.position_kpc, box_kpc)
        if "velocity_kms" in fields:
            fields["velocity_kms"] = (
                np.asarray(fields["velocity_kms"], dtype=np.float64) - found.velocity_kms
            )
    return stars, gas, found


# ---- swiftsimio ------------------------------------------------------------------------------


def _swift_values(array: Any, unit: str) -> np.ndarray:
    """A swiftsimio cosmo_array in physical ``unit`` (its a-scale exponent applied by
    swiftsimio: cosmo_array.to_physical), as float64 numpy."""
    if hasattr(array, "to_physical"):
        array = array.to_physical()
    return np.asarray(array.to_value(unit), dtype=np.float64)


def _has(group: Any, name: str) -> bool:
    """Whether a swiftsimio particle group has the field (without reading it)."""
    names = getattr(getattr(group, "group_metadata", None), "field_names", None)
    if names is not None:
        return name in names
    return hasattr(group, name)


def _region_mask(position_kpc: np.ndarray, region: Optional[Tuple[Any, Any]], box_kpc, unit_of):
    if region is None:
        return None
    centre, radius = region
    centre_kpc = np.asarray(unit_of(centre, "kpc"), dtype=np.float64).reshape(3)
    radius_kpc = float(unit_of(radius, "kpc"))
    d = _offsets(position_kpc, centre_kpc, box_kpc)
    return np.einsum("ij,ij->i", d, d) <= radius_kpc * radius_kpc


def from_swiftsimio(
    data: Any,
    *,
    centre: str = "shrinking_spheres",
    region: Optional[Tuple[Any, Any]] = None,
    read_gas: bool = True,
    redshift: Optional[float] = None,
    cosmology: Any = None,
) -> dict:
    """The arguments of Galaxy.from_arrays from a swiftsimio dataset (docs/python.md)."""
    _check_centre(centre, CENTRE_METHODS)
    meta = data.metadata
    a = float(meta.scale_factor)
    z = float(getattr(meta, "redshift", 1.0 / a - 1.0)) if redshift is None else float(redshift)
    # BoxSize is comoving (a-scale exponent 1): swiftsimio's to_physical makes it a x it.
    box_kpc = None
    if getattr(meta, "boxsize", None) is not None:
        box_kpc = float(_swift_values(meta.boxsize, "kpc").reshape(-1)[0])

    def unit_of(value, unit):
        if hasattr(value, "to_physical"):
            value = value.to_physical()
        if hasattr(value, "to_value"):
            return value.to_value(unit)
        return np.asarray(value, dtype=np.float64)  # plain numbers: physical kpc

    s = data.stars
    for name in ("coordinates", "velocities", "masses"):
        if not _has(s, name):
            raise _error(f"swiftsimio stars: no {name} (PartType4) in {meta.filename}")
    stars = {
        "position_kpc": _swift_values(s.coordinates, "kpc"),
        "velocity_kms": _swift_values(s.velocities, "km/s"),
        "mass_msun": _swift_values(s.masses, "Msun"),
    }
    stars["initial_mass_msun"] = (
        _swift_values(s.initial_masses, "Msun") if _has(s, "initial_masses")
        else stars["mass_msun"]
    )
    # Ages at the snapshot's epoch: birth scale factors through the snapshot's own cosmology
    # (its Cosmology group, as swiftsimio's metadata.cosmology holds it: astropy), or birth
    # times in a run without cosmology.
    if _has(s, "birth_scale_factors"):
        cosmo = cosmology if cosmology is not None else getattr(meta, "cosmology", None)
        if cosmo is None:
            raise _error(
                f"{meta.filename}: stars have BirthScaleFactors but the snapshot has no "
                "cosmology (Cosmology group with 'Cosmological run' = 1): pass cosmology= "
                "(an astropy cosmology)"
            )
        birth_a = _swift_values(s.birth_scale_factors, "dimensionless")
        t_now = cosmo.age(1.0 / a - 1.0).to_value("Gyr")
        stars["age_gyr"] = t_now - cosmo.age(1.0 / birth_a - 1.0).to_value("Gyr")
    elif _has(s, "birth_times"):
        if getattr(meta, "time", None) is None:
            raise _error(f"{meta.filename}: stars have BirthTimes but the header no Time")
        stars["age_gyr"] = float(unit_of(meta.time, "Gyr")) - _swift_values(s.birth_times, "Gyr")
    else:
        raise _error(f"swiftsimio stars: neither BirthScaleFactors nor BirthTimes in "
                     f"{meta.filename}")
    if _has(s, "metal_mass_fractions"):
        stars["metallicity"] = _swift_values(s.metal_mass_fractions, "dimensionless")
    else:
        raise _error(f"swiftsimio stars: no MetalMassFractions in {meta.filename}")
    # SWIFT's h is the kernel's width; its support radius, what ifusim's smoothing length is
    # (data/galaxy_data.h), is gamma h with the snapshot's "Kernel gamma" (HydroScheme).
    gamma = None
    scheme = getattr(meta, "hydro_scheme", None) or {}
    if "Kernel gamma" in scheme:
        gamma = float(np.asarray(scheme["Kernel gamma"]).reshape(-1)[0])
    if gamma is not None and _has(s, "smoothing_lengths"):
        stars["smoothing_length_kpc"] = gamma * _swift_values(s.smoothing_lengths, "kpc")

    gas = {}
    if read_gas and getattr(meta, "n_gas", 0) and _has(data.gas, "coordinates"):
        g = data.gas
        for name in ("velocities", "masses", "densities", "metal_mass_fractions",
                     "star_formation_rates"):
            if not _has(g, name):
                raise _error(f"swiftsimio gas: no {name} (PartType0) in {meta.filename}; "
                             "read_gas=False reads the stars alone")
        gas = {
            "position_kpc": _swift_values(g.coordinates, "kpc"),
            "velocity_kms": _swift_values(g.velocities, "km/s"),
            "mass_msun": _swift_values(g.masses, "Msun"),
            "density_msun_per_kpc3": _swift_values(g.densities, "Msun/kpc**3"),
            "metallicity": _swift_values(g.metal_mass_fractions, "dimensionless"),
            # SWIFT's EAGLE-like models store minus the scale factor (or time) of the last star
            # formation where a particle is not forming stars: those are rates of 0.
            "sfr_msun_per_yr": np.maximum(_swift_values(g.star_formation_rates, "Msun/yr"), 0),
        }
        if _has(g, "internal_energies"):
            gas["internal_energy_km2_s2"] = _swift_values(g.internal_energies, "km**2/s**2")

    stars, gas = _select(stars, gas, region, box_kpc, unit_of)
    stars, gas, _found = centre_arrays(stars, gas, centre, box_kpc)
    source = f"swiftsimio {meta.filename}"
    return dict(stars=stars, gas=gas, redshift=z, source=source)


def _select(stars: dict, gas: dict, region, box_kpc, unit_of) -> Tuple[dict, dict]:
    """The particles within region = (centre, radius) (physical kpc or unyt/astropy
    quantities), in the periodic box."""
    if region is None:
        return stars, gas
    out = []
    for fields in (stars, gas):
        if not fields:
            out.append(fields)
            continue
        keep = _region_mask(fields["position_kpc"], region, box_kpc, unit_of)
        out.append({k: np.asarray(v)[keep] for k, v in fields.items()})
    if not len(out[0].get("position_kpc", ())):
        raise _error(f"region={region!r}: no stars within it")
    return out[0], out[1]


# ---- pynbody ---------------------------------------------------------------------------------


def _pyn_values(family: Any, name: str, unit: Optional[str]) -> np.ndarray:
    """pynbody array ``name`` in physical ``unit`` (SimArray.in_units: a and h from the
    snapshot's conversion context), as float64 numpy; ``unit`` None: dimensionless."""
    try:
        array = family[name]
    except KeyError:
        raise _error(
            f"pynbody {family.families()[0].name if family.families() else ''} array {name!r}: "
            f"not in {getattr(family, 'filename', 'the snapshot')} (ifusim needs it)"
        ) from None
    if unit is not None:
        array = array.in_units(unit)
    return np.asarray(array, dtype=np.float64)


def _pyn_has(family: Any, name: str) -> bool:
    return name in family.loadable_keys() or name in family.keys()


def from_pynbody(
    sim: Any,
    *,
    centre: str = "shrinking_spheres",
    read_gas: bool = True,
    redshift: Optional[float] = None,
) -> dict:
    """The arguments of Galaxy.from_arrays from a pynbody SimSnap (docs/python.md)."""
    import pynbody

    _check_centre(centre, CENTRE_METHODS + ("pynbody",))
    where = getattr(sim, "filename", "pynbody snapshot")
    if len(sim.s) == 0:
        raise _error(f"{where}: no star particles")
    z = redshift
    if z is None:
        a = sim.properties.get("a")
        z = 1.0 / float(a) - 1.0 if a else float(sim.properties.get("z", 0.0))
    box_kpc = None
    if "boxsize" in sim.properties:
        try:
            box = sim.properties["boxsize"]
            box_kpc = float(box.in_units("kpc", **sim.conversion_context()))
        except Exception:  # a box without units (or an infinite one): not periodic for us
            box_kpc = None

    def read(family, gas: bool) -> dict:
        out = {
            "position_kpc": _pyn_values(family, "pos", "kpc"),
            "velocity_kms": _pyn_values(family, "vel", "km s^-1"),
            "mass_msun": _pyn_values(family, "mass", "Msol"),
            "metallicity": _pyn_values(family, "metals", None),
        }
        if not gas:
            # pynbody's derived `age`: the snapshot's time minus tform (a formation scale
            # factor through the snapshot's cosmology where the code stores one: Gadget, GIZMO).
            out["age_gyr"] = _pyn_values(family, "age", "Gyr")
            out["initial_mass_msun"] = (
                _pyn_values(family, "massform", "Msol") if _pyn_has(family, "massform")
                else out["mass_msun"]
            )
            return out
        out["density_msun_per_kpc3"] = _pyn_values(family, "rho", "Msol kpc^-3")
        if _pyn_has(family, "sfr"):
            out["sfr_msun_per_yr"] = np.maximum(_pyn_values(family, "sfr", "Msol yr^-1"), 0)
        else:
            raise _error(f"{where}: the gas has no star formation rates ('sfr'), which ifusim's "
                         "gas needs; read_gas=False reads the stars alone")
        if _pyn_has(family, "u"):
            out["internal_energy_km2_s2"] = _pyn_values(family, "u", "km^2 s^-2")
        if _pyn_has(family, "ne"):
            out["electron_abundance"] = _pyn_values(family, "ne", None)
        return out

    def read_all() -> Tuple[dict, dict]:
        stars = read(sim.s, gas=False)
        gas = read(sim.g, gas=True) if read_gas and len(sim.g) else {}
        return stars, gas

    if centre == "pynbody":
        # pynbody's own centring (pynbody.analysis.center: shrinking spheres and the central
        # velocity), undone when the arrays are read: the user's snapshot is left as it was.
        with pynbody.analysis.center(sim.s, mode="ssc", with_velocity=True, move_all=True):
            stars, gas = read_all()
    else:
        stars, gas = read_all()
        stars, gas, _found = centre_arrays(stars, gas, centre, box_kpc)
    return dict(stars=stars, gas=gas, redshift=float(z), source=f"pynbody {where}")
