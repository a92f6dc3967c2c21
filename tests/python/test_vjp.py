"""ifusim.vjp (docs/gradients.md, "From Python"): gradients of L = <G, cube> with respect to the
stars' fields against central finite differences of ifusim.run, and the cotangent's shape check.
"""

import math
import os

import numpy as np
import pytest

import ifusim

DATA = os.environ.get("IFUSIM_DATA_DIR", "")
MILES = "${IFUSIM_DATA_DIR}/ssp/MILES_BASTI_CH_baseFe"
REDSHIFT = 0.05
VELOCITY_BIN_KMS = 200.0
ANCHOR_KMS = 400.0  # a light star at this speed on each axis fixes the velocity nodes
C_KMS = 299792.458


def config(noise):
    """A 10 x 10 arcsec field of 1 arcsec spaxels, 4800-5600 A, calc_ifu's stages (orient
    without face-on alignment: the adjoint holds the rotation fixed)."""
    pipeline = ["orient", "aperture", "stellar_spectra", "psum", "flux", "psf", "lsf",
                "aperture_mask"] + (["noise"] if noise else [])
    return {
        "galaxy": {"redshift": REDSHIFT},
        "telescope": {
            "name": "small",
            "fov_arcsec": 10.0,
            "spaxel_arcsec": 1.0,
            "wavelength": {"start_angstrom": 4800.0, "end_angstrom": 5600.0,
                           "step_angstrom": 1.25},
            "lsf_fwhm_angstrom": 3.0,
        },
        "ssp": {"library": MILES},
        "pipeline": pipeline,
        "stages": {
            "orient": {"align_face_on": False},
            "stellar_spectra": {"velocity_bin_kms": VELOCITY_BIN_KMS},
            "flux": {"unit_scale": 1e-20},
            "psf": {"shape": "gaussian", "fwhm_arcsec": 1.5},
            **({"noise": {"snr": 20, "per": "angstrom"}} if noise else {}),
        },
        "devices": {"backend": "cpu", "count": 1},
        "seed": 3,
    }


def velocity_fraction(v_los_kms):
    """Where c ln(1 + v/c) falls between the stellar stage's velocity nodes (0 .. 1)."""
    beta = math.sqrt(3.0) * ANCHOR_KMS / C_KMS
    u = (math.log1p(v_los_kms / C_KMS) - math.log1p(-beta)) / (VELOCITY_BIN_KMS / C_KMS)
    return u - math.floor(u)


def stars(n=40, seed=2):
    """n stars inside the field, line-of-sight velocities at 0.3 .. 0.7 of a node spacing, and
    the anchor (last)."""
    rng = np.random.default_rng(seed)
    v = rng.uniform(-200.0, 200.0, size=(n + 1, 3))
    for i in range(n):
        while not 0.3 <= velocity_fraction(v[i, 2]) <= 0.7:
            v[i, 2] = rng.uniform(-200.0, 200.0)
    v[n] = ANCHOR_KMS
    mass = 10 ** rng.normal(5.0, 0.3, n + 1)
    mass[n] = 1e-3
    return dict(
        position_kpc=np.column_stack([rng.uniform(-4, 4, (n + 1, 2)), np.zeros(n + 1)]),
        velocity_kms=v.astype(np.float32),
        initial_mass_msun=mass.astype(np.float32),
        age_gyr=rng.uniform(1.0, 10.0, n + 1).astype(np.float32),
        metallicity=rng.uniform(0.005, 0.03, n + 1).astype(np.float32),
    )


def loss(cube, g):
    data = cube.data.astype(np.float64)
    return float(np.sum(np.where(np.isnan(data), 0.0, g * data)))


