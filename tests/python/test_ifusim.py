"""The Python package: same cubes as the CLI, zero-copy arrays, Galaxy.from_arrays, errors,
devices, Ctrl-C. Tolerances are stated per quantity; cubes are checked to hold light."""

import ast
import json
import math
import os
import subprocess
import sys
import textwrap
import warnings

import h5py
import numpy as np
import pytest

import ifusim
from conftest import MUSE_EXAMPLE, ROOT

C_KMS = 299792.458
MASTAR = "${IFUSIM_DATA_DIR}/ssp/MaStar_CB19.12_1_5.fits.gz"


def small_config(**extra):
    """MUSE without PSF, LSF or noise: where one star's light lands is exact."""
    config = {
        "galaxy": {"redshift": 0.05},
        "telescope": "MUSE",
        "ssp": {"library": MASTAR, "outside_grid": "clamp"},
        "pipeline": ["aperture", "stellar_spectra", "psum"],
        "seed": 1,
    }
    config.update(extra)
    return config


def one_star(x_kpc=0.0, y_kpc=0.0, v_los_kms=0.0, dtype=np.float64):
    return dict(
        position_kpc=np.array([[x_kpc, y_kpc, 0.0]], dtype=dtype),
        velocity_kms=np.array([[0.0, 0.0, v_los_kms]], dtype=dtype),
        initial_mass_msun=np.array([1e6], dtype=dtype),
        age_gyr=np.array([5.0], dtype=dtype),
        metallicity=np.array([0.02], dtype=dtype),
    )


def assert_has_light(cube):
    assert np.isfinite(cube.data).all(), "NaN or infinity in the cube"
    assert cube.data.sum() > 0, "the cube holds no light"


# ---- the same engine as the CLI --------------------------------------------------------------


def test_muse_example_equals_the_cli_cube_bitwise(muse_cube, muse_cli_output):
    assert_has_light(muse_cube)
    with h5py.File(muse_cli_output / "cube.h5") as f:
        # The CLI stores float32 where it holds the values (fits_in_float32): the Python cube's
        # doubles must round to exactly the stored numbers.
        for name, values in (("data", muse_cube.data), ("variance", muse_cube.var)):
            stored = f[name][()]
            assert stored.shape == muse_cube.shape
            assert np.array_equal(values.astype(stored.dtype), stored), name
        for name, values in muse_cube.maps.items():
            stored = f["maps"][name][()]
            assert np.array_equal(values.astype(stored.dtype), stored, equal_nan=True), name
        assert np.array_equal(muse_cube.wavelength, f["wavelength_angstrom"][()])
    summary = json.loads((muse_cli_output / "summary.json").read_text())
    assert muse_cube.summary["n_stars"] == summary["n_stars"] > 0
    assert muse_cube.summary["cube"] == summary["cube"]


def test_written_files_equal_the_cli_files(muse_cube, muse_cli_output, tmp_path):
    muse_cube.to_hdf5(tmp_path / "cube.h5")
    muse_cube.to_fits(tmp_path / "cube.fits")
    for name in ("cube.h5", "cube.fits"):
        result = ifusim.compare(tmp_path / name, muse_cli_output / name, rtol=0)
        assert result.equal, str(result)
    back = ifusim.read_cube(tmp_path / "cube.fits")
    assert back.shape == muse_cube.shape and back.unit == muse_cube.unit


def test_wcs_is_the_fits_files(muse_cube, muse_cli_output):
    fits = pytest.importorskip("astropy.io.fits")
    from astropy.wcs import WCS

    with fits.open(muse_cli_output / "cube.fits") as hdus:
        from_file = WCS(hdus["DATA"].header)
    wcs = muse_cube.wcs
    assert list(wcs.wcs.ctype) == list(from_file.wcs.ctype) == ["RA---TAN", "DEC--TAN", "AWAV"]
    # The file holds the values as 17-digit text, which astropy parses back to within 1e-12.
    for name in ("crval", "cdelt", "crpix"):
        np.testing.assert_allclose(getattr(wcs.wcs, name), getattr(from_file.wcs, name), rtol=1e-12)
    # Plane k's world wavelength is cube.wavelength[k] (Angstrom; astropy gives metres).
    _, _, lam = wcs.pixel_to_world_values(0, 0, 10)
    assert lam * 1e10 == pytest.approx(muse_cube.wavelength[10], rel=1e-12)
    assert muse_cube.medium == "air"


