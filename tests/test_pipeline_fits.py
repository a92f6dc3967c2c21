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

maps = ["DISPERSION_LIGHT_KMS", "DISPERSION_MASS_KMS", "VELOCITY_LIGHT_KMS", "VELOCITY_MASS_KMS",
        "WHITE_LIGHT"]
warnings.simplefilter("error", fits.verify.VerifyWarning)
with fits.open(cube_fits) as hdul, h5py.File(f"{directory}/cube.h5", "r") as h5:
    hdul.verify("exception")
    names = [h.name for h in hdul]
    check(names == ["PRIMARY", "DATA", "STAT"] + maps, f"HDUs {names}")
    data, stat = hdul["DATA"], hdul["STAT"]

    # Units: DATA in 1e-20 erg/s/cm2/A (the flux stage's default), STAT its square, the maps'.
    unit = fits_unit(data.header["BUNIT"])
    flux = u.erg / u.s / u.cm**2 / u.AA
    check(unit.is_equivalent(flux) and math.isclose(unit.to(flux), 1e-20, rel_tol=1e-12),
          f"DATA BUNIT '{data.header['BUNIT']}' -> {unit}")
    check(fits_unit(stat.header["BUNIT"]) == unit**2, f"STAT BUNIT '{stat.header['BUNIT']}'")
    for name in maps:
        want = unit if name == "WHITE_LIGHT" else u.km / u.s
        check(fits_unit(hdul[name].header["BUNIT"]) == want,
              f"{name} BUNIT '{hdul[name].header['BUNIT']}' == {want}")

    # WCS: the centre of the field at the galaxy's RA/Dec, the spectral axis the preset's, every
    # map on the same sky grid as the cube.
    w = WCS(data.header)
    nx, ny, n_wave = data.header["NAXIS1"], data.header["NAXIS2"], data.header["NAXIS3"]
    ra0, dec0 = config["galaxy"]["ra_deg"], config["galaxy"]["dec_deg"]
    ra, dec, lam = w.pixel_to_world_values((nx - 1) / 2, (ny - 1) / 2, 0)
    check(abs(float(ra) - ra0) < 1e-10 and abs(float(dec) - dec0) < 1e-10,
          f"field centre at RA, Dec = {float(ra)}, {float(dec)}")
    band = preset["wavelength"]
    for k in (0, n_wave - 1):
        _, _, lam = w.pixel_to_world_values(0, 0, k)
        want = (band["start_angstrom"] + k * band["step_angstrom"]) * 1e-10
        check(math.isclose(float(lam), want, rel_tol=1e-12), f"wavelength of pixel {k}")
    check(w.wcs.ctype[2] == ("AWAV" if band.get("medium", "air") == "air" else "WAVE"),
          f"CTYPE3 {w.wcs.ctype[2]}")
    step_deg = preset["spaxel_arcsec"] / 3600
    check(math.isclose(abs(w.wcs.cdelt[0]), step_deg, rel_tol=1e-12), "spaxel size")
    check(WCS(stat.header).wcs.compare(w.wcs), "STAT has the WCS of DATA")
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
    check(bool(np.all(np.isfinite(d[:, inside]))) and bool(np.all(np.isfinite(s[:, inside]))),
          f"DATA and STAT finite in the {int(inside.sum())} spaxels inside the {shape} aperture")
    check(bool(np.all(np.isnan(d[:, ~inside]))) and bool(np.all(np.isnan(s[:, ~inside]))),
          f"DATA and STAT NaN in the {int((~inside).sum())} spaxels outside it")
    check(bool(np.all(np.isnan(hdul["WHITE_LIGHT"].data[~inside]))), "WHITE_LIGHT NaN outside")
    check(float(np.nanmax(d)) > 0 and float(np.nanmax(hdul["WHITE_LIGHT"].data)) > 0,
          "the cube holds light")

    # The same numbers in the HDF5 file (read by h5py), NaN for NaN.
    def same(a, b):
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))
    check(same(np.asarray(h5["data"]), d), "cube.h5 /data == DATA")
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
