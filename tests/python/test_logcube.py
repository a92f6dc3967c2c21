"""MaNGA's LOGCUBE through the Python package (issue 25, survey data products): the log-lambda
axis the MaNGA presets now have (Law et al. 2016, AJ 152, 83: 3621.6-10353.8 A, dlog10 lambda =
1e-4, 4563 pixels, vacuum), its WCS as astropy reads it from the cube and from the FITS file
(every wavelength to 1e-6 relative, no warning), a Doppler shift that is a constant number of
pixels on that axis, and the light conserved against a fine linear grid over the same band."""
import math
import warnings

import numpy as np
import pytest

import ifusim

C_KMS = 299792.458
MASTAR = "${IFUSIM_DATA_DIR}/ssp/MaStar_CB19.12_1_5.fits.gz"
START, LOG_STEP, N_WAVE = 3621.59598486, 1e-4, 4563


def config(telescope="MaNGA-12"):
    return {
        "galaxy": {"redshift": 0.03},
        "telescope": telescope,
        "ssp": {"library": MASTAR, "outside_grid": "clamp"},
        "pipeline": ["aperture", "stellar_spectra", "psum"],
        "seed": 1,
    }


def stars(v_los_kms=0.0):
    rng = np.random.default_rng(4)
    n = 50
    return dict(
        position_kpc=np.zeros((n, 3)),
        velocity_kms=np.column_stack([np.zeros(n), np.zeros(n), np.full(n, v_los_kms)]),
        initial_mass_msun=np.full(n, 1e6),
        age_gyr=rng.uniform(0.5, 10.0, n),
        metallicity=rng.uniform(0.005, 0.03, n),
    )


def survey_wavelengths():
    return START * 10 ** (np.arange(N_WAVE) * LOG_STEP)


def widths(wavelength):
    """The bins' widths: their edges are the geometric midpoints of the centres."""
    return wavelength * (10 ** (LOG_STEP / 2) - 10 ** (-LOG_STEP / 2))


@pytest.fixture(scope="module")
def manga_cube():
    return ifusim.run(config(), galaxy=ifusim.Galaxy.from_arrays(stars(), redshift=0.03))


def test_the_cube_is_mangas_logcube_grid(manga_cube):
    assert manga_cube.shape[0] == N_WAVE
    assert manga_cube.medium == "vacuum"
    assert manga_cube.wave_log10_step == LOG_STEP
    np.testing.assert_allclose(manga_cube.wavelength, survey_wavelengths(), rtol=1e-13, atol=0)
    assert manga_cube.wavelength[0] == pytest.approx(3621.6, abs=0.01)
    assert manga_cube.wavelength[-1] == pytest.approx(10353.8, abs=0.01)


def test_astropy_wcs_gives_the_survey_wavelengths_without_warnings(manga_cube, tmp_path):
    from astropy.io import fits
    from astropy.wcs import WCS

    path = tmp_path / "cube.fits"
    manga_cube.to_fits(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        in_memory = manga_cube.wcs
        with fits.open(path) as hdul:
            names = [h.name for h in hdul]
            from_file = WCS(hdul["FLUX"].header)
            wave = np.array(hdul["WAVE"].data)
    assert not caught, [str(w.message) for w in caught]
    assert names[:4] == ["PRIMARY", "FLUX", "MASK", "WAVE"]  # no noise stage: no IVAR
    want = survey_wavelengths()
    k = np.arange(N_WAVE)
    for wcs in (in_memory, from_file):
        assert wcs.wcs.ctype[2] == "WAVE-LOG"
        lam = wcs.pixel_to_world_values(np.zeros(N_WAVE), np.zeros(N_WAVE), k)[2] * 1e10
        assert np.max(np.abs(lam / want - 1)) < 1e-6
    np.testing.assert_allclose(wave, want, rtol=1e-13, atol=0)


def test_a_doppler_shift_is_a_constant_number_of_pixels(manga_cube):
    # On a log-lambda axis lambda (1 + v/c) is log10(1 + v/c) / 1e-4 pixels further, everywhere:
    # 300 km/s is 4.35 pixels. Cross-correlated in pixels, to 0.05 pixel (3.5 km/s).
    v = 300.0
    moved = ifusim.run(config(), galaxy=ifusim.Galaxy.from_arrays(stars(v), redshift=0.03))
    a = manga_cube.data.sum(axis=(1, 2))[200:-200]
    b = moved.data.sum(axis=(1, 2))[200:-200]
    a, b = a - a.mean(), b - b.mean()
    lags = np.arange(-20, 21)
    corr = np.array([np.dot(a[20:-20], b[20 + k : len(b) - 20 + k]) for k in lags])
    k = int(np.argmax(corr))
    c0, c1, c2 = corr[k - 1 : k + 2]
    lag = lags[k] + 0.5 * (c0 - c2) / (c0 - 2 * c1 + c2)
    want = math.log10(1 + v / C_KMS) / LOG_STEP
    assert lag == pytest.approx(want, abs=0.05)


def test_light_is_conserved_against_a_fine_linear_grid(manga_cube):
    # The same stars on a 0.25 A linear grid whose first and last edges are the log grid's: the
    # light integrated over wavelength (value x bin width) agrees to 3e-7 relative: the cubes hold
    # float32 voxels (6e-8 each), and numpy sums float32 arrays in float32 (pairwise), so the sums
    # are made in float64 here.
    lo, hi = START * 10 ** (-LOG_STEP / 2), START * 10 ** ((N_WAVE - 0.5) * LOG_STEP)
    n_fine = int(round((hi - lo) / 0.25))
    step = (hi - lo) / n_fine
    fine_telescope = {
        "preset": "MaNGA-12",
        "fits_layout": "muse",
        "wavelength": {"start_angstrom": lo + step / 2, "end_angstrom": hi, "step_angstrom": step,
                       "medium": "vacuum"},
    }
    fine = ifusim.run(config(fine_telescope),
                      galaxy=ifusim.Galaxy.from_arrays(stars(), redshift=0.03))
    assert fine.shape[0] == n_fine
    log_light = np.nansum(manga_cube.data.sum(axis=(1, 2), dtype=np.float64)
                          * widths(manga_cube.wavelength))
    fine_light = np.nansum(fine.data, dtype=np.float64) * step
    assert log_light > 0
    assert log_light == pytest.approx(fine_light, rel=3e-7)