def test_arrays_are_views_of_the_cube_not_copies(muse_cube):
    core = muse_cube._core
    for array in (muse_cube.data, muse_cube.var, muse_cube.maps["white_light"]):
        assert not array.flags.owndata
        assert array.base is core  # the engine's cube owns the one buffer
    assert np.shares_memory(muse_cube.data, core.data)
    # (n_wave, ny, nx) over spaxel-major storage: the wavelength axis is the fastest; float32, as
    # the engine holds the cube (data/datacube.h) and the FITS file stores it.
    assert muse_cube.data.dtype == np.float32 and muse_cube.var.dtype == np.float32
    assert muse_cube.data.strides[0] == 4
    assert muse_cube.maps["white_light"].shape == muse_cube.shape[1:]


def test_read_tng_gives_the_clis_galaxy(muse_cube):
    galaxy = ifusim.read_tng("${IFUSIM_DATA_DIR}/snapshots/tng100-1_snap078_subhalo_subsample.hdf5")
    assert galaxy.n_stars == muse_cube.summary["n_stars"]
    assert galaxy.stars["position_kpc"].shape == (galaxy.n_stars, 3)
    assert galaxy.stars["position_kpc"].base is galaxy._core
    again = ifusim.run(MUSE_EXAMPLE, galaxy=galaxy)
    assert np.array_equal(again.data, muse_cube.data)
    assert np.array_equal(again.var, muse_cube.var)


# ---- Galaxy.from_arrays ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_star_lands_in_its_spaxel_at_its_shifted_wavelength(dtype):
    astropy_cosmology = pytest.importorskip("astropy.cosmology")
    z, dx_spaxels, dy_spaxels, v_los = 0.05, 4, -3, 300.0
    # The engine's default cosmology is Planck 2015 (astropy's Planck15 agrees far below the
    # half spaxel of margin the star has).
    kpc_per_arcsec = astropy_cosmology.Planck15.kpc_proper_per_arcmin(z).value / 60
    step_kpc = 0.2 * kpc_per_arcsec  # MUSE: 0.2 arcsec spaxels, 25 x 25
    config = small_config(galaxy={"redshift": z})
    rest = ifusim.run(config, galaxy=ifusim.Galaxy.from_arrays(one_star(dtype=dtype), redshift=z))
    moved = ifusim.run(
        config,
        galaxy=ifusim.Galaxy.from_arrays(
            one_star(dx_spaxels * step_kpc, dy_spaxels * step_kpc, v_los, dtype), redshift=z
        ),
    )
    for cube in (rest, moved):
        assert_has_light(cube)
    white = moved.data.sum(axis=0)
    iy, ix = np.unravel_index(np.argmax(white), white.shape)
    # The 25 x 25 grid is centred on the galaxy; spaxel ix covers x in [ix - 12.5, ix - 11.5)
    # spaxels (stages/spaxel_grid/grid.h).
    assert (ix, iy) == (12 + dx_spaxels, 12 + dy_spaxels)
    assert white.sum() == white[iy, ix], "all light in one spaxel"
    # Total light is conserved by the move (same star, same band, 1e-3 for the band's edges).
    assert moved.data.sum() == pytest.approx(rest.data.sum(), rel=1e-3)
    # The Doppler shift: ln(lambda) moves by ln(1 + v/c). Cross-correlate the two spectra in
    # ln(lambda) (resampled on a fine grid), to 10 km/s.
    spectrum_rest = rest.data.sum(axis=(1, 2))
    spectrum_moved = moved.data[:, iy, ix]
    log_lam = np.log(rest.wavelength)
    grid = np.linspace(log_lam[20], log_lam[-20], 40000)
    a = np.interp(grid, log_lam, spectrum_rest)
    b = np.interp(grid, log_lam, spectrum_moved)
    a, b = a - a.mean(), b - b.mean()
    d = grid[1] - grid[0]
    lags = np.arange(-200, 201)
    correlation = [np.dot(a[200:-200], b[200 + k : len(b) - 200 + k]) for k in lags]
    k = int(np.argmax(correlation))
    c0, c1, c2 = correlation[k - 1 : k + 2]
    lag = lags[k] + 0.5 * (c0 - c2) / (c0 - 2 * c1 + c2)
    v_measured = (math.exp(lag * d) - 1) * C_KMS
    assert v_measured == pytest.approx(v_los, abs=10.0)
    assert moved.maps["velocity_light_kms"][iy, ix] == pytest.approx(v_los, abs=2.0)


