"""ifusim.vjp on 1, 2 and 3 cpu devices, and with the histogram held in small tiles: the same
gradients, bitwise (issue 27: the adjoint's reductions are fixed point or in a fixed order, so
neither the device count nor the tiles change a bit). The C++ suite holds the stars' engine to it
(tests/test_stellar_vjp.cpp); this holds the whole run through the Python entry point."""

import copy

import numpy as np

import ifusim
from test_vjp import REDSHIFT, config, stars


def gradients_with(devices, tile_gb=None):
    c = copy.deepcopy(config(True))
    c["devices"]["count"] = devices
    c["devices"]["oversubscribe"] = True  # 3 devices on fewer OpenMP threads: they share them
    if tile_gb is not None:
        c["stages"]["stellar_spectra"]["histogram"] = "dense"
        c["stages"]["stellar_spectra"]["histogram_memory_gb"] = tile_gb
    galaxy = ifusim.Galaxy.from_arrays(stars(), redshift=REDSHIFT)
    shape = ifusim.run(config(False), galaxy=galaxy, progress=False).data.shape
    g = np.random.default_rng(11).normal(size=shape)
    return ifusim.vjp(c, galaxy, g, progress=False)


def test_gradients_are_bitwise_identical_for_1_2_and_3_devices_and_small_tiles():
    one = gradients_with(1)
    assert all(np.any(v != 0.0) and np.isfinite(v).all() for v in one.values())
    # A tile of 1e-5 GB (10 kB) holds a few of the 100 spaxels' histogram rows at a time.
    for other in (gradients_with(2), gradients_with(3), gradients_with(1, tile_gb=1e-5)):
        assert set(other) == set(one)
        for key, values in one.items():
            assert other[key].tobytes() == values.tobytes(), key