@pytest.fixture(scope="module")
def case():
    if not os.path.isdir(os.path.join(DATA, "ssp", "MILES_BASTI_CH_baseFe")):
        pytest.fail("IFUSIM_DATA_DIR must hold ssp/MILES_BASTI_CH_baseFe")
    arrays = stars()
    galaxy = ifusim.Galaxy.from_arrays(arrays, redshift=REDSHIFT)
    cube = ifusim.run(config(False), galaxy=galaxy, progress=False)
    g = np.random.default_rng(5).normal(size=cube.data.shape)
    gradients = ifusim.vjp(config(True), galaxy, g, progress=False)
    return arrays, g, gradients


def test_gradients_are_keyed_and_shaped_like_the_fields(case):
    arrays, _, gradients = case
    assert set(gradients) == {"stars.initial_mass_msun", "stars.age_gyr", "stars.metallicity",
                              "stars.velocity_kms"}
    for key, values in gradients.items():
        field = arrays[key.split(".", 1)[1]]
        assert values.dtype == np.float64, key
        assert values.shape == field.shape, key
        assert np.isfinite(values).all(), key
        assert np.any(values != 0.0), key


def central_difference(arrays, g, field, index, step):
    up = {k: v.copy() for k, v in arrays.items()}
    down = {k: v.copy() for k, v in arrays.items()}
    up[field][index] += step
    down[field][index] -= step
    runs = [
        loss(ifusim.run(config(False), galaxy=ifusim.Galaxy.from_arrays(a, redshift=REDSHIFT),
                        progress=False), g)
        for a in (up, down)
    ]
    # The step as the float32 field holds it.
    return (runs[0] - runs[1]) / (float(up[field][index]) - float(down[field][index]))


@pytest.mark.parametrize("star", [3, 17])
def test_mass_and_velocity_gradients_match_finite_differences_of_runs(case, star):
    arrays, g, gradients = case
    # L is linear in the initial mass (steps of 50 %: 1e-4), and in c ln(1 + v_los / c) within a
    # node spacing (v_los at 0.3 .. 0.7 of one, steps of 0.15 of it: 1e-3).
    mass_fd = central_difference(arrays, g, "initial_mass_msun", star,
                                 0.5 * float(arrays["initial_mass_msun"][star]))
    assert gradients["stars.initial_mass_msun"][star] == pytest.approx(mass_fd, rel=1e-4)
    velocity_fd = central_difference(arrays, g, "velocity_kms", (star, 2),
                                     0.15 * VELOCITY_BIN_KMS)
    assert gradients["stars.velocity_kms"][star, 2] == pytest.approx(velocity_fd, rel=1e-3)


SMOOTHING_KPC = 1.5  # every star's smoothing length: the kernel's square reaches +-1.5 kpc


def kpc_per_arcsec(z):
    """The engine's Planck2015 (flat, matter + Lambda; data/cosmology.h): D_A in kpc per arcsec."""
    h, omega_m = 0.6774, 0.3089
    zs = np.linspace(0.0, z, 20001)
    inv_e = 1.0 / np.sqrt(omega_m * (1 + zs) ** 3 + 1.0 - omega_m)
    comoving_mpc = C_KMS / (100.0 * h) * np.sum((inv_e[1:] + inv_e[:-1]) * 0.5 * np.diff(zs))
    return comoving_mpc / (1 + z) * 1000.0 * math.pi / 180.0 / 3600.0


@pytest.fixture(scope="module")
def smoothed_case():
    """The case's stars, smoothed by the aperture's "kernel" with a given (fixed) length."""
    arrays = stars()
    arrays["smoothing_length_kpc"] = np.full(len(arrays["initial_mass_msun"]), SMOOTHING_KPC,
                                             dtype=np.float32)
    cfg = config(False)
    cfg["stages"]["aperture"] = {"smoothing": "kernel"}
    galaxy = ifusim.Galaxy.from_arrays(arrays, redshift=REDSHIFT)
    cube = ifusim.run(cfg, galaxy=galaxy, progress=False)
    g = np.random.default_rng(7).normal(size=cube.data.shape)
    return arrays, cfg, g, ifusim.vjp(cfg, galaxy, g, progress=False)