def test_three_devices_equal_one():
    rng = np.random.default_rng(7)
    n = 3000
    stars = dict(
        position_kpc=rng.normal(0, 1.5, (n, 3)),
        velocity_kms=rng.normal(0, 80, (n, 3)),
        initial_mass_msun=rng.uniform(1e4, 1e5, n),
        age_gyr=rng.uniform(0.1, 12, n),
        metallicity=rng.uniform(0.002, 0.03, n),
    )
    galaxy = ifusim.Galaxy.from_arrays(stars, redshift=0.05)
    config = small_config(devices={"oversubscribe": True})
    one = ifusim.run(config, galaxy=galaxy, devices=1)
    three = ifusim.run(config, galaxy=galaxy, devices=3)
    assert_has_light(one)
    assert np.array_equal(one.data, three.data)
    assert len(three.summary["devices"]) == 3


def test_a_streamed_galaxy_gives_the_held_galaxys_cube():
    config = {
        "input": {"synthetic": {"stars": 20000, "gas": 0, "seed": 3}},
        "galaxy": {"redshift": 0.05, "orientation": {"alpha_deg": 60}},
        "telescope": "MUSE",
        "ssp": {"library": MASTAR},
        "pipeline": ["orient", "aperture", "stellar_spectra", "psum"],
        "devices": {"oversubscribe": True},
    }
    held = ifusim.run(config)
    steps = []
    streamed = ifusim.run(config, devices=2, overrides={"input.stream_block_stars": 3000},
                          progress=lambda done, total, step: steps.append(step))
    assert_has_light(held)
    assert np.array_equal(held.data, streamed.data)
    assert np.array_equal(held.maps["velocity_light_kms"], streamed.maps["velocity_light_kms"],
                          equal_nan=True)
    assert streamed.summary["n_stars"] == 20000
    # One step per block of each pass (orient's, then the deposit): 7 blocks each.
    assert sum(step.startswith("orient pass") for step in steps) == 7
    assert sum(step.startswith("block ") for step in steps) == 7


def test_quantities_are_converted_to_the_fields_units():
    units = pytest.importorskip("astropy.units")
    stars = one_star(1.0, 0.5, 100.0)
    in_kpc = ifusim.Galaxy.from_arrays(stars, redshift=0.05)
    stars["position_kpc"] = stars["position_kpc"] * 1000 * units.pc
    stars["velocity_kms"] = stars["velocity_kms"] * 1000 * units.m / units.s
    in_pc = ifusim.Galaxy.from_arrays(stars, redshift=0.05)
    np.testing.assert_allclose(in_pc.stars["position_kpc"], in_kpc.stars["position_kpc"], rtol=1e-6)
    np.testing.assert_allclose(in_pc.stars["velocity_kms"], in_kpc.stars["velocity_kms"], rtol=1e-6)
    stars["age_gyr"] = stars["age_gyr"] * units.km
    with pytest.raises(ifusim.InputError, match=r"stars\.age_gyr: unit km"):
        ifusim.Galaxy.from_arrays(stars, redshift=0.05)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(position_kpc=np.zeros((1, 2))), r"stars\.position_kpc: shape \(1, 2\), expected \(N, 3\)"),
        (dict(age_gyr=np.array([np.nan])), r"stars\.age_gyr: row 0 is nan; expected finite"),
        (dict(metallicity=np.array([1.5])), r"stars\.metallicity: row 0 .* in \[0, 1\)"),
        (dict(age_gyr=np.array([1 + 1j])), r"stars\.age_gyr: dtype complex128, expected an array of real"),
        (dict(ages=np.array([1.0])), r"stars\.ages: unknown field; expected one of"),
        (dict(initial_mass_msun=np.array([1.0, 2.0])), r"2 rows, but stars\..* has 1"),
    ],
)
def test_bad_arrays_raise_input_error_naming_the_field(change, message):
    stars = one_star()
    stars.update(change)
    with pytest.raises(ifusim.InputError, match=message):
        ifusim.Galaxy.from_arrays(stars, redshift=0.05)


