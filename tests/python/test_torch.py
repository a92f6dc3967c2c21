"""ifusim.torch.cube (docs/gradients.md, "From PyTorch"): backward through a whole run equals
ifusim.vjp bitwise, the cube equals ifusim.run's, and the gradients agree with central finite
differences of the torch function's own forward (mass, age, metallicity, line-of-sight velocity).
Skipped (visibly: pytest -rs) where torch is not installed (scripts/install-python.sh installs
it: the package's extra "torch")."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason='torch is not installed (pip install ".[torch]")')

import ifusim  # noqa: E402
import ifusim.torch  # noqa: E402
from test_vjp import (MILES, REDSHIFT, VELOCITY_BIN_KMS, config,  # noqa: E402
                      dust_lines_config, dusty_gas, stars)

FIELDS = ("initial_mass_msun", "age_gyr", "metallicity", "velocity_kms")


def tensors(arrays, dtype, requires_grad=True):
    return {k: torch.tensor(np.asarray(v), dtype=dtype, requires_grad=requires_grad)
            for k, v in arrays.items()}


def backward(arrays, g, dtype):
    """The cube and the gradients of L = <g, cube> through ifusim.torch.cube."""
    inputs = tensors(arrays, dtype)
    cube = ifusim.torch.cube(config(True), inputs, redshift=REDSHIFT)
    torch.sum(torch.from_numpy(g) * cube).backward()
    return cube, inputs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_backward_through_a_run_equals_ifusim_vjp_bitwise(dtype):
    arrays = stars(n=20, seed=4)
    galaxy = ifusim.Galaxy.from_arrays(arrays, redshift=REDSHIFT)
    reference = ifusim.run(config(True), galaxy=galaxy, progress=False)
    g = np.random.default_rng(9).normal(size=reference.data.shape).astype(np.float32)

    cube, inputs = backward(arrays, g, dtype)
    assert cube.dtype == torch.float32 and tuple(cube.shape) == reference.data.shape
    assert np.array_equal(cube.detach().numpy(), reference.data)
    expected = ifusim.vjp(config(True), galaxy, g.astype(np.float64), progress=False)
    numpy_dtype = np.float32 if dtype == torch.float32 else np.float64
    for name, value in inputs.items():
        got = value.grad
        assert got is not None and got.shape == value.shape and got.dtype == dtype, name
        got = got.numpy()
        if "stars." + name in expected:
            want = expected["stars." + name].astype(numpy_dtype)
            assert np.any(want != 0), name
            assert np.array_equal(got, want), name
        else:
            assert not np.any(got), name  # positions: not differentiated (zeros)


def test_only_the_fields_that_require_a_gradient_get_one():
    arrays = stars(n=8, seed=6)
    inputs = tensors(arrays, torch.float64, requires_grad=False)
    inputs["age_gyr"].requires_grad_(True)
    cube = ifusim.torch.cube(config(False), inputs, redshift=REDSHIFT)
    assert cube.requires_grad
    cube.sum().backward()
    assert inputs["age_gyr"].grad is not None and torch.any(inputs["age_gyr"].grad != 0)
    for name in set(inputs) - {"age_gyr"}:
        assert inputs[name].grad is None, name
    # Nothing requires a gradient: a plain tensor, no graph.
    plain = ifusim.torch.cube(config(False), tensors(arrays, torch.float32, False),
                              redshift=REDSHIFT)
    assert not plain.requires_grad
    assert torch.equal(plain, cube.detach())



def test_the_kept_forward_is_released_by_backward_or_with_its_graph(monkeypatch):
    """The Function keeps ifusim.forward's run in ctx (docs/gradients.md, "From PyTorch"):
    backward uses and releases it; a second backward (retain_graph) runs the forward again, with
    the same gradients, bitwise; a graph dropped without a backward frees it."""
    import gc
    import weakref

    kept = []
    forward = ifusim.forward

    def recording_forward(*args, **kwargs):
        cube, run = forward(*args, **kwargs)
        kept.append(weakref.ref(run))
        return cube, run

    monkeypatch.setattr(ifusim, "forward", recording_forward)
    arrays = stars(n=10, seed=8)
    galaxy = ifusim.Galaxy.from_arrays(arrays, redshift=REDSHIFT)
    reference = ifusim.run(config(True), galaxy=galaxy, progress=False)
    g = np.random.default_rng(4).normal(size=reference.data.shape).astype(np.float32)
    expected = ifusim.vjp(config(True), galaxy, g.astype(np.float64), progress=False)

    inputs = tensors(arrays, torch.float64)
    cube = ifusim.torch.cube(config(True), inputs, redshift=REDSHIFT)
    assert len(kept) == 1 and not kept[0]().released
    loss = torch.sum(torch.from_numpy(g) * cube)
    loss.backward(retain_graph=True)
    assert kept[0]() is None or kept[0]().released
    first = {name: inputs[name].grad.clone() for name in FIELDS}
    for name in FIELDS:
        assert np.array_equal(first[name].numpy(), expected["stars." + name]), name
        inputs[name].grad = None
    loss.backward()  # the forward released: ifusim.vjp, the same gradients
    for name in FIELDS:
        assert torch.equal(inputs[name].grad, first[name]), name

    # Never differentiated: the kept run goes with the graph.
    cube = ifusim.torch.cube(config(True), tensors(arrays, torch.float32), redshift=REDSHIFT)
    assert len(kept) == 2 and kept[1]() is not None
    del cube
    gc.collect()
    assert kept[1]() is None
    # Nothing requires a gradient: nothing kept.
    ifusim.torch.cube(config(True), tensors(arrays, torch.float32, False), redshift=REDSHIFT)
    assert len(kept) == 2

def test_torch_imports_after_ifusim():
    """A CUDA build of the engine links the CUDA Toolkit's NCCL, and PyPI's torch needs its own,
    newer one: imported after ifusim, torch failed on a missing NCCL symbol until ifusim loaded
    PyPI's NCCL first (ifusim._load_pip_nccl). A fresh interpreter, since this one has torch."""
    code = "import ifusim; import torch; print(float(torch.ones(2).sum()))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2.0"