def test_position_gradient_with_kernel_smoothing_matches_finite_differences(smoothed_case):
    arrays, cfg, g, gradients = smoothed_case
    n = len(arrays["initial_mass_msun"])
    position = gradients["stars.position_kpc"]
    assert position.shape == (n, 3) and position.dtype == np.float64
    assert np.isfinite(position).all() and np.any(position[:, :2] != 0.0)
    assert np.all(position[:, 2] == 0.0)  # the line of sight (orient at its identity)

    def loss_of(a):
        return loss(ifusim.run(cfg, galaxy=ifusim.Galaxy.from_arrays(a, redshift=REDSHIFT),
                               progress=False), g)

    def central(index, step):
        up = {k: v.copy() for k, v in arrays.items()}
        down = {k: v.copy() for k, v in arrays.items()}
        up["position_kpc"][index] += step
        down["position_kpc"][index] -= step
        return (loss_of(up) - loss_of(down)) / (float(np.float32(up["position_kpc"][index])) -
                                                float(np.float32(down["position_kpc"][index])))

    # Spaxel edges (1 arcsec spaxels, the grid centred on 0, an even number of them with the
    # margin) at multiples of d: two stars whose squares' sides stay >= 0.25 kpc from them, so
    # that steps of 0.04 and 0.08 kpc (Richardson: (4 D(h) - D(2 h)) / 3, as
    # tests/test_stellar_vjp.cpp) keep the covered spaxels.
    d = kpc_per_arcsec(REDSHIFT)

    def clear(u):
        return abs(u / d - round(u / d)) * d >= 0.25

    p = arrays["position_kpc"].astype(np.float32).astype(np.float64)
    chosen = [i for i in range(n - 1)
              if all(clear(p[i, c] + s * SMOOTHING_KPC) for c in (0, 1) for s in (-1, 1))][:2]
    assert len(chosen) == 2
    largest = np.abs(position[:n - 1, :2]).max()
    for i in chosen:
        for c in (0, 1):
            fd = (4.0 * central((i, c), 0.04) - central((i, c), 0.08)) / 3.0
            err = abs(position[i, c] - fd) / max(abs(fd), 1e-2 * largest)
            assert err <= 1e-3, (i, c, position[i, c], fd)


def test_a_cotangent_of_the_wrong_shape_is_refused_naming_both_shapes(case):
    arrays, g, _ = case
    galaxy = ifusim.Galaxy.from_arrays(arrays, redshift=REDSHIFT)
    with pytest.raises(ValueError, match=r"cotangent: shape \(.*\), expected the shape of "
                                         r"Cube.data \(n_wave, ny, nx\) = \(640, 10, 10\)"):
        ifusim.vjp(config(True), galaxy, g[:, :, :-1].transpose(2, 1, 0), progress=False)
    with pytest.raises(ValueError, match="cotangent: shape"):
        ifusim.vjp(config(True), galaxy, g[0], progress=False)


