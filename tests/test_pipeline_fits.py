#!/usr/bin/python3
"""Reads the cube a real pipeline run wrote (DIR/cube.fits, DIR/cube.h5) with readers independent
of ifusim (fitsverify, astropy, h5py) and checks it against the run's config and its telescope
preset: HDUs, BUNIT of every extension parsed by astropy's FITS unit format without a warning,
the WCS of every extension, the aperture's NaN mask, the FITS pixels against the HDF5 ones, and
the provenance. Usage: test_pipeline_fits.py DIR CONFIG.json TELESCOPE_PRESET.json (the run's
config and the preset its telescope was set to). Exits non-zero on
any failure (a missing fitsverify or astropy is a failure: scripts/setup.sh installs them)."""
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import warnings

try:
    import h5py
    import numpy as np
    from astropy.io import fits
    from astropy.wcs import WCS
    import astropy.units as u
except ImportError as e:
    print(f"FAIL: astropy/numpy/h5py not importable ({e}); run scripts/setup.sh")
    sys.exit(1)

from checks import check, finish  # tests/checks.py, beside this script


def fits_unit(text):
    """astropy's FITS unit format, with any warning (e.g. several solidi) an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return u.Unit(text, format="fits")


directory, config_path, preset_path = sys.argv[1:4]
config = json.load(open(config_path))
preset = json.load(open(preset_path))
cube_fits = f"{directory}/cube.fits"

# fitsverify (HEASARC): its summary line must report 0 warnings and 0 errors.
verify = subprocess.run(["fitsverify", cube_fits], capture_output=True, text=True)
summary = [line for line in verify.stdout.splitlines() if "Verification found" in line]
check(verify.returncode == 0 and summary == ["**** Verification found 0 warning(s) and 0 error(s). ****"],
      f"fitsverify: {summary}")

# The preset's layout (docs/outputs.md): MUSE's DATA and STAT, or MaNGA's LOGCUBE extensions
# FLUX, IVAR, MASK, WAVE, SPECRES (Law et al. 2016; the MaNGA DRP data model).
manga = preset.get("fits_layout", "muse") == "manga"
band = preset["wavelength"]
log_step = band.get("log10_step", 0.0)


def survey_wavelength(k):
    """Pixel k's centre as the survey defines its grid (Angstrom)."""
    if log_step:
        return band["start_angstrom"] * 10 ** (k * log_step)
    return band["start_angstrom"] + k * band["step_angstrom"]


maps = ["DISPERSION_LIGHT_KMS", "DISPERSION_MASS_KMS", "VELOCITY_LIGHT_KMS", "VELOCITY_MASS_KMS",
        "WHITE_LIGHT"]
