"""ifusim.jax.cube (docs/gradients.md, "From JAX"): jax.grad through a whole run equals
ifusim.vjp bitwise, and the cube equals ifusim.run's. Skipped (visibly: pytest -rs) where jax is
not installed (scripts/install-python.sh, and so CI, installs it: the package's extra "jax")."""

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason='jax is not installed (pip install ".[jax]")')
import jax.numpy as jnp  # noqa: E402

import ifusim  # noqa: E402
import ifusim.jax  # noqa: E402
from test_vjp import REDSHIFT, config, dust_lines_config, dusty_gas, stars  # noqa: E402


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
    # The forward was kept for the backward (no second forward run) and released by it.
    assert ifusim.jax.kept_count() == 0


def _grads_of_g(arrays, g, transform=lambda f: f):
    def loss(s):
        return jnp.sum(jnp.asarray(g) * ifusim.jax.cube(config(True), s, redshift=REDSHIFT))

    inputs = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in arrays.items()}
    return {k: np.asarray(v) for k, v in transform(jax.grad(loss))(inputs).items()}


def test_the_kept_forward_is_used_once_and_a_released_one_runs_the_forward_again():
    """The registry's policy (docs/gradients.md, "From JAX"): at most max_kept forwards held, the
    oldest released; a backward whose forward was released, and a second backward on the same
    residual, fall back to ifusim.vjp: the same gradients, bitwise."""
    arrays = stars(n=12, seed=5)
    galaxy = ifusim.Galaxy.from_arrays(arrays, redshift=REDSHIFT)
    reference = ifusim.run(config(True), galaxy=galaxy, progress=False)
    g = np.random.default_rng(3).normal(size=reference.data.shape).astype(np.float32)
    expected = _grads_of_g(arrays, g)
    inputs = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in arrays.items()}

    def cube_of(s):
        return ifusim.jax.cube(config(True), s, redshift=REDSHIFT)

    try:
        # Forwards never differentiated: no more than max_kept stay held.
        ifusim.jax.set_max_kept(2)
        pending = [jax.vjp(cube_of, inputs) for _ in range(3)]
        assert ifusim.jax.kept_count() == 2
        assert np.array_equal(np.asarray(pending[0][0]), reference.data)
        # The oldest was released: its backward runs the forward again, the same gradients.
        for cube, pullback in pending:
            (got,) = pullback(jnp.asarray(g))
            for name in expected:
                assert np.array_equal(np.asarray(got[name]), expected[name]), name
        assert ifusim.jax.kept_count() == 0
        # A second backward on the same residual (its forward released by the first).
        (again,) = pending[-1][1](jnp.asarray(g))
        for name in expected:
            assert np.array_equal(np.asarray(again[name]), expected[name]), name
        # Nothing kept at all, and jit-compiled around the callbacks: the same gradients.
        ifusim.jax.set_max_kept(0)
        for transform in (lambda f: f, jax.jit):
            got = _grads_of_g(arrays, g, transform)
            for name in expected:
                assert np.array_equal(got[name], expected[name]), name
        assert ifusim.jax.kept_count() == 0
        with pytest.raises(ValueError, match="max_kept"):
            ifusim.jax.set_max_kept(-1)
    finally:
        ifusim.jax.set_max_kept(2)
    got = _grads_of_g(arrays, g, jax.jit)
    for name in expected:
        assert np.array_equal(got[name], expected[name]), name
    assert ifusim.jax.kept_count() == 0


def test_the_cube_shape_run_suits_a_face_on_orient():
    """The cube's shape is found by a run of a few stars before the first call: orient's face-on
    alignment (its default) needs a half-mass radius, which a single star lacks."""
    cfg = config(False)
    cfg["stages"]["orient"] = {}
    cfg["seed"] = 11  # another cache key than the other tests' configs
    arrays = stars(n=10, seed=12)
    reference = ifusim.run(cfg, galaxy=ifusim.Galaxy.from_arrays(arrays, redshift=REDSHIFT),
                           progress=False)
    cube = ifusim.jax.cube(cfg, {k: jnp.asarray(v) for k, v in arrays.items()},
                           redshift=REDSHIFT)
    assert np.array_equal(np.asarray(cube), reference.data, equal_nan=True)
    assert np.any(np.nan_to_num(reference.data) > 0)