def grid_nodes(cli):
    """The MILES grid's ages (Gyr) and metallicities (Z), from `ifusim templates info`."""
    info = subprocess.run([cli, "templates", "info", os.path.expandvars(MILES)], check=True,
                          capture_output=True, text=True).stdout
    rows = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    return (np.array(rows["age_gyr"].split(), dtype=float),
            np.array(rows["metallicity Z"].split(), dtype=float))


def between_nodes(nodes, rng, n):
    """n values at the geometric middle of random cells of `nodes` (the interpolation is linear
    in log10 within a cell), and each one's distance in log10 to its cell's nodes."""
    logs = np.log10(nodes)
    cells = rng.integers(0, len(nodes) - 1, n)
    middle = 0.5 * (logs[cells] + logs[cells + 1])
    return 10.0 ** middle, 0.5 * (logs[cells + 1] - logs[cells])


def loss_of(arrays, g):
    with torch.no_grad():
        cube = ifusim.torch.cube(config(False), tensors(arrays, torch.float32, False),
                                 redshift=REDSHIFT).double()
    return float(torch.sum(torch.nan_to_num(cube * torch.from_numpy(g))))


def central_difference(arrays, g, field, index, step, log=False):
    """dL/d(field) (or dL/d log10(field) with log) at `index` by a central difference of the
    forward, over the step as the float32 field holds it."""
    up = {k: np.array(v, dtype=np.float32) for k, v in arrays.items()}
    down = {k: np.array(v, dtype=np.float32) for k, v in arrays.items()}
    value = float(arrays[field][index])
    if log:
        up[field][index] = value * 10.0 ** step
        down[field][index] = value * 10.0 ** -step
    else:
        up[field][index] = value + step
        down[field][index] = value - step
    h = float(up[field][index]) - float(down[field][index])
    if log:
        h = math.log10(float(up[field][index])) - math.log10(float(down[field][index]))
    return (loss_of(up, g) - loss_of(down, g)) / h