warnings.simplefilter("error", fits.verify.VerifyWarning)
with fits.open(cube_fits) as hdul, h5py.File(f"{directory}/cube.h5", "r") as h5:
    hdul.verify("exception")
    names = [h.name for h in hdul]
    cube_hdus = (["FLUX", "IVAR", "MASK", "WAVE", "SPECRES", "SPECRESD", "PRESPECRES",
                  "PRESPECRESD"] if manga
                 else ["DATA", "STAT"])
    check(names == ["PRIMARY"] + cube_hdus + maps, f"HDUs {names}")
    data, stat = hdul[cube_hdus[0]], hdul[cube_hdus[1]]

    # Units: DATA in 1e-20 erg/s/cm2/A (the flux stage's default), STAT its square, the maps'.
    unit = fits_unit(data.header["BUNIT"])
    flux = u.erg / u.s / u.cm**2 / u.AA
    check(unit.is_equivalent(flux) and math.isclose(unit.to(flux), 1e-20, rel_tol=1e-12),
          f"DATA BUNIT '{data.header['BUNIT']}' -> {unit}")
    check(fits_unit(stat.header["BUNIT"]) == unit**(-2 if manga else 2),
          f"{stat.name} BUNIT '{stat.header['BUNIT']}'")
    for name in maps:
        want = unit if name == "WHITE_LIGHT" else u.km / u.s
        check(fits_unit(hdul[name].header["BUNIT"]) == want,
              f"{name} BUNIT '{hdul[name].header['BUNIT']}' == {want}")

    # WCS: the centre of the field at the galaxy's RA/Dec, the spectral axis the preset's, every
    # map on the same sky grid as the cube.
    with warnings.catch_warnings(record=True) as caught:  # astropy's WCS reads it as it is
        warnings.simplefilter("always")
        w = WCS(data.header)
    check(not caught, f"WCS of {data.name} read without warnings: {[str(c.message) for c in caught]}")
    nx, ny, n_wave = data.header["NAXIS1"], data.header["NAXIS2"], data.header["NAXIS3"]
    ra0, dec0 = config["galaxy"]["ra_deg"], config["galaxy"]["dec_deg"]
    ra, dec, lam = w.pixel_to_world_values((nx - 1) / 2, (ny - 1) / 2, 0)
    check(abs(float(ra) - ra0) < 1e-10 and abs(float(dec) - dec0) < 1e-10,
          f"field centre at RA, Dec = {float(ra)}, {float(dec)}")
    # Every pixel's wavelength from astropy's WCS against the survey's grid: 1e-12 relative for
    # a linear grid (the header holds the numbers themselves), 1e-6 for a logarithmic one (the
    # issue's target for MaNGA; measured: a few 1e-16).
    k = np.arange(n_wave)
    lam = w.pixel_to_world_values(np.zeros(n_wave), np.zeros(n_wave), k)[2] * 1e10
    want = np.array([survey_wavelength(i) for i in k])
    worst = float(np.max(np.abs(lam / want - 1)))
    check(worst < (1e-6 if log_step else 1e-12),
          f"astropy's WCS gives every wavelength to {worst:.2e} relative")
    ctype = ("AWAV" if band.get("medium", "air") == "air" else "WAVE") + ("-LOG" if log_step else "")
    check(w.wcs.ctype[2] == ctype, f"CTYPE3 {w.wcs.ctype[2]} == {ctype}")
    if manga:
        # MaNGA's LOGCUBE: 4563 pixels from 3621.6 to 10353.8 A (Law et al. 2016).
        check(n_wave == 4563 and abs(want[0] - 3621.6) < 0.01 and abs(want[-1] - 10353.8) < 0.01,
              f"MaNGA's grid: {n_wave} pixels, {want[0]:.3f}-{want[-1]:.3f} A")
        check(np.allclose(hdul["WAVE"].data, want, rtol=1e-12, atol=0), "WAVE holds the centres")
        # The DRP data model: PRESPECRES is lambda / FWHM of the pre-pixel LSF (the preset's),
        # SPECRES that of the LSF after pixelisation, whose sigma^2 gains the pixel's top hat,
        # width^2 / 12 (the width between the geometric midpoints of the log grid's centres).
        fwhm = preset["lsf_fwhm_angstrom"]
        width = want * (10 ** (log_step / 2) - 10 ** (-log_step / 2))
        post = np.sqrt(fwhm ** 2 + 8 * math.log(2) * width ** 2 / 12)
        check(np.allclose(hdul["PRESPECRES"].data, want / fwhm, rtol=1e-12, atol=0),
              f"PRESPECRES is lambda / FWHM ({fwhm} A)")
        check(np.allclose(hdul["SPECRES"].data, want / post, rtol=1e-12, atol=0),
              "SPECRES is lambda / FWHM of the pixelised LSF")
        check(np.all(hdul["SPECRES"].data < hdul["PRESPECRES"].data), "SPECRES < PRESPECRES")
        # SPECRESD, PRESPECRESD: their spread between fibres, 0 for one LSF curve.
        for name in ["SPECRESD", "PRESPECRESD"]:
            check(hdul[name].data.shape == (n_wave,) and np.all(hdul[name].data == 0),
                  f"{name}: 0 at each of the {n_wave} planes")
        check(hdul["MASK"].data.dtype.kind == "i", f"MASK integer: {hdul['MASK'].data.dtype}")
    step_deg = preset["spaxel_arcsec"] / 3600
    check(math.isclose(abs(w.wcs.cdelt[0]), step_deg, rel_tol=1e-12), "spaxel size")
    check(WCS(stat.header).wcs.compare(w.wcs), f"{stat.name} has the WCS of {data.name}")
    for name in maps:
        mw = WCS(hdul[name].header)
        same = mw.naxis == 2 and all(
            np.allclose(mw.pixel_to_world_values(x, y), w.celestial.pixel_to_world_values(x, y),
                        rtol=0, atol=1e-12) for x, y in [(0, 0), (nx - 1, ny - 1), (3, 1)])
        check(same, f"{name}: a 2-D image on the cube's sky grid")

    # The aperture: NaN in DATA, STAT and the maps outside it, finite inside (spaxel centres).
    half = preset["fov_arcsec"] / 2
    x = (np.arange(nx) - (nx - 1) / 2) * preset["spaxel_arcsec"]
    y = (np.arange(ny) - (ny - 1) / 2) * preset["spaxel_arcsec"]
    xx, yy = np.meshgrid(x, y)
    shape = preset.get("aperture", "square")
    if shape == "circular":
        inside = xx**2 + yy**2 <= half**2
    elif shape == "hexagonal":
        inside = (np.abs(yy) <= half * math.sqrt(3) / 2) & (
            math.sqrt(3) * np.abs(xx) + np.abs(yy) <= math.sqrt(3) * half)
    else:
        inside = np.ones((ny, nx), bool)
    d, s = data.data, stat.data
    if manga:
        # IVAR: > 0 inside, 0 outside (no measurement); MASK: 0 inside, NOCOV | DONOTUSE outside.
        check(bool(np.all(s[:, inside] > 0)) and bool(np.all(s[:, ~inside] == 0)),
              "IVAR > 0 inside the aperture, 0 outside")
        m = hdul["MASK"].data
        check(bool(np.all(m[:, inside] == 0)) and bool(np.all(m[:, ~inside] == 1 | 1024)),
              "MASK 0 inside, NOCOV | DONOTUSE (1025) outside")
        s = np.where(s > 0, 1 / np.where(s > 0, s, 1), np.nan)  # the variance, to compare below
    check(bool(np.all(np.isfinite(d[:, inside]))) and bool(np.all(np.isfinite(s[:, inside]))),
          f"data and variance finite in the {int(inside.sum())} spaxels inside the {shape} aperture")
    check(bool(np.all(np.isnan(d[:, ~inside]))) and bool(np.all(np.isnan(s[:, ~inside]))),
          f"data and variance NaN in the {int((~inside).sum())} spaxels outside it")
    check(bool(np.all(np.isnan(hdul["WHITE_LIGHT"].data[~inside]))), "WHITE_LIGHT NaN outside")
    check(float(np.nanmax(d)) > 0 and float(np.nanmax(hdul["WHITE_LIGHT"].data)) > 0,
          "the cube holds light")

    # The same numbers in the HDF5 file (read by h5py), NaN for NaN.
    def same(a, b):
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))
    check(same(np.asarray(h5["data"]), d), "cube.h5 /data == DATA")
    if manga:  # 1 / (1 / v) in float32: within a few float32 roundings
        v5 = np.asarray(h5["variance"])
        check(bool(np.allclose(v5, s, rtol=1e-6, atol=0, equal_nan=True)),
              "cube.h5 /variance == 1 / IVAR")
    else:
        check(same(np.asarray(h5["variance"]), s), "cube.h5 /variance == STAT")
    for name in maps:
        check(same(np.asarray(h5["maps"][name.lower()]), hdul[name].data),
              f"cube.h5 /maps/{name.lower()} == {name}")

    # Provenance: the config whole; paths under the data folder written relative to it.
    h = hdul[0].header
    prov = {h[f"PROVK{i:03d}"]: h[f"PROVV{i:03d}"] for i in range(1, h["NPROV"] + 1)}
    check(json.loads(prov["CONFIG"].replace("\\x0A", "\n"))["telescope"] == preset["name"],
          "CONFIG provenance parses and names the telescope")
    check("(${IFUSIM_DATA_DIR}/ssp/" in prov["SSP"], f"SSP provenance {prov['SSP']}")

# docs/outputs.md's h5py snippet, run as written in the output folder: it reads this cube.h5.
docs = pathlib.Path(__file__).resolve().parent.parent / "docs" / "outputs.md"
snippet = next(b for b in re.findall(r"```python\n(.*?)```", docs.read_text(), re.S)
               if 'h5py.File("cube.h5")' in b)
scope = {}
here = os.getcwd()
os.chdir(directory)
try:
    exec(snippet, scope)
    check(json.loads(scope["config"])["telescope"] == preset["name"],
          "docs/outputs.md's h5py snippet reads the cube and its config")
except Exception as e:  # a key the file does not have, a name the snippet lacks
    check(False, f"docs/outputs.md's h5py snippet fails: {e!r}")
finally:
    os.chdir(here)

finish()
