"""ifusim.jax.cube (docs/gradients.md, "From JAX"): jax.grad through a whole run equals
ifusim.vjp bitwise, and the cube equals ifusim.run's. Skipped (visibly: pytest -rs) where jax is
not installed (scripts/install-python.sh, and so CI, installs it: the package's extra "jax")."""

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason='jax is not installed (pip install ".[jax]")')
import jax.numpy as jnp  # noqa: E402

import ifusim  # noqa: E402
import ifusim.jax  # noqa: E402
from test_vjp import REDSHIFT, config, stars  # noqa: E402


def test_jax_grad_through_a_run_equals_ifusim_vjp_bitwise():
    arrays = stars(n=20, seed=4)
    galaxy = ifusim.Galaxy.from_arrays(arrays, redshift=REDSHIFT)
    reference = ifusim.run(config(True), galaxy=galaxy, progress=False)
    g = np.random.default_rng(9).normal(size=reference.data.shape).astype(np.float32)

    def loss(s):
        return jnp.sum(jnp.asarray(g) * ifusim.jax.cube(config(True), s, redshift=REDSHIFT))

    inputs = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in arrays.items()}
    cube = ifusim.jax.cube(config(True), inputs, redshift=REDSHIFT)
    assert np.array_equal(np.asarray(cube), reference.data)
    grads = jax.grad(loss)(inputs)
    expected = ifusim.vjp(config(True), galaxy, g.astype(np.float64), progress=False)
    for name, value in inputs.items():
        got = np.asarray(grads[name])
        assert got.shape == value.shape and got.dtype == value.dtype, name
        if "stars." + name in expected:
            want = expected["stars." + name].astype(np.float32)
            assert np.any(want != 0), name
            assert np.array_equal(got, want), name
        else:
            assert not np.any(got), name  # positions: not differentiated (zeros)