def test_a_kept_forward_gives_runs_cube_and_vjps_gradients_bitwise(case):
    """ifusim.forward (docs/gradients.md, "A forward kept for its backward"): the cube bitwise
    ifusim.run's (the noise included), and kept.vjp bitwise ifusim.vjp's, call after call."""
    arrays, g, gradients = case
    galaxy = ifusim.Galaxy.from_arrays(arrays, redshift=REDSHIFT)
    reference = ifusim.run(config(True), galaxy=galaxy, progress=False)
    h = np.random.default_rng(8).normal(size=g.shape)
    other = ifusim.vjp(config(True), galaxy, h, progress=False)
    cube, kept = ifusim.forward(config(True), galaxy, progress=False)
    assert isinstance(kept, ifusim.Forward) and kept.shape == cube.shape == reference.shape
    assert np.any(np.nan_to_num(cube.data) > 0)
    assert np.array_equal(cube.data, reference.data, equal_nan=True)
    assert np.array_equal(cube.var, reference.var, equal_nan=True)
    for cotangent, want in ((g, gradients), (h, other), (g, gradients)):
        got = kept.vjp(cotangent)
        assert set(got) == set(want)
        for key in want:
            assert got[key].dtype == np.float64 and got[key].shape == want[key].shape, key
            assert np.array_equal(got[key], want[key]), key
    with pytest.raises(ValueError, match=r"cotangent: shape \(.*\), expected the shape of "
                                         r"Cube.data \(n_wave, ny, nx\) = \(640, 10, 10\)"):
        kept.vjp(g[:, :, :-1].transpose(2, 1, 0))
    assert not kept.released
    kept.release()
    assert kept.released
    with pytest.raises(RuntimeError, match="released"):
        kept.vjp(g)
    # A `with` block releases it at its end.
    with ifusim.forward(config(False), galaxy, progress=False)[1] as scoped:
        assert set(scoped.vjp(g)) == set(gradients)
    assert scoped.released


# The gas's emission lines (docs/gradients.md, "Gas: the emission lines").
OXYGEN_MIN, OXYGEN_MAX = 7.6, 8.85  # the ratio grid of 12 + log(O/H) the kernels interpolate on
OXYGEN_STEP = (OXYGEN_MAX - OXYGEN_MIN) / (
    max(2, math.ceil((OXYGEN_MAX - OXYGEN_MIN) / 0.001) + 1) - 1)
BRIGHT = [1, 6]  # the cells checked: 10 x the others' SFR


def gas_config(noise):
    c = config(noise)
    c["pipeline"].insert(3, "emission_lines")  # H-beta and [O III] are in the band at z = 0.05
    c["stages"]["emission_lines"] = {"lines": ["hbeta", "oiii_4959", "oiii_5007"]}
    return c


def gas(n=10, seed=4):
    """n star-forming cells inside the field, 12 + log(O/H) at the middle of a cell of the ratio
    grid (from 7.9 to 8.6, inside the Curti et al. 2020 range), v within +-200 km/s."""
    rng = np.random.default_rng(seed)
    oxygen = OXYGEN_MIN + (np.floor(rng.uniform(0.3, 1.0, n) / OXYGEN_STEP) + 0.5) * OXYGEN_STEP
    sfr = rng.uniform(0.1, 0.3, n)
    sfr[BRIGHT] *= 10.0
    return dict(
        position_kpc=np.column_stack([rng.uniform(-4, 4, (n, 2)), np.zeros(n)]),
        velocity_kms=rng.uniform(-200.0, 200.0, (n, 3)).astype(np.float32),
        mass_msun=np.full(n, 1e6, np.float32),
        density_msun_per_kpc3=np.full(n, 1e7, np.float32),
        metallicity=(0.0134 * 10 ** (oxygen - 8.69)).astype(np.float32),
        sfr_msun_per_yr=sfr.astype(np.float32),
    )


def gas_loss(star_arrays, gas_arrays, g):
    galaxy = ifusim.Galaxy.from_arrays(star_arrays, gas=gas_arrays, redshift=REDSHIFT)
    return loss(ifusim.run(gas_config(False), galaxy=galaxy, progress=False), g)


def gas_difference(case, field, index, step, log10_step=False):
    """Central difference of L in a gas field; with log10_step, in log10 of it, as d/dx."""
    star_arrays, gas_arrays, g, _ = case
    up = {k: v.copy() for k, v in gas_arrays.items()}
    down = {k: v.copy() for k, v in gas_arrays.items()}
    x = float(gas_arrays[field][index])
    up[field][index] = x * 10 ** step if log10_step else x + step
    down[field][index] = x * 10 ** -step if log10_step else x - step
    xu, xd = float(up[field][index]), float(down[field][index])  # as float32 holds them
    diff = gas_loss(star_arrays, up, g) - gas_loss(star_arrays, down, g)
    if not log10_step:
        return diff / (xu - xd)
    return diff / (math.log10(xu) - math.log10(xd)) / (x * math.log(10.0))


