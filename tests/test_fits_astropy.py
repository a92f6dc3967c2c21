#!/usr/bin/python3
"""Reads DIR/cube.fits (written by tests/tools/write_example_cube) with astropy, a reader
independent of ifusim, and checks it against DIR/expected.json: shape, WCS, BUNIT, the variance
extension, pixel values and the long provenance string. Exits non-zero on any failure, and
clearly when astropy itself is missing (scripts/setup.sh installs python3-astropy)."""
import json
import math
import sys
import warnings

try:
    import numpy as np
    from astropy.io import fits
    from astropy.wcs import WCS
    import astropy.units as u
except ImportError as e:  # not a skip: the test needs astropy to mean anything
    print(f"FAIL: astropy/numpy not importable ({e}); install python3-astropy (scripts/setup.sh)")
    sys.exit(1)

from checks import check, finish  # tests/checks.py, beside this script


def close(a, b, rel=1e-12, abs_=0.0):
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


directory = sys.argv[1]
e = json.load(open(f"{directory}/expected.json"))
warnings.simplefilter("error", fits.verify.VerifyWarning)  # a non-standard card fails the test
with fits.open(f"{directory}/cube.fits") as hdul:
    hdul.verify("exception")
    names = [h.name for h in hdul]
    check(names == ["PRIMARY", "DATA", "STAT", "VELOCITY_LIGHT_KMS", "WHITE_LIGHT"],
          f"HDUs PRIMARY, DATA, STAT and the maps: {names}")
    check(hdul[0].data is None, "empty primary HDU")
    data, stat = hdul["DATA"], hdul["STAT"]
    shape = (e["n_wave"], e["ny"], e["nx"])
    check(data.data.shape == shape, f"DATA shape {data.data.shape} == (n_wave, ny, nx) {shape}")
    check(stat.data.shape == shape, f"STAT shape {stat.data.shape}")
    check(data.data.dtype.itemsize == 4 and data.data.dtype.kind == "f", f"float32: {data.data.dtype}")

    # WCS: the cube's centre (0-based pixel ((nx-1)/2, (ny-1)/2)) is at RA/Dec of the centre,
    # pixel k of the spectral axis at start + k * step (astropy gives metres).
    w = WCS(data.header)
    check(w.wcs.ctype[0] == "RA---TAN" and w.wcs.ctype[1] == "DEC--TAN", f"ctype {list(w.wcs.ctype)}")
    check(w.wcs.ctype[2] == e["ctype3"], f"CTYPE3 {w.wcs.ctype[2]} == {e['ctype3']}")
    ra, dec, lam = w.pixel_to_world_values((e["nx"] - 1) / 2, (e["ny"] - 1) / 2, 0)
    check(close(float(ra), e["ra_deg"], abs_=1e-10), f"centre RA {ra} == {e['ra_deg']}")
    check(close(float(dec), e["dec_deg"], abs_=1e-10), f"centre Dec {dec} == {e['dec_deg']}")
    for k in (0, 17, e["n_wave"] - 1):
        _, _, lam = w.pixel_to_world_values((e["nx"] - 1) / 2, (e["ny"] - 1) / 2, k)
        want = (e["wave_start_angstrom"] + k * e["wave_step_angstrom"]) * 1e-10
        check(close(float(lam), want, rel=1e-12), f"wavelength of pixel {k}: {lam} m == {want} m")
    # One spaxel east (x - 1) is RA + spaxel / cos(Dec) (to first order), one north is Dec + spaxel.
    ra_e, dec_e, _ = w.pixel_to_world_values((e["nx"] - 1) / 2 - 1, (e["ny"] - 1) / 2, 0)
    step = e["spaxel_arcsec"] / 3600
    check(close(float(ra_e) - e["ra_deg"], step / math.cos(math.radians(e["dec_deg"])), rel=1e-6),
          f"x - 1 is east by one spaxel: dRA = {float(ra_e) - e['ra_deg']}")
    _, dec_n, _ = w.pixel_to_world_values((e["nx"] - 1) / 2, (e["ny"] - 1) / 2 + 1, 0)
    check(close(float(dec_n) - e["dec_deg"], step, rel=1e-6), f"y + 1 is north by one spaxel")
    check(WCS(stat.header).wcs.compare(w.wcs), "STAT has the same WCS as DATA")

    # Units parse (astropy's generic format, the way astropy reads BUNIT).
    unit = u.Unit(data.header["BUNIT"])
    check(unit.is_equivalent(u.erg / u.s / u.cm**2 / u.AA), f"BUNIT '{data.header['BUNIT']}' -> {unit}")
    check(close(unit.to(u.erg / u.s / u.cm**2 / u.AA), 1e-20), "BUNIT scale 1e-20")
    var_unit = u.Unit(stat.header["BUNIT"])
    check(var_unit == unit**2, f"STAT BUNIT '{stat.header['BUNIT']}' -> {var_unit} == BUNIT squared")

    for v in e["voxels"]:
        got_d = float(data.data[v["k"], v["iy"], v["ix"]])
        got_v = float(stat.data[v["k"], v["iy"], v["ix"]])
        check(got_d == v["data"], f"DATA[k={v['k']}, iy={v['iy']}, ix={v['ix']}] = {got_d} == {v['data']}")
        check(got_v == v["variance"], f"STAT at the same voxel = {got_v} == {v['variance']}")
    check(bool(np.all(np.isfinite(data.data))) and float(data.data.min()) > 0, "DATA finite, > 0")

    # Provenance: the config comes back whole through the CONTINUE convention (its newline is
    # escaped as \x0A, see docs/outputs.md).
    h = hdul[0].header
    n = h["NPROV"]
    prov = {h[f"PROVK{i:03d}"]: h[f"PROVV{i:03d}"] for i in range(1, n + 1)}
    check(prov.get("config", "").replace("\\x0A", "\n") == e["config"],
          f"config provenance, {len(e['config'])} characters, read back whole")
    check(h.get("IFUSIMV", "") != "", f"IFUSIMV = {h.get('IFUSIMV')}")

    # The other direction: a cube written by astropy, with its reference pixel at the corner, a CD
    # matrix and the wavelength in metres, for ifusim's reader (write_example_cube --check DIR).
    ra0, dec0, _ = w.pixel_to_world_values(0, 0, 0)
    hdr = fits.Header()
    for k, v in [("CTYPE1", "RA---TAN"), ("CTYPE2", "DEC--TAN"), ("CTYPE3", "AWAV"),
                 ("CUNIT1", "deg"), ("CUNIT2", "deg"), ("CUNIT3", "m"),
                 ("CRPIX1", 1.0), ("CRPIX2", 1.0), ("CRPIX3", 1.0),
                 ("CRVAL1", float(ra0)), ("CRVAL2", float(dec0)),
                 ("CRVAL3", e["wave_start_angstrom"] * 1e-10),
                 ("CD1_1", -step), ("CD2_2", step), ("CD3_3", e["wave_step_angstrom"] * 1e-10),
                 ("BUNIT", data.header["BUNIT"])]:
        hdr[k] = v
    fits.HDUList([fits.PrimaryHDU(), fits.ImageHDU(data.data, hdr, name="DATA")]).writeto(
        f"{directory}/astropy_cube.fits", overwrite=True)

finish()
