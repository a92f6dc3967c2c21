"""JAX interface of ifusim (issue 27, docs/gradients.md "From JAX").

``ifusim.jax.cube(config, stars, redshift=..., gas=...)`` is the run's cube as a JAX array,
differentiable with respect to the star (and gas) fields: ``jax.grad(loss)(stars)`` works through
a whole ifusim run. The
engine runs on the host through ``jax.pure_callback``, wrapped in ``jax.custom_vjp``: the primal
calls :func:`ifusim.run`; under differentiation the forward calls :func:`ifusim.forward` and keeps
the run (an integer id, the residual, into this module's registry of kept runs) and the backward
takes it back and calls its ``vjp``, so a gradient costs one forward and one backward pass. Not
jit-compiled into XLA: each call is one engine run.

The kept runs' policy (:func:`set_max_kept`): a run is released by the backward that uses it; at
most ``max_kept`` (2 by default) are held, the oldest released first, so that a forward never
differentiated (``jax.vjp`` whose function is never called, a callback JAX duplicated) cannot hold
its memory for ever. A backward whose run was released (or that runs a second time on the same
residual) calls :func:`ifusim.vjp`, which runs the forward again: the same gradients, bitwise, at
the old cost.

Needs jax (the package's extra: ``pip install ".[jax]"``), which it does not install by default.
"""

from __future__ import annotations

import collections
import itertools
import json
import threading
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

import ifusim

try:
    import jax
    import jax.numpy as jnp
except ImportError as error:  # pragma: no cover - exercised where jax is missing
    raise ImportError("ifusim.jax needs jax: pip install jax") from error

__all__ = ["cube", "set_max_kept", "kept_count"]

# The forward runs kept for their backward: id -> ifusim.Forward, oldest first. An id is the
# residual JAX carries from the forward to the backward (an int32 array: JAX's default integer).
_kept: "collections.OrderedDict[int, ifusim.Forward]" = collections.OrderedDict()
_kept_lock = threading.Lock()
_kept_ids = itertools.count(1)
_max_kept = 2


def set_max_kept(n: int) -> None:
    """How many forward runs waiting for their backward are held at most (2 by default; 0: none,
    every gradient runs the forward again). Each holds its run's particles and stage state
    (docs/gradients.md, "A forward kept for its backward")."""
    global _max_kept
    if int(n) < 0:
        raise ValueError(f"max_kept: {n}, expected a count >= 0")
    with _kept_lock:
        _max_kept = int(n)
        released = _evict()
    for run in released:
        run.release()


def kept_count() -> int:
    """How many forward runs are held now, waiting for their backward."""
    with _kept_lock:
        return len(_kept)


def _evict() -> list:
    """Takes the oldest kept runs out beyond _max_kept (under the lock); the caller releases
    them outside it."""
    out = []
    while len(_kept) > _max_kept:
        out.append(_kept.popitem(last=False)[1])
    return out


def _keep(run: "ifusim.Forward") -> int:
    """A new id for ``run`` (0: not kept, where max_kept is 0); the oldest released beyond
    max_kept. Ids wrap within int32, far beyond any number held at once."""
    with _kept_lock:
        if _max_kept == 0:
            released, key = [run], 0
        else:
            key = next(_kept_ids) % (2**31 - 1) + 1
            _kept[key] = run
            released = _evict()
    for old in released:
        old.release()
    return key


def _take(key: int) -> "Optional[ifusim.Forward]":
    with _kept_lock:
        return _kept.pop(key, None)

# The final cube's shape for each (config, overrides, redshift): the field and the band, which
# do not depend on the stars (a run of a few stars finds it once).
_shapes: Dict[str, Tuple[int, int, int]] = {}


def _galaxy(stars: Mapping[str, Any], redshift: float,
            gas: Optional[Mapping[str, Any]] = None) -> "ifusim.Galaxy":
    return ifusim.Galaxy.from_arrays(
        {k: np.asarray(v) for k, v in stars.items()}, redshift=redshift,
        gas=None if gas is None else {k: np.asarray(v) for k, v in gas.items()})


def _fields(stars: Mapping[str, Any], gas: Optional[Mapping[str, Any]]):
    """The differentiated fields' keys as ifusim.vjp names them ("stars.age_gyr",
    "gas.sfr_msun_per_yr", ...), sorted, and their arrays."""
    fields = {"stars." + k: v for k, v in stars.items()}
    fields.update({"gas." + k: v for k, v in (gas or {}).items()})
    keys = sorted(fields)
    return keys, [fields[k] for k in keys]


def _galaxy_of(keys, values, redshift: float, with_gas: bool) -> "ifusim.Galaxy":
    """The galaxy of the keyed arrays _fields made."""
    parts: Dict[str, Dict[str, Any]] = {"stars": {}, "gas": {}}
    for key, value in zip(keys, values):
        kind, name = key.split(".", 1)
        parts[kind][name] = value
    return _galaxy(parts["stars"], redshift, parts["gas"] if with_gas else None)