def test_torch_gradients_match_central_differences_of_the_forward(cli):
    """As test_vjp.py and tests/test_stellar_vjp.cpp: L is linear in the initial mass (steps of
    50 %: 1e-4 relative), in log10 age and log10 Z within a cell of the SSP grid (the stars at
    the cells' middles, steps of 0.8 of the half-cell: 1e-3), and in c ln(1 + v_los / c) within
    a velocity node spacing (v_los at 0.3 .. 0.7 of one, steps of 0.15 of it: 1e-3)."""
    rng = np.random.default_rng(11)
    arrays = stars(n=12, seed=8)
    ages, metallicities = grid_nodes(cli)
    n = len(arrays["age_gyr"])
    # Ages up to 12 Gyr: older ones would be older than the Universe at the galaxy's redshift.
    arrays["age_gyr"], age_half_cell = between_nodes(ages[ages <= 12.0], rng, n)
    arrays["metallicity"], z_half_cell = between_nodes(metallicities, rng, n)
    # Five stars 30 x heavier than the rest, so that their own light dominates the float
    # rounding of the voxels they change (the differences are of float32 cubes).
    checked = [0, 3, 6, 9, 11]
    arrays["initial_mass_msun"] = np.array(arrays["initial_mass_msun"], dtype=np.float64)
    arrays["initial_mass_msun"][checked] *= 30.0
    arrays = {k: np.asarray(v, dtype=np.float32) for k, v in arrays.items()}
    g = np.random.default_rng(5).normal(size=(640, 10, 10))

    inputs = tensors(arrays, torch.float64)
    torch.sum(torch.nan_to_num(
        ifusim.torch.cube(config(False), inputs, redshift=REDSHIFT).double()
        * torch.from_numpy(g))).backward()
    grad = {k: v.grad.numpy() for k, v in inputs.items()}

    results = {field: [] for field in FIELDS}  # (gradient, difference) per star
    for star in checked:
        age = float(arrays["age_gyr"][star])
        z = float(arrays["metallicity"][star])
        # dL/d log10 x = x ln(10) dL/dx.
        results["initial_mass_msun"].append((grad["initial_mass_msun"][star], central_difference(
            arrays, g, "initial_mass_msun", star, 0.5 * float(arrays["initial_mass_msun"][star]))))
        results["age_gyr"].append((grad["age_gyr"][star] * age * math.log(10.0), central_difference(
            arrays, g, "age_gyr", star, 0.8 * age_half_cell[star], log=True)))
        results["metallicity"].append((grad["metallicity"][star] * z * math.log(10.0),
                                       central_difference(arrays, g, "metallicity", star,
                                                          0.8 * z_half_cell[star], log=True)))
        results["velocity_kms"].append((grad["velocity_kms"][star, 2], central_difference(
            arrays, g, "velocity_kms", (star, 2), 0.15 * VELOCITY_BIN_KMS)))
    # Each error relative to max(|fd|, floor x the field's largest |fd|), so that a gradient
    # near 0 by chance is held to the float rounding of the differences (as in
    # tests/test_vjp_entry.cpp: 1e-2 for mass, age and Z, 0.1 for velocity, whose differences
    # scatter by ~1e-5 absolute here, 5e-4 of the smallest star's dL/dv_los).
    tolerance = {"initial_mass_msun": 1e-4, "age_gyr": 1e-3, "metallicity": 1e-3,
                 "velocity_kms": 1e-3}
    floor = {"initial_mass_msun": 1e-2, "age_gyr": 1e-2, "metallicity": 1e-2,
             "velocity_kms": 0.1}
    worst = {}
    for field, pairs in results.items():
        got, fd = np.array(pairs).T
        assert np.all(np.isfinite(got)) and np.all(np.isfinite(fd)), field
        assert np.all(fd != 0.0) and np.all(got != 0.0), field
        scale = np.maximum(np.abs(fd), floor[field] * np.max(np.abs(fd)))
        error = np.abs(got - fd) / scale
        worst[field] = float(np.max(error))
        assert worst[field] <= tolerance[field], (field, got, fd, error)
    print("worst relative errors:", worst)


def test_torch_backward_through_the_gas_lines_and_dust_equals_ifusim_vjp_bitwise():
    """The gas's fields as tensors too: emission lines and dust (docs/gradients.md), every
    gradient bitwise ifusim.vjp's."""
    star_arrays = stars(n=20, seed=4)
    gas_arrays = dusty_gas(star_arrays)
    galaxy = ifusim.Galaxy.from_arrays(star_arrays, gas=gas_arrays, redshift=REDSHIFT)
    reference = ifusim.run(dust_lines_config(), galaxy=galaxy, progress=False)
    g = np.random.default_rng(10).normal(size=reference.data.shape).astype(np.float32)
    stars_in = tensors(star_arrays, torch.float64)
    gas_in = tensors(gas_arrays, torch.float64)
    cube = ifusim.torch.cube(dust_lines_config(), stars_in, gas=gas_in, redshift=REDSHIFT)
    assert np.array_equal(cube.detach().numpy(), reference.data)
    torch.sum(torch.from_numpy(g) * cube).backward()
    expected = ifusim.vjp(dust_lines_config(), galaxy, g.astype(np.float64), progress=False)
    for kind, inputs in (("stars", stars_in), ("gas", gas_in)):
        for name, value in inputs.items():
            got = value.grad
            assert got is not None and got.shape == value.shape, name
            key = kind + "." + name
            if key in expected:
                assert np.any(expected[key] != 0), key
                assert np.array_equal(got.numpy(), expected[key]), key
            else:
                assert not np.any(got.numpy()), key  # positions, density: zeros
    assert "gas.mass_msun" in expected and "gas.sfr_msun_per_yr" in expected