def test_jax_grad_through_the_gas_lines_and_dust_equals_ifusim_vjp_bitwise():
    """The gas's fields as a second argument: emission lines and dust (docs/gradients.md, "Gas:
    the emission lines" and "Dust"), every gradient bitwise ifusim.vjp's."""
    star_arrays = stars(n=20, seed=4)
    gas_arrays = dusty_gas(star_arrays)
    galaxy = ifusim.Galaxy.from_arrays(star_arrays, gas=gas_arrays, redshift=REDSHIFT)
    reference = ifusim.run(dust_lines_config(), galaxy=galaxy, progress=False)
    g = np.random.default_rng(10).normal(size=reference.data.shape).astype(np.float32)

    def loss(s, gs):
        cube = ifusim.jax.cube(dust_lines_config(), s, gas=gs, redshift=REDSHIFT)
        return jnp.sum(jnp.asarray(g) * cube)

    stars_in = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in star_arrays.items()}
    gas_in = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in gas_arrays.items()}
    cube = ifusim.jax.cube(dust_lines_config(), stars_in, gas=gas_in, redshift=REDSHIFT)
    assert np.array_equal(np.asarray(cube), reference.data)
    star_grads, gas_grads = jax.grad(loss, argnums=(0, 1))(stars_in, gas_in)
    expected = ifusim.vjp(dust_lines_config(), galaxy, g.astype(np.float64), progress=False)
    for kind, inputs, grads in (("stars", stars_in, star_grads), ("gas", gas_in, gas_grads)):
        for name, value in inputs.items():
            got = np.asarray(grads[name])
            assert got.shape == value.shape and got.dtype == value.dtype, name
            key = kind + "." + name
            if key in expected:
                want = expected[key].astype(np.float32)
                assert np.any(want != 0), key
                assert np.array_equal(got, want), key
            else:
                assert not np.any(got), key  # positions, density: not differentiated (zeros)
    assert "gas.mass_msun" in expected and "gas.sfr_msun_per_yr" in expected
    assert ifusim.jax.kept_count() == 0


def test_jax_grad_gives_the_position_under_kernel_smoothing_bitwise_ifusim_vjp():
    """With the aperture's kernel smoothing (and given smoothing lengths, held fixed) the stars'
    position_kpc gets ifusim.vjp's stars.position_kpc (docs/gradients.md), not zeros."""
    arrays = stars(n=20, seed=6)
    arrays["smoothing_length_kpc"] = np.full(len(arrays["initial_mass_msun"]), 1.5, np.float32)
    cfg = config(False)
    cfg["stages"]["aperture"] = {"smoothing": "kernel"}
    galaxy = ifusim.Galaxy.from_arrays(arrays, redshift=REDSHIFT)
    reference = ifusim.run(cfg, galaxy=galaxy, progress=False)
    g = np.random.default_rng(11).normal(size=reference.data.shape).astype(np.float32)

    def loss(s):
        return jnp.sum(jnp.asarray(g) * ifusim.jax.cube(cfg, s, redshift=REDSHIFT))

    inputs = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in arrays.items()}
    grads = jax.grad(loss)(inputs)
    expected = ifusim.vjp(cfg, galaxy, g.astype(np.float64), progress=False)
    want = expected["stars.position_kpc"].astype(np.float32)
    assert want.shape == arrays["position_kpc"].shape and np.any(want[:, :2] != 0)
    assert np.array_equal(np.asarray(grads["position_kpc"]), want)
    assert not np.any(np.asarray(grads["smoothing_length_kpc"]))  # held fixed: zeros
