"""JAX interface of ifusim (issue 27, docs/gradients.md "From JAX").

``ifusim.jax.cube(config, stars, redshift=...)`` is the run's cube as a JAX array, differentiable
with respect to the star fields: ``jax.grad(loss)(stars)`` works through a whole ifusim run. The
engine runs on the host through ``jax.pure_callback`` (forward: :func:`ifusim.run`; backward:
:func:`ifusim.vjp`), wrapped in ``jax.custom_vjp``. Not jit-compiled into XLA: each call is one
engine run, each gradient one VJP (which runs the forward again).

Needs jax (the package's extra: ``pip install ".[jax]"``), which it does not install by default.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

import ifusim

try:
    import jax
    import jax.numpy as jnp
except ImportError as error:  # pragma: no cover - exercised where jax is missing
    raise ImportError("ifusim.jax needs jax: pip install jax") from error

__all__ = ["cube"]

# The final cube's shape for each (config, overrides, redshift): the field and the band, which
# do not depend on the stars (a one-star run finds it once).
_shapes: Dict[str, Tuple[int, int, int]] = {}


def _galaxy(stars: Mapping[str, Any], redshift: float) -> "ifusim.Galaxy":
    return ifusim.Galaxy.from_arrays({k: np.asarray(v) for k, v in stars.items()},
                                     redshift=redshift)


def _shape(config, overrides, redshift) -> Tuple[int, int, int]:
    key = json.dumps([config if isinstance(config, Mapping) else str(config), overrides,
                      redshift], sort_keys=True, default=str)
    if key not in _shapes:
        one = {
            "position_kpc": np.zeros((1, 3)),
            "velocity_kms": np.zeros((1, 3)),
            "initial_mass_msun": np.ones(1),
            "age_gyr": np.ones(1),
            "metallicity": np.full(1, 0.02),
        }
        _shapes[key] = tuple(
            ifusim.run(config, galaxy=_galaxy(one, redshift), overrides=overrides,
                       progress=False).data.shape
        )
    return _shapes[key]


def cube(
    config: Any,
    stars: Mapping[str, Any],
    *,
    redshift: float,
    overrides: Optional[Mapping[str, Any]] = None,
) -> "jax.Array":
    """The cube's data (n_wave, ny, nx), float32, of ``config`` run on the stars ``stars`` (the
    arrays :meth:`ifusim.Galaxy.from_arrays` takes for its ``stars``, as JAX or numpy arrays).

    Its VJP gives every field of ``stars`` a gradient of the field's shape and dtype:
    ``initial_mass_msun``, ``age_gyr``, ``metallicity`` and ``velocity_kms`` from
    :func:`ifusim.vjp`; zeros for the fields the engine does not differentiate (positions: the
    spaxel a star falls in is piecewise constant; ``mass_msun``). NaN voxels of the cube (outside
    a circular aperture) are constants of the model.
    """
    shape = _shape(config, overrides, redshift)
    names = sorted(stars)

    def run_on_host(*values):
        data = ifusim.run(config, galaxy=_galaxy(dict(zip(names, values)), redshift),
                          overrides=overrides, progress=False).data
        return np.asarray(data, dtype=np.float32)

    def vjp_on_host(g, *values):
        grads = ifusim.vjp(config, _galaxy(dict(zip(names, values)), redshift),
                           np.asarray(g, dtype=np.float64), overrides=overrides, progress=False)
        return tuple(
            np.asarray(grads.get("stars." + name, np.zeros(np.shape(v))), dtype=np.asarray(v).dtype)
            for name, v in zip(names, values)
        )

    out_type = jax.ShapeDtypeStruct(shape, jnp.float32)

    @jax.custom_vjp
    def run(*values):
        return jax.pure_callback(run_on_host, out_type, *values)

    def run_fwd(*values):
        return run(*values), values

    def run_bwd(values, g):
        types = tuple(jax.ShapeDtypeStruct(jnp.shape(v), jnp.result_type(v)) for v in values)
        return jax.pure_callback(vjp_on_host, types, g, *values)

    run.defvjp(run_fwd, run_bwd)
    return run(*(jnp.asarray(stars[name]) for name in names))