def richardson(case, field, index, step, log10_step=False):
    """(4 D(h) - D(2h)) / 3: the central differences' error to O(h^4)."""
    return (4.0 * gas_difference(case, field, index, step, log10_step)
            - gas_difference(case, field, index, 2.0 * step, log10_step)) / 3.0


@pytest.fixture(scope="module")
def gas_case():
    if not os.path.isdir(os.path.join(DATA, "ssp", "MILES_BASTI_CH_baseFe")):
        pytest.fail("IFUSIM_DATA_DIR must hold ssp/MILES_BASTI_CH_baseFe")
    star_arrays, gas_arrays = stars(n=20), gas()
    galaxy = ifusim.Galaxy.from_arrays(star_arrays, gas=gas_arrays, redshift=REDSHIFT)
    cube = ifusim.run(gas_config(False), galaxy=galaxy, progress=False)
    g = np.random.default_rng(8).normal(size=cube.data.shape)
    gradients = ifusim.vjp(gas_config(True), galaxy, g, progress=False)
    return star_arrays, gas_arrays, g, gradients


def test_gas_gradients_are_keyed_and_shaped_like_the_fields(gas_case):
    star_arrays, gas_arrays, _, gradients = gas_case
    assert set(gradients) == {"stars.initial_mass_msun", "stars.age_gyr", "stars.metallicity",
                              "stars.velocity_kms", "gas.sfr_msun_per_yr", "gas.metallicity",
                              "gas.velocity_kms"}
    for key, values in gradients.items():
        kind, name = key.split(".", 1)
        field = (star_arrays if kind == "stars" else gas_arrays)[name]
        assert values.dtype == np.float64, key
        assert values.shape == field.shape, key
        assert np.isfinite(values).all(), key
        assert np.any(values != 0.0), key


@pytest.mark.parametrize("cell", BRIGHT)
def test_gas_gradients_match_finite_differences_of_runs(gas_case, cell):
    _, gas_arrays, _, gradients = gas_case
    # SFR: L is linear in it (steps of 50 %: 1e-4).
    sfr_fd = gas_difference(gas_case, "sfr_msun_per_yr", cell,
                            0.5 * float(gas_arrays["sfr_msun_per_yr"][cell]))
    assert gradients["gas.sfr_msun_per_yr"][cell] == pytest.approx(sfr_fd, rel=1e-4)
    # Z: from the middle of a cell of the ratio grid to the middles 4 and 8 cells away, in log10,
    # extrapolated (docs/gradients.md).
    z_fd = richardson(gas_case, "metallicity", cell, 4.0 * OXYGEN_STEP, log10_step=True)
    assert gradients["gas.metallicity"][cell] == pytest.approx(z_fd, rel=1e-3)
    # v_los (orient at the identity: the field's z), steps of 4 and 8 km/s against line widths of
    # ~65 km/s, extrapolated.
    v_fd = richardson(gas_case, "velocity_kms", (cell, 2), 4.0)
    assert gradients["gas.velocity_kms"][cell, 2] == pytest.approx(v_fd, rel=1e-3)
    assert gradients["gas.velocity_kms"][cell, 0] == 0.0  # the stage sees only the line of sight


# Through the dust stage (docs/gradients.md, "Dust"): the A_V gradients carried back to the gas.
def dust_config():
    """calc_ifu's stages and the dust stage (after the aperture, before the spectra), without
    the lines: their light, ~100 x the stars' dimmed part here, would leave the differences in
    the float cube's rounding (the C++ tests check the lines and the dust together)."""
    c = config(False)
    c["pipeline"].insert(2, "dust")
    return c