def test_integer_arrays_and_lists_are_taken_as_numbers():
    stars = one_star()
    as_floats = ifusim.Galaxy.from_arrays(stars, redshift=0.05)
    stars["initial_mass_msun"] = np.array([1000000], dtype=np.int64)
    stars["age_gyr"] = [5]
    stars["position_kpc"] = [[0, 0, 0]]
    as_ints = ifusim.Galaxy.from_arrays(stars, redshift=0.05)
    for name in ("initial_mass_msun", "age_gyr", "position_kpc"):
        assert np.array_equal(as_ints.stars[name], as_floats.stars[name]), name


def test_likely_mistakes_are_warnings_with_numbers():
    rng = np.random.default_rng(3)
    n = 2000
    stars = dict(
        position_kpc=rng.normal(0, 2.0, (n, 3)),
        velocity_kms=rng.normal(0, 80, (n, 3)),
        initial_mass_msun=np.full(n, 1e5),
        age_gyr=rng.uniform(0.1, 8, n),
        metallicity=np.full(n, 0.02),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a plausible galaxy gives none
        ifusim.Galaxy.from_arrays(stars, redshift=0.5)
    in_the_box = dict(stars, position_kpc=stars["position_kpc"] + 25000.0,
                      velocity_kms=stars["velocity_kms"] + [400.0, 0.0, 0.0])
    with pytest.warns(UserWarning) as caught:
        ifusim.Galaxy.from_arrays(in_the_box, redshift=0.5)
    texts = [str(w.message) for w in caught]
    assert any(t.startswith("stars.position_kpc: the stars' centre of mass is at (2.5e+04") for t in texts)
    assert any(t.startswith("stars.velocity_kms: the stars' mass-weighted mean velocity is (4") for t in texts)
    with pytest.warns(UserWarning, match=r"stars\.age_gyr: \d+ of 2000 stars are older than the Universe at z = 0\.5"):
        ifusim.Galaxy.from_arrays(dict(stars, age_gyr=rng.uniform(0.1, 13, n)), redshift=0.5)
    with pytest.raises(ifusim.InputError, match=r"years or Myr given\?"):
        ifusim.Galaxy.from_arrays(dict(stars, age_gyr=stars["age_gyr"] * 1e9), redshift=0.5)


def test_missing_fields_and_gas_are_checked():
    stars = one_star()
    del stars["age_gyr"]
    with pytest.raises(ifusim.InputError, match=r"stars\.age_gyr: required field missing"):
        ifusim.Galaxy.from_arrays(stars, redshift=0.05)
    gas = dict(position_kpc=np.zeros((2, 3)), velocity_kms=np.zeros((2, 3)))
    with pytest.raises(ifusim.InputError, match=r"gas\.(mass_msun|density_msun_per_kpc3|metallicity|sfr_msun_per_yr): required"):
        ifusim.Galaxy.from_arrays(one_star(), gas=gas, redshift=0.05)


# ---- errors, plan, devices, progress, Ctrl-C ------------------------------------------------


def test_config_errors_name_the_key():
    config = small_config()
    config["telescope"] = "NoSuchTelescope"
    with pytest.raises(ifusim.ConfigError, match="telescope"):
        ifusim.run(config, galaxy=ifusim.Galaxy.from_arrays(one_star(), redshift=0.05))
    with pytest.raises(ifusim.ConfigError, match=r"stages\.no_such_stage"):
        ifusim.run(MUSE_EXAMPLE, overrides={"stages.no_such_stage": {}})
    with pytest.raises(ifusim.ConfigError, match="no_such_config.json: cannot read the file"):
        ifusim.run(ROOT / "no_such_config.json")
    with pytest.raises(ifusim.ConfigError, match=r"galaxy\.redshift"):
        ifusim.run(small_config(galaxy={"redshift": -1.0}), galaxy=ifusim.Galaxy.from_arrays(one_star()))
    assert issubclass(ifusim.ConfigError, ifusim.Error) and issubclass(ifusim.InputError, ifusim.Error)


def test_bad_input_file_is_an_input_error(tmp_path):
    bad = tmp_path / "not_a_cutout.hdf5"
    with h5py.File(bad, "w") as f:
        f["Header"] = 1
    with pytest.raises(ifusim.InputError, match="not_a_cutout.hdf5"):
        ifusim.read_tng(bad)


def test_plan_reports_sharding_and_memory():
    plan = ifusim.plan(MUSE_EXAMPLE, devices=4, overrides={"devices.oversubscribe": True})
    assert plan.fits and "position_kpc" in plan.report
    tight = ifusim.plan(MUSE_EXAMPLE, overrides={"devices.memory_limit_gb": 1e-4})
    assert not tight.fits and tight.problems


def test_devices_and_progress():
    assert len(ifusim.devices("cpu", 2)) == 2
    steps = []
    galaxy = ifusim.Galaxy.from_arrays(one_star(), redshift=0.05)
    ifusim.run(small_config(), galaxy=galaxy, progress=lambda *a: steps.append(a))
    assert [s[2] for s in steps] == ["input", "aperture", "stellar_spectra", "psum", "done"]
    assert [s[0] for s in steps] == [0, 1, 2, 3, 4] and {s[1] for s in steps} == {4}


def test_compare_finds_a_difference(muse_cube):
    assert ifusim.compare(muse_cube, muse_cube, rtol=0)
    galaxy = ifusim.Galaxy.from_arrays(one_star(), redshift=0.05)
    other = ifusim.run(small_config(), galaxy=galaxy)  # MUSE too: same axes, other values
    different = ifusim.compare(other, muse_cube)
    assert not different and different.status == 1 and "FAIL" in str(different)
    sami = ifusim.run(small_config(telescope="SAMI"), galaxy=galaxy)
    incomparable = ifusim.compare(sami, muse_cube)
    assert incomparable.status == 2 and "shapes differ" in str(incomparable)


def test_arms_give_one_cube_each(tmp_path):
    # SAMI's blue and red arms in one run: a dict of cubes by arm, each the one-arm run's.
    galaxy = ifusim.Galaxy.from_arrays(one_star(v_los_kms=100.0), redshift=0.05)
    arms = ifusim.run(small_config(telescope=["SAMI", "SAMI-red"]), galaxy=galaxy, out=tmp_path / "o")
    assert list(arms) == ["SAMI", "SAMI-red"]
    blue = ifusim.run(small_config(telescope="SAMI"), galaxy=galaxy)
    assert np.array_equal(arms["SAMI"].data, blue.data)
    red = arms["SAMI-red"]
    assert_has_light(red)
    assert red.wavelength[0] == 6300.0 and np.allclose(np.diff(red.wavelength), 0.57)
    assert red.summary["telescope"] == "SAMI-red"
    assert (tmp_path / "o" / "cube_SAMI-red.fits").exists()
    assert not (tmp_path / "o" / "cube.fits").exists()


def test_ctrl_c_raises_keyboard_interrupt_and_leaves_no_output(tmp_path):
    out = tmp_path / "out"
    # The "input" step is reported once the 1e7 stars are made; SIGINT comes 0.01 s later, while
    # the particle stages work on them with the GIL released, and is pending when the engine next
    # checks. (The stages from orient to stellar_spectra's start take ~0.15 s here, so the 0.2 s
    # this test once waited let the run reach a fourth step.)
    script = textwrap.dedent(
        f"""
        import os, signal, sys, threading, ifusim
        # Python's own Ctrl-C handler, also where this test runs in the background (a shell's
        # background job starts with SIGINT ignored, and Python then installs no handler).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        steps = []
        def progress(done, total, step):
            steps.append(step)
            if step == "input":
                threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            ifusim.run({str(ROOT / "configs/examples/muse_synthetic.json")!r}, out={str(out)!r},
                       overrides={{"input.synthetic.stars": 10000000}}, progress=progress)
            print("finished", steps)
        except KeyboardInterrupt:
            print("interrupted", steps)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # Stopped at the first check after the signal: ['input'] on an idle machine; on a loaded one
    # the timer's thread may run only after the input is made, and the run stops a step later.
    # Either way before its last stage, and with nothing written.
    outcome, _, steps = result.stdout.strip().partition(" ")
    assert outcome == "interrupted", result.stdout
    steps = ast.literal_eval(steps)  # the list the script printed
    assert steps[0] == "input" and len(steps) <= 3, steps
    assert not out.exists() or not any(out.iterdir())
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]
