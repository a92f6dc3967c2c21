"""mpdaf (the MUSE consortium's Python library, Piqueras et al. 2019, ASPC 521, 545) opens the cubes
ifusim writes as it opens the surveys' own (issue 25: "mpdaf and astropy open it without
warnings"): a MaNGA LOGCUBE (FLUX, its WAVE-LOG axis) and a MUSE cube (DATA, STAT), every warning
turned into an error while the file is read; the wavelength axis mpdaf reads is the survey's
(MaNGA: 3621.6 A, dlog10 lambda = 1e-4, 4563 planes, Law et al. 2016, AJ 152, 83; MUSE WFM: 1.25 A
steps) and the pixels are ifusim's."""
import warnings

import numpy as np
import pytest

import ifusim

# Imported before warnings become errors: mpdaf 3.5's own imports warn of scipy's deprecated
# scipy.ndimage.interpolation namespace, which says nothing of the files. mpdaf is the extra
# `ifusim[mpdaf]`, which the project's scripts do not install (a 3 min source build): without it
# these tests are reported as skipped, with this reason.
MpdafCube = pytest.importorskip(
    "mpdaf.obj", reason="mpdaf is not installed (pip install 'ifusim[mpdaf]')").Cube

MASTAR = "${IFUSIM_DATA_DIR}/ssp/MaStar_CB19.12_1_5.fits.gz"
MANGA_START, MANGA_LOG_STEP, MANGA_N_WAVE = 3621.59598486, 1e-4, 4563


def stars():
    rng = np.random.default_rng(7)
    n = 40
    return dict(
        position_kpc=rng.normal(0.0, 0.5, (n, 3)),
        velocity_kms=rng.normal(0.0, 50.0, (n, 3)),
        initial_mass_msun=np.full(n, 1e6),
        age_gyr=rng.uniform(0.5, 10.0, n),
        metallicity=rng.uniform(0.005, 0.03, n),
    )


def run(telescope, noise):
    pipeline = ["aperture", "stellar_spectra", "psum", "flux"] + (["noise"] if noise else [])
    config = {
        "galaxy": {"redshift": 0.03},
        "telescope": telescope,
        "ssp": {"library": MASTAR, "outside_grid": "clamp"},
        "pipeline": pipeline,
        "stages": {"flux": {"unit_scale": 1e-17}, "noise": {"snr": 20, "per": "angstrom"}}
        if noise else {"flux": {"unit_scale": 1e-17}},
        "seed": 3,
    }
    return ifusim.run(config, galaxy=ifusim.Galaxy.from_arrays(stars(), redshift=0.03))


def open_strictly(path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return MpdafCube(str(path), **kwargs)


def test_mpdaf_opens_a_manga_logcube_with_the_surveys_axis(tmp_path):
    cube = run("MaNGA-12", noise=False)
    path = tmp_path / "manga.fits"
    cube.to_fits(path)
    mp = open_strictly(path, ext="FLUX")
    assert mp.shape == cube.shape
    assert mp.shape[0] == MANGA_N_WAVE
    want = MANGA_START * 10 ** (np.arange(MANGA_N_WAVE) * MANGA_LOG_STEP)
    got = mp.wave.coord()
    assert np.max(np.abs(got / want - 1)) < 1e-6
    assert got[0] == pytest.approx(3621.6, abs=0.01)
    assert got[-1] == pytest.approx(10353.8, abs=0.01)
    flux = mp.data.filled(np.nan)
    assert np.isfinite(flux).any() and np.nanmax(flux) > 0
    np.testing.assert_allclose(flux, cube.data, rtol=1e-6, atol=0, equal_nan=True)


def test_mpdaf_opens_a_muse_cube_with_its_variance(tmp_path):
    cube = run("MUSE", noise=True)
    path = tmp_path / "muse.fits"
    cube.to_fits(path)
    mp = open_strictly(path)  # DATA and STAT, as MUSE's pipeline writes them
    assert mp.shape == cube.shape
    got = mp.wave.coord()
    np.testing.assert_allclose(got, cube.wavelength, rtol=1e-9, atol=0)
    assert got[1] - got[0] == pytest.approx(1.25, rel=1e-9)
    assert mp.var is not None
    data, var = mp.data.filled(np.nan), mp.var.filled(np.nan)
    assert np.isfinite(data).any() and np.nanmax(var) > 0
    np.testing.assert_allclose(data, cube.data, rtol=1e-6, atol=0, equal_nan=True)
    np.testing.assert_allclose(var, cube.var, rtol=1e-6, atol=0, equal_nan=True)