def _shape(config, overrides, redshift) -> Tuple[int, int, int]:
    key = json.dumps([config if isinstance(config, Mapping) else str(config), overrides,
                      redshift], sort_keys=True, default=str)
    if key not in _shapes:
        # Eight light stars on an ellipse (1 x 0.5 kpc) in circular motion: a half-mass radius, an
        # inertia tensor and an angular momentum for orient's face-on alignment (a single star
        # has none of them, and orient refused it).
        phi = np.linspace(0.0, 2.0 * np.pi, 8, endpoint=False)
        few = {
            "position_kpc": np.column_stack([np.cos(phi), 0.5 * np.sin(phi), np.zeros(8)]),
            "velocity_kms": np.column_stack([-100.0 * np.sin(phi), 50.0 * np.cos(phi),
                                             np.zeros(8)]),
            "initial_mass_msun": np.ones(8),
            "age_gyr": np.ones(8),
            "metallicity": np.full(8, 0.02),
        }
        _shapes[key] = tuple(
            ifusim.run(config, galaxy=_galaxy(few, redshift), overrides=overrides,
                       progress=False).data.shape
        )
    return _shapes[key]


def cube(
    config: Any,
    stars: Mapping[str, Any],
    *,
    redshift: float,
    gas: Optional[Mapping[str, Any]] = None,
    overrides: Optional[Mapping[str, Any]] = None,
) -> "jax.Array":
    """The cube's data (n_wave, ny, nx), float32, of ``config`` run on the stars ``stars`` (the
    arrays :meth:`ifusim.Galaxy.from_arrays` takes for its ``stars``, as JAX or numpy arrays) and,
    where given, the gas cells ``gas`` (those it takes for its ``gas``).

    Its VJP gives every field of ``stars`` and ``gas`` a gradient of the field's shape and dtype:
    the keys :func:`ifusim.vjp` fills (``initial_mass_msun``, ``age_gyr``, ``metallicity``,
    ``velocity_kms`` of the stars, and their ``position_kpc`` where the aperture's smoothing is
    ``"kernel"``; with emission lines the gas's ``sfr_msun_per_yr``, ``metallicity``,
    ``velocity_kms``; with dust the gas's ``mass_msun``) from the kept forward's ``vjp`` (bitwise
    :func:`ifusim.vjp`'s); zeros for the fields the engine does not differentiate (positions
    without the stars' kernel smoothing: the spaxel a particle falls in is piecewise constant;
    the stars' ``mass_msun`` and ``smoothing_length_kpc``; the gas's density). NaN voxels of the
    cube (outside a circular aperture) are constants of the model.
    """
    shape = _shape(config, overrides, redshift)
    keys, arrays = _fields(stars, gas)
    with_gas = gas is not None

    def galaxy_of(values):
        return _galaxy_of(keys, values, redshift, with_gas)

    def run_on_host(*values):
        data = ifusim.run(config, galaxy=galaxy_of(values), overrides=overrides,
                          progress=False).data
        return np.asarray(data, dtype=np.float32)

    def forward_on_host(*values):
        data, kept = ifusim.forward(config, galaxy_of(values), overrides=overrides,
                                    progress=False)
        return np.asarray(data.data, dtype=np.float32), np.int32(_keep(kept))

    def vjp_on_host(key, g, *values):
        kept = _take(int(key))
        if kept is None:  # released (max_kept), or a second backward: the forward runs again
            grads = ifusim.vjp(config, galaxy_of(values), np.asarray(g, dtype=np.float64),
                               overrides=overrides, progress=False)
        else:
            try:
                grads = kept.vjp(np.asarray(g, dtype=np.float64))
            finally:
                kept.release()
        return tuple(
            np.asarray(grads.get(name, np.zeros(np.shape(v))), dtype=np.asarray(v).dtype)
            for name, v in zip(keys, values)
        )

    out_type = jax.ShapeDtypeStruct(shape, jnp.float32)
    key_type = jax.ShapeDtypeStruct((), jnp.int32)

    @jax.custom_vjp
    def run(*values):
        return jax.pure_callback(run_on_host, out_type, *values)

    def run_fwd(*values):
        data, key = jax.pure_callback(forward_on_host, (out_type, key_type), *values)
        return data, (key, values)

    def run_bwd(residuals, g):
        key, values = residuals
        types = tuple(jax.ShapeDtypeStruct(jnp.shape(v), jnp.result_type(v)) for v in values)
        return jax.pure_callback(vjp_on_host, types, key, g, *values)

    run.defvjp(run_fwd, run_bwd)
    return run(*(jnp.asarray(value) for value in arrays))