def dusty_gas(star_arrays):
    """gas() with a screen worth having (3e7 Msun a cell, radii as before), cell i 1 kpc in front
    of star i (the stars lie at z = 0), and the last cell an anchor: 1e9 Msun behind its star
    (z = 3 kpc), whose spaxel holds the deepest screen, so that the largest A_V, which sizes the
    stars' dust expansion and is held fixed by the adjoint, does not move when another cell's
    mass does."""
    arrays = gas()
    n = len(arrays["mass_msun"])
    arrays["mass_msun"][:] = 3e7
    arrays["density_msun_per_kpc3"][:] = 3e8
    arrays["position_kpc"][:, :2] = star_arrays["position_kpc"][:n, :2]
    arrays["position_kpc"][:, 2] = -1.0
    arrays["mass_msun"][-1] = 1e9
    arrays["density_msun_per_kpc3"][-1] = 1e10
    arrays["position_kpc"][-1, 2] = 3.0
    return arrays


def dust_loss(star_arrays, gas_arrays, g):
    galaxy = ifusim.Galaxy.from_arrays(star_arrays, gas=gas_arrays, redshift=REDSHIFT)
    return loss(ifusim.run(dust_config(), galaxy=galaxy, progress=False), g)


def test_gradients_through_the_dust_stage_match_finite_differences_of_runs():
    if not os.path.isdir(os.path.join(DATA, "ssp", "MILES_BASTI_CH_baseFe")):
        pytest.fail("IFUSIM_DATA_DIR must hold ssp/MILES_BASTI_CH_baseFe")
    star_arrays = stars(n=20)
    gas_arrays = dusty_gas(star_arrays)
    galaxy = ifusim.Galaxy.from_arrays(star_arrays, gas=gas_arrays, redshift=REDSHIFT)
    cube = ifusim.run(dust_config(), galaxy=galaxy, progress=False)
    g = np.random.default_rng(9).normal(size=cube.data.shape)
    gradients = ifusim.vjp(dust_config(), galaxy, g, progress=False)
    n_stars, n_gas = len(star_arrays["age_gyr"]), len(gas_arrays["mass_msun"])
    for key, size in [("gas.mass_msun", n_gas), ("stars.dust_av", n_stars),
                      ("gas.metallicity", n_gas)]:
        assert gradients[key].shape == (size,), key
        assert np.isfinite(gradients[key]).all(), key
        assert np.any(gradients[key] != 0.0), key
    # The cell whose mass matters most (not the anchor, which dims nothing: none of the cells'
    # light or the stars' is behind it): its central difference, the density scaled with the
    # mass (the cell's radius, held by the adjoint), Richardson-extrapolated from x 10^(+-0.02)
    # and x 10^(+-0.04).
    cell = int(np.argmax(np.abs(gradients["gas.mass_msun"])))

    def difference(step):
        losses, masses = [], []
        for sign in (1.0, -1.0):
            arrays = {k: v.copy() for k, v in gas_arrays.items()}
            arrays["mass_msun"][cell] *= 10 ** (sign * step)
            arrays["density_msun_per_kpc3"][cell] *= 10 ** (sign * step)
            losses.append(dust_loss(star_arrays, arrays, g))
            masses.append(float(arrays["mass_msun"][cell]))
        x = float(gas_arrays["mass_msun"][cell])
        return ((losses[0] - losses[1]) / (math.log10(masses[0]) - math.log10(masses[1]))
                / (x * math.log(10.0)))

    fd = (4.0 * difference(0.02) - difference(0.04)) / 3.0
    assert gradients["gas.mass_msun"][cell] == pytest.approx(fd, rel=1e-3)


def dust_lines_config():
    """calc_ifu_gas's particle stages: the lines and the dust (for the JAX and PyTorch tests)."""
    c = gas_config(False)
    c["pipeline"].insert(2, "dust")
    return c
