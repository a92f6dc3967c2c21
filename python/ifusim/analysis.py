"""Observed maps: a cube measured as the surveys measure theirs (issue 26, docs/analysis.md).

``measure(cube, target_snr=...)`` Voronoi-bins the cube to a target S/N from its variance
(vorbin, Cappellari & Copin 2003, MNRAS 342, 345) and fits each bin's stellar kinematics with
pPXF (Cappellari & Emsellem 2004; Cappellari 2023, MNRAS 526, 3273) against the SSP library the
cube was made with, convolved to the cube's resolution. This is the shape of MaNGA's Data
Analysis Pipeline (Westfall et al. 2019, AJ 158, 231): S/N per spaxel from the variance, spaxels
below a minimum S/N left out, additive Legendre polynomials of degree 8 and no multiplicative
ones, emission lines masked. ``intrinsic_maps(cube)`` gives the run's light-weighted velocity
and dispersion convolved with the run's PSF, to compare like with like.

Command line: ``python -m ifusim.analysis CUBE.fits --out maps.fits [--png DIR]``.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import re
import tempfile
import time
import warnings
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

C_KMS = 299792.458  # speed of light (CODATA, exact)
SIGMA_PER_FWHM = 1.0 / math.sqrt(8.0 * math.log(2.0))

# MaNGA DAP defaults for the stellar-continuum fit (Westfall et al. 2019, sec. 7.3): additive
# Legendre polynomials of order 8, no multiplicative ones, S/N >= 1 per spaxel to be binned.
DAP_DEGREE = 8
DAP_MDEGREE = 0
DAP_MIN_SNR = 1.0
# Emission lines are masked +-400 km/s (pPXF's determine_goodpixels, width 800 km/s, the same
# list of lines as the DAP's stellar-kinematics mask).
MASK_WIDTH_KMS = 800.0
# The templates must reach past the fitted range by this much: pPXF (9.x, set_lam_input) asks
# for 2000 + 900 km/s beyond the starting velocity on either side.
TEMPLATE_MARGIN = 3000.0 / C_KMS
# Fewer fitted Angstrom than this is no fit: "the templates do not cover the cube".
MIN_FIT_RANGE_ANGSTROM = 500.0


class AnalysisError(ValueError):
    """A cube, library or parameter measure() cannot work with; the message says which."""


# ---------------------------------------------------------------------------------------------
# The SSP library, read as ifusim reads it (io/ssp/pypipe3d.cpp, io/ssp/miles.cpp)


class Library:
    """SSP templates: rest wavelengths (``medium``), spectra (n_pix, n_templates), their FWHM."""

    def __init__(self, name, wavelength, flux, medium, fwhm, ages_gyr, metallicities):
        self.name = name
        self.wavelength_angstrom = np.asarray(wavelength, float)
        self.flux = np.asarray(flux, float)
        self.medium = medium
        self._fwhm = fwhm  # (wavelengths, fwhm) or a number
        self.age_gyr = np.asarray(ages_gyr, float)
        self.metallicity = np.asarray(metallicities, float)

    def fwhm_angstrom(self, rest_wavelength):
        """The templates' own FWHM at these rest wavelengths (linear, constant beyond)."""
        if np.isscalar(self._fwhm):
            return np.full(np.shape(rest_wavelength), float(self._fwhm))
        return np.interp(rest_wavelength, *self._fwhm)


def _mastar_fwhm():
    # io/ssp/pypipe3d.cpp mastar_resolution_fwhm_angstrom: MaStar's R from Yan et al. (2019,
    # ApJ 883, 175), 1560-2270 in the blue arm and 1850-2650 in the red, as FWHM = lambda / R.
    w = np.array([3700.0, 6000.0, 6000.001, 9000.0])
    return w, w / np.array([1560.0, 2270.0, 1850.0, 2650.0])


def read_library(path: Union[str, os.PathLike]) -> Library:
    """A pyPipe3D FITS (MaStar) or a MILES folder, as the run read it (docs/ssp_format.md)."""
    from astropy.io import fits

    path = os.fspath(path)
    if path.startswith("${IFUSIM_DATA_DIR}"):
        from . import _core

        path = _core.data_dir() + path[len("${IFUSIM_DATA_DIR}"):]
    path = Path(path)
    if not path.exists():
        raise AnalysisError(f"{path}: SSP library not found (set IFUSIM_DATA_DIR or ssp_library=)")
    if path.is_dir():  # MILES: one FITS per (Z, age), io/ssp/miles.cpp's names
        name_re = re.compile(r"^(.*)Z([mp])([0-9]+\.[0-9]+)T([0-9]+\.[0-9]+)(.*)\.fits$")
        rows = []
        for f in sorted(path.iterdir()):
            m = name_re.match(f.name)
            if m:
                mh = float(m.group(3)) * (-1 if m.group(2) == "m" else 1)
                rows.append((float(m.group(4)), mh, f))
        if not rows:
            raise AnalysisError(f"{path}: no MILES files (<...>Z[mp]<MH>T<age>...fits) in it")
        rows.sort()
        flux, wave = [], None
        for _age, _mh, f in rows:
            with fits.open(f) as h:
                hdr = h[0].header
                spec = np.asarray(h[0].data, float).ravel()
                pixel = np.arange(spec.size) + 1 - hdr.get("CRPIX1", 1)
                w = hdr["CRVAL1"] + hdr["CDELT1"] * pixel
            wave = w if wave is None else wave
            flux.append(spec)
        # MILES: 2.51 A FWHM (Falcon-Barroso et al. 2011), in air.
        return Library(path.name, wave, np.array(flux).T, "air", 2.51,
                       [r[0] for r in rows], [r[1] for r in rows])
    with fits.open(path) as h:  # pyPipe3D: rows x NORMi, NAMEi = spec_ssp_<age>_z<Z>.spec
        hdr = h[0].header
        data = np.asarray(h[0].data, float)
        if data.ndim != 2:
            raise AnalysisError(f"{path}: expected a 2-D pyPipe3D image (n_ssp x n_pix)")
        ages, zs, flux = [], [], []
        for i in range(data.shape[0]):
            m = re.match(r"^spec_ssp_([0-9.eE+-]+?)(Gyr|Myr)?_z([0-9]+)",
                         str(hdr.get(f"NAME{i}", "")))
            if not m or f"NORM{i}" not in hdr:
                raise AnalysisError(
                    f"{path}: header keywords NAME{i}/NORM{i} missing or unreadable")
            ages.append(float(m.group(1)) * (1e-3 if m.group(2) == "Myr" else 1.0))
            zs.append(float("0." + m.group(3)))
            flux.append(data[i] * float(hdr[f"NORM{i}"]))
        wave = hdr["CRVAL1"] + hdr["CDELT1"] * (np.arange(data.shape[1]) + 1 - hdr.get("CRPIX1", 1))
        fwhm = float(hdr["FWHM"]) if "FWHM" in hdr else _mastar_fwhm()
        name = path.name.removesuffix(".gz").removesuffix(".fits")
        # MaStar is calibrated in vacuum (SDSS DR15 MaStar data model).
        return Library(name, wave, np.array(flux).T, "vacuum", fwhm, ages, zs)


# ---------------------------------------------------------------------------------------------
# What the cube says about itself: redshift, library, resolution, PSF (its provenance)


def _provenance(cube) -> dict:
    prov = dict(cube.provenance)
    try:
        prov["CONFIG"] = json.loads(prov.get("CONFIG", "{}"))
    except ValueError:
        prov["CONFIG"] = {}
    return prov


def _library_path(prov: dict, cube_name: str) -> str:
    ssp = prov.get("SSP", "")
    m = re.search(r"\((.*)\)\s*$", ssp)
    if not m:
        raise AnalysisError(f"{cube_name}: the cube does not say which SSP library made it "
                            "(provenance SSP); pass ssp_library=")
    path = m.group(1)
    if path.startswith("${IFUSIM_DATA_DIR}"):
        from . import _core

        path = _core.data_dir() + path[len("${IFUSIM_DATA_DIR}"):]
    return path


def _pipeline_stages(config: dict) -> list:
    pipeline = config.get("pipeline", "calc_ifu")
    if isinstance(pipeline, list):
        return [s if isinstance(s, str) else s.get("stage", "") for s in pipeline]
    from . import _core

    preset = Path(_core.telescope_preset_dir()).parent / "pipelines" / f"{pipeline}.json"
    if not preset.is_file():
        raise AnalysisError(f"pipeline '{pipeline}': no preset {preset}")
    doc = json.loads(preset.read_text())
    return [s if isinstance(s, str) else s.get("stage", "") for s in doc["stages"]]


def _curve(value, key):
    """A ResolutionCurve as JSON (a number or a table) -> callable of wavelength."""
    if isinstance(value, dict):
        w = np.asarray(value["wavelength_angstrom"], float)
        f = np.asarray(value[key], float)
        return lambda lam: np.interp(lam, w, f)
    return lambda lam: np.full(np.shape(lam), float(value))


def _telescope(config: dict) -> dict:
    from . import _core

    return json.loads(_core.telescope(json.dumps(config.get("telescope", "MUSE"))))


def cube_fwhm_angstrom(cube, library: Library, redshift: float, prov: dict):
    """The cube's spectral FWHM at each observed wavelength: the lsf stage's instrument FWHM
    where the templates (observed, (1 + z) wider) are finer, the templates' own elsewhere or
    when the run had no lsf stage (docs/post_stages.md, "lsf"); and where the lsf stage
    convolved (a boolean array)."""
    config = prov["CONFIG"]
    lam = np.asarray(cube.wavelength, float)
    own = library.fwhm_angstrom(lam / (1 + redshift)) * (1 + redshift)
    if "lsf" not in _pipeline_stages(config):
        return own, np.zeros(lam.size, bool)
    lsf_params = config.get("stages", {}).get("lsf", {})
    if "fwhm_angstrom" in lsf_params:
        tel = _curve(lsf_params["fwhm_angstrom"], "fwhm_angstrom")(lam)
    else:
        tel = _curve(_telescope(config)["lsf_fwhm_angstrom"], "fwhm_angstrom")(lam)
    return np.maximum(tel, own), tel > own


# ---------------------------------------------------------------------------------------------
# The fit of one bin, in a worker process (the templates are set once per process)

_WORK: dict = {}

# Emission lines fitted in the stellar fit's residual: rest wavelengths in vacuum, the engine's
# list (docs/emission_lines.md: the SDSS line list, NIST data).
EMISSION_LINES_VACUUM = {
    "oii_3726": 3727.092, "oii_3729": 3729.875, "hdelta": 4102.892, "hgamma": 4341.684,
    "hbeta": 4862.683, "oiii_4959": 4960.295, "oiii_5007": 5008.240, "oi_6300": 6302.046,
    "nii_6548": 6549.86, "halpha": 6564.61, "nii_6584": 6585.27, "sii_6716": 6718.29,
    "sii_6731": 6732.67,
}
# Pixels within this of a line enter its fit.
LINE_WINDOW_KMS = 1500.0


def _fit_lines(lam, resid, noise, v_start):
    """Gaussian emission lines in a bin's residual spectrum (flux density, log-rebinned rest
    wavelengths): one velocity and one intrinsic dispersion shared by every line (as the DAP ties
    them), a flux per line, each Gaussian widened in quadrature by the cube's instrumental
    sigma at the line and integrated over each pixel (erf). scipy's least_squares; errors from
    its Jacobian scaled by sqrt(chi^2/DOF). Returns (v, sigma, fluxes, errors) or None."""
    from scipy.optimize import least_squares
    from scipy.special import erf

    w = _WORK
    lines, sig_inst = w["line_lambda"], w["line_sigma_inst_kms"]
    half = 0.5 * (np.log(lam[1]) - np.log(lam[0]))
    lo_edge, hi_edge = lam * math.exp(-half), lam * math.exp(half)
    near = np.zeros(lam.size, bool)
    for l0 in lines:
        near |= np.abs(np.log(lam / l0)) * C_KMS < LINE_WINDOW_KMS
    use = near & np.isfinite(resid) & np.isfinite(noise) & (noise > 0)
    if use.sum() < 3 * len(lines) + 2:
        return None
    a, b, y, e = lo_edge[use], hi_edge[use], resid[use], noise[use]

    def shapes(v, sigma):
        cols = []
        for l0, si in zip(lines, sig_inst):
            centre = l0 * (1 + v / C_KMS)
            s_l = centre * math.sqrt(sigma**2 + si**2) / C_KMS
            z0, z1 = (a - centre) / (math.sqrt(2) * s_l), (b - centre) / (math.sqrt(2) * s_l)
            cols.append(0.5 * (erf(z1) - erf(z0)) / (b - a))  # mean density per unit flux
        return np.array(cols).T

    def residual(p):
        return (y - shapes(p[0], p[1]) @ p[2:]) / e

    g = shapes(v_start, 50.0)
    f0 = np.linalg.lstsq(g / e[:, None], y / e, rcond=None)[0]
    p0 = np.concatenate([[v_start, 50.0], f0])
    lower = np.concatenate([[v_start - 1000.0, 0.0], np.full(len(lines), -np.inf)])
    upper = np.concatenate([[v_start + 1000.0, 1000.0], np.full(len(lines), np.inf)])
    r = least_squares(residual, p0, bounds=(lower, upper), x_scale="jac")
    dof = max(use.sum() - r.x.size, 1)
    chi2 = float(np.sum(r.fun**2)) / dof
    try:
        cov = np.linalg.pinv(r.jac.T @ r.jac) * chi2
        err = np.sqrt(np.clip(np.diag(cov), 0, None))
    except np.linalg.LinAlgError:
        err = np.full(r.x.size, np.nan)
    return r.x[0], r.x[1], r.x[2:], err


def _fit_bin(args):
    from ppxf.ppxf import ppxf

    index, galaxy, noise = args
    w = _WORK
    good = w["goodpixels"][np.isfinite(galaxy[w["goodpixels"]]) & (noise[w["goodpixels"]] > 0)]
    scale = np.median(galaxy[good])
    if not (np.isfinite(scale) and scale > 0):
        return index, None
    # pPXF wants finite positive noise everywhere; pixels without it are outside goodpixels.
    ok = np.isfinite(noise) & (noise > 0)
    noise = np.where(ok, noise, 1e10 * np.median(noise[good])) / scale
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pp = ppxf(w["templates"], np.nan_to_num(galaxy / scale), noise, w["velscale"],
                  [0.0, 3.0 * w["velscale"]] + [0.0] * (w["moments"] - 2),
                  moments=w["moments"], degree=w["degree"], mdegree=w["mdegree"],
                  goodpixels=good, lam=w["lam"], lam_temp=w["lam_temp"], quiet=True, plot=False)
    err = pp.error * math.sqrt(pp.chi2)  # formal errors scaled by sqrt(chi^2/DOF) (pPXF docs)
    gas = None
    if len(w["line_lambda"]):
        fitted = _fit_lines(w["lam"], galaxy / scale - pp.bestfit, noise, float(pp.sol[0]))
        if fitted is not None:
            v, sigma, flux, ferr = fitted
            gas = (v, sigma, flux * scale, ferr[0], ferr[1], ferr[2:] * scale)
    return index, (np.asarray(pp.sol, float), np.asarray(err, float), float(pp.chi2), gas)


# ---------------------------------------------------------------------------------------------


def _line_flux_unit(cube_unit: str):
    """(factor, unit): the cube's flux-density unit times Angstrom as erg/(s cm^2) when astropy
    can read it, else the unit as it is times Angstrom."""
    try:
        import astropy.units as u

        factor = (u.Unit(cube_unit) * u.AA).to(u.erg / u.s / u.cm**2)
        return float(factor), "erg/(s*cm**2)"
    except Exception:  # noqa: BLE001  (a unit astropy does not know: keep the cube's)
        return 1.0, f"({cube_unit})*Angstrom"


class Maps(dict):
    """measure()'s result: numpy maps (ny, nx) keyed by name, with ``units``, ``info`` (the fit's
    settings and timing) and ``wcs`` (the cube's celestial WCS); ``write(path)`` writes them."""

    def __init__(self):
        super().__init__()
        self.units: dict = {}
        self.info: dict = {}
        self.wcs = None

    def write(self, path: Union[str, os.PathLike], png_dir=None) -> None:
        write_maps(self, path, png_dir)


def _load_cube(cube):
    from . import read_cube

    if isinstance(cube, (str, os.PathLike)):
        name = os.fspath(cube)
        if not Path(name).is_file():
            raise AnalysisError(f"{name}: cube not found")
        return read_cube(name), name
    return cube, "cube"


def measure(
    cube,
    target_snr: float = 20.0,
    *,
    min_snr: float = DAP_MIN_SNR,
    wave_range_angstrom: Optional[Sequence[float]] = None,
    degree: int = DAP_DEGREE,
    mdegree: int = DAP_MDEGREE,
    moments: int = 2,
    ssp_library: Optional[Union[str, os.PathLike]] = None,
    redshift: Optional[float] = None,
    variance=None,
    covariance_alpha: float = 0.0,
    mask_width_kms: float = MASK_WIDTH_KMS,
    emission_lines: Optional[Sequence[str]] = ("hbeta", "oiii_5007", "nii_6548", "halpha",
                                               "nii_6584", "sii_6716", "sii_6731"),
    processes: int = 2,
) -> Maps:
    """Voronoi bins and pPXF stellar kinematics of a cube (an ``ifusim.Cube`` or a FITS path).

    target_snr: the S/N each Voronoi bin reaches (None: no binning, every spaxel above
        ``min_snr`` fitted on its own). The S/N of a spaxel is the median over the fitted range
        of flux / sqrt(variance) per pixel (as the DAP); a bin's adds in quadrature.
    min_snr: spaxels below it are left out (bin_id -1), DAP default 1.
    wave_range_angstrom: rest-frame range to fit (default: where the templates cover the cube).
    degree, mdegree: pPXF's additive and multiplicative polynomial degrees (DAP: 8, 0).
    moments: 2 (V, sigma) or 4 (also h3, h4).
    ssp_library: default the library the cube's provenance names.
    redshift: default the cube's (provenance REDSHIFT); velocities are relative to it.
    variance: instead of the cube's STAT (e.g. a noiseless cube): an array of the cube's shape
        or a number.
    covariance_alpha: noise correlated between spaxels: a bin of N spaxels has its noise
        multiplied by 1 + alpha log10(N) (Garcia-Benito et al. 2015, A&A 576, A135; MaNGA's
        alpha = 1.62, Westfall et al. 2019). ifusim's noise stage draws every voxel
        independently after the PSF, so its cubes have alpha = 0 (the default).
    emission_lines: lines fitted as Gaussians in each bin's residual (one velocity and
        dispersion for all; those outside the fitted range are skipped); () for none.
    processes: worker processes for the fits (multiprocessing over bins).

    Returns a ``Maps`` dict of (ny, nx) arrays: ``bin_id``, ``snr`` (the bin's), ``snr_spaxel``,
    ``velocity_kms``, ``velocity_err_kms``, ``sigma_kms``, ``sigma_err_kms`` (``h3``, ``h4`` and
    their errors with moments=4), ``chi2``, ``flux_<line>`` (erg/(s cm^2), a bin's flux shared
    by its spaxels), ``velocity_gas_kms``, ``sigma_gas_kms`` and errors; NaN outside the bins.
    Raises AnalysisError (a ValueError) naming what is wrong: no variance, templates not
    covering the cube, a target S/N the whole cube cannot reach.
    """
    from ppxf import ppxf_util

    start = time.perf_counter()
    cube, name = _load_cube(cube)
    prov = _provenance(cube)
    n_wave, ny, nx = cube.shape
    data = np.ascontiguousarray(cube.data, dtype=float)
    if variance is None:
        if cube.var is None:
            raise AnalysisError(f"{name}: the cube has no variance (STAT): cannot compute S/N for "
                                "the Voronoi bins nor weigh the fit; add the noise stage to the "
                                "run, or pass variance=")
        var = np.ascontiguousarray(cube.var, dtype=float)
    else:
        var = np.broadcast_to(np.asarray(variance, float), data.shape).copy()
    if not np.all(np.isfinite(var[np.isfinite(data)]) & (var[np.isfinite(data)] >= 0)):
        raise AnalysisError(f"{name}: variance must be finite and >= 0 where the flux is finite")
    if moments not in (2, 4):
        raise AnalysisError(f"moments = {moments}: expected 2 (V, sigma) or 4 (V, sigma, h3, h4)")
    if target_snr is not None and not target_snr > 0:
        raise AnalysisError(f"target_snr = {target_snr}: expected a number > 0 (or None)")

    z = float(prov.get("REDSHIFT", "nan")) if redshift is None else float(redshift)
    if not (np.isfinite(z) and z > -1):
        raise AnalysisError(f"{name}: the cube does not say its redshift (provenance REDSHIFT); "
                            "pass redshift=")
    library = read_library(ssp_library if ssp_library is not None else _library_path(prov, name))

    # Observed wavelengths in the templates' medium, then at rest.
    lam_obs = np.asarray(cube.wavelength, float)
    if cube.medium == "air" and library.medium == "vacuum":
        lam_obs = ppxf_util.air_to_vac(lam_obs)
    elif cube.medium == "vacuum" and library.medium == "air":
        lam_obs = ppxf_util.vac_to_air(lam_obs)
    lam_rest = lam_obs / (1 + z)
    t_lo = library.wavelength_angstrom[0] * (1 + TEMPLATE_MARGIN)
    t_hi = library.wavelength_angstrom[-1] * (1 - TEMPLATE_MARGIN)
    lo, hi = max(lam_rest[0], t_lo), min(lam_rest[-1], t_hi)
    if wave_range_angstrom is not None:
        w_lo, w_hi = map(float, wave_range_angstrom)
        if w_lo < t_lo or w_hi > t_hi:
            raise AnalysisError(
                f"wave_range_angstrom = [{w_lo:g}, {w_hi:g}]: the templates ({library.name}) "
                f"cover {t_lo:.0f}-{t_hi:.0f} A at rest (less a 3000 km/s margin)")
        lo, hi = max(lo, w_lo), min(hi, w_hi)
    if hi - lo < MIN_FIT_RANGE_ANGSTROM:
        raise AnalysisError(
            f"{name}: the templates ({library.name}, {library.wavelength_angstrom[0]:.0f}-"
            f"{library.wavelength_angstrom[-1]:.0f} A at rest) cover {max(hi - lo, 0):.0f} A of "
            f"the cube's rest-frame {lam_rest[0]:.0f}-{lam_rest[-1]:.0f} A (z = {z:g}); need at "
            f"least {MIN_FIT_RANGE_ANGSTROM:.0f} A")
    sel = (lam_rest >= lo) & (lam_rest <= hi)

    # Spaxel S/N (DAP: median per pixel over the fitted range) and the Voronoi bins.
    flux2 = data[sel].reshape(sel.sum(), -1)
    var2 = var[sel].reshape(sel.sum(), -1)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN spaxels (outside the aperture)
        signal = np.nanmedian(flux2, axis=0)
        noise = np.sqrt(np.nanmedian(var2, axis=0))
        snr_spaxel = signal / noise
    usable = np.isfinite(snr_spaxel) & (noise > 0) & (snr_spaxel >= min_snr)
    if not usable.any():
        raise AnalysisError(f"{name}: no spaxel reaches the minimum S/N {min_snr:g}")
    idx = np.flatnonzero(usable)
    yy, xx = np.divmod(idx, nx)

    def bin_snr(s, n2, count):
        return np.sum(s) / math.sqrt(np.sum(n2)) / (1 + covariance_alpha * math.log10(count))

    if target_snr is None or np.all(snr_spaxel[idx] >= target_snr):
        bins = np.arange(idx.size)
    else:
        total = bin_snr(signal[idx], noise[idx] ** 2, idx.size)
        if total < target_snr:
            raise AnalysisError(
                f"target_snr = {target_snr:g}: unreachable: all {idx.size} spaxels of {name} with "
                f"S/N >= {min_snr:g} together reach S/N {total:.3g}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # vorbin's deprecation notice
            from vorbin.voronoi_2d_binning import voronoi_2d_binning

        def sn_func(index, s, n):
            return bin_snr(s[index], n[index] ** 2, index.size)

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # vorbin's deprecation notice
                bins = voronoi_2d_binning(xx.astype(float), yy.astype(float), signal[idx],
                                          noise[idx], target_snr, plot=False, quiet=True,
                                          pixelsize=1.0, sn_func=sn_func)[0]
        except (IndexError, ValueError):
            # vorbin's accretion made no bin reach the target although the whole field does
            # (its _reassign_bad_bins then has no good bin): the field is one bin.
            warnings.warn(f"target_snr = {target_snr:g}: only the whole field ({total:.3g}) "
                          "reaches it; one bin")
            bins = np.zeros(idx.size, dtype=int)
    n_bins = int(bins.max()) + 1
    bin_id = np.full(ny * nx, -1, dtype=np.int64)
    bin_id[idx] = bins

    # Bin spectra (summed flux and variance; the covariance correction on the noise).
    flux_all = data.reshape(n_wave, -1)[:, idx][sel]
    var_all = var.reshape(n_wave, -1)[:, idx][sel]
    gal = np.zeros((sel.sum(), n_bins))
    gvar = np.zeros((sel.sum(), n_bins))
    np.add.at(gal.T, bins, np.nan_to_num(flux_all.T))
    np.add.at(gvar.T, bins, np.nan_to_num(var_all.T))
    counts = np.bincount(bins, minlength=n_bins)
    gvar *= (1 + covariance_alpha * np.log10(counts)) ** 2
    bin_snr_values = np.array([bin_snr(signal[idx][bins == b], noise[idx][bins == b] ** 2,
                                       counts[b]) for b in range(n_bins)])

    # Log-rebinned spectra (flux density conserved) and templates at the cube's resolution.
    lam_fit = lam_rest[sel]
    gal_log, ln_lam, velscale = ppxf_util.log_rebin(lam_fit, gal)
    gvar_log = ppxf_util.log_rebin(lam_fit, gvar, velscale=velscale)[0]
    gal_log = gal_log.reshape(len(ln_lam), -1)
    noise_log = np.sqrt(np.clip(gvar_log.reshape(len(ln_lam), -1), 0, None))
    fwhm_cube_obs, lsf_convolved = cube_fwhm_angstrom(cube, library, z, prov)
    fwhm_cube_rest = np.interp(library.wavelength_angstrom, lam_rest, fwhm_cube_obs) / (1 + z)
    keep = ((library.wavelength_angstrom > lo * (1 - TEMPLATE_MARGIN) / 1.01) &
            (library.wavelength_angstrom < hi * (1 + TEMPLATE_MARGIN) * 1.01))
    lam_t = library.wavelength_angstrom[keep]
    step_t = np.gradient(lam_t)
    fwhm_diff2 = fwhm_cube_rest[keep] ** 2 - library.fwhm_angstrom(lam_t) ** 2
    # ifusim resamples each template, read as a step function of its pixels, onto the cube's
    # pixels by exact integration: two boxes (a template pixel, a cube pixel at rest) that
    # widen every line by their variance, width^2 / 12, beyond the FWHM above (measured: sigma
    # 40 km/s was fitted as 51 km/s on MaNGA pixels without them). Where the lsf stage
    # convolved, its kernel is integrated over the cube's pixels (erf differences,
    # docs/post_stages.md): one more cube-pixel box.
    step_cube_rest = float(np.median(np.diff(lam_rest)))
    lsf_boxes = np.interp(lam_t, lam_rest, lsf_convolved.astype(float)) > 0.5
    sigma2_pixels = (step_t**2 + step_cube_rest**2 * (1 + lsf_boxes)) / 12.0
    sigma_diff2 = np.clip(fwhm_diff2, 0, None) * SIGMA_PER_FWHM**2 + sigma2_pixels
    sigma_pix = np.sqrt(sigma_diff2) / step_t
    temps = library.flux[keep]
    if np.any(sigma_pix > 0.01):
        temps = np.column_stack([ppxf_util.gaussian_filter1d(t, np.maximum(sigma_pix, 1e-3))
                                 for t in temps.T])
    temps_log, ln_lam_t = ppxf_util.log_rebin(lam_t, temps, velscale=velscale)[:2]
    temps_log = temps_log.reshape(len(ln_lam_t), -1)
    temps_log /= np.median(temps_log[temps_log > 0])
    lam_range_t = np.exp(ln_lam_t[[0, -1]])
    goodpixels = ppxf_util.determine_goodpixels(ln_lam, lam_range_t, 0, width=mask_width_kms)

    # Emission lines in the fitted range, in the templates' medium, and the cube's
    # instrumental sigma at each (its FWHM and its pixel's box: the engine deposits lines
    # already widened to the templates' resolution, docs/emission_lines.md, so they end at the
    # cube's FWHM as the stars do).
    line_names, line_lambda, line_sigma = [], [], []
    for line in emission_lines or ():
        if line not in EMISSION_LINES_VACUUM:
            raise AnalysisError(f"emission_lines: unknown line '{line}'; known: "
                                f"{', '.join(EMISSION_LINES_VACUUM)}")
        l0 = EMISSION_LINES_VACUUM[line]
        if library.medium == "air":
            l0 = float(ppxf_util.vac_to_air(np.array([l0]))[0])
        window = math.exp(LINE_WINDOW_KMS / C_KMS)
        if not lo * window < l0 < hi / window:
            continue
        fwhm_rest = float(np.interp(l0, lam_rest, fwhm_cube_obs)) / (1 + z)
        boxes = 1 + (np.interp(l0, lam_rest, lsf_convolved.astype(float)) > 0.5)
        sigma_a = math.sqrt((fwhm_rest * SIGMA_PER_FWHM) ** 2 + boxes * step_cube_rest**2 / 12.0)
        line_names.append(line)
        line_lambda.append(l0)
        line_sigma.append(sigma_a / l0 * C_KMS)

    _WORK.clear()
    _WORK.update(line_lambda=np.array(line_lambda), line_sigma_inst_kms=np.array(line_sigma),
                 templates=temps_log, velscale=float(velscale), moments=moments, degree=degree,
                 mdegree=mdegree, goodpixels=np.asarray(goodpixels), lam=np.exp(ln_lam),
                 lam_temp=np.exp(ln_lam_t))
    tasks = [(b, gal_log[:, b], noise_log[:, b]) for b in range(n_bins)]
    fit_start = time.perf_counter()
    if processes > 1 and n_bins > 1:
        with multiprocessing.get_context("fork").Pool(processes) as pool:
            results = pool.map(_fit_bin, tasks, chunksize=max(1, n_bins // (8 * processes)))
    else:
        results = [_fit_bin(t) for t in tasks]
    fit_seconds = time.perf_counter() - fit_start

    sol = np.full((n_bins, moments), np.nan)
    err = np.full((n_bins, moments), np.nan)
    chi2 = np.full(n_bins, np.nan)
    n_lines = len(line_names)
    gas_v, gas_s, gas_v_err, gas_s_err = (np.full(n_bins, np.nan) for _ in range(4))
    gas_flux, gas_flux_err = np.full((n_bins, n_lines), np.nan), np.full((n_bins, n_lines), np.nan)
    for b, r in results:
        if r is not None:
            sol[b], err[b], chi2[b], gas = r
            if gas is not None:
                gas_v[b], gas_s[b], gas_flux[b], gas_v_err[b], gas_s_err[b], gas_flux_err[b] = gas
    # pPXF's V is c ln(1 + v/c) (Cappellari 2017, eq. 8): back to v, relative to the redshift.
    v = C_KMS * np.expm1(sol[:, 0] / C_KMS)
    v_err = err[:, 0] * np.exp(sol[:, 0] / C_KMS)

    maps = Maps()
    inside = bin_id >= 0

    def paint(values):
        out = np.full(ny * nx, np.nan)
        out[inside] = values[bin_id[inside]]
        return out.reshape(ny, nx)

    maps["bin_id"] = bin_id.reshape(ny, nx)
    maps.units["bin_id"] = ""
    for key, values, unit in (
        ("snr", bin_snr_values, ""),
        ("velocity_kms", v, "km/s"),
        ("velocity_err_kms", v_err, "km/s"),
        ("sigma_kms", sol[:, 1], "km/s"),
        ("sigma_err_kms", err[:, 1], "km/s"),
    ):
        maps[key] = paint(values)
        maps.units[key] = unit
    if moments == 4:
        for k, key in ((2, "h3"), (3, "h4")):
            maps[key], maps[key + "_err"] = paint(sol[:, k]), paint(err[:, k])
            maps.units[key] = maps.units[key + "_err"] = ""
    maps["chi2"] = paint(chi2)
    maps.units["chi2"] = ""
    maps["snr_spaxel"] = snr_spaxel.reshape(ny, nx)
    maps.units["snr_spaxel"] = ""
    if n_lines:
        # Line fluxes: rest-frame integrals of the flux density, (1 + z) times that observed,
        # in the cube's flux unit times Angstrom; a bin's flux shared equally by its spaxels
        # (so the map sums to the bins' total).
        flux_unit = _line_flux_unit(cube.unit)
        per_spaxel = (1 + z) / counts
        for k, line in enumerate(line_names):
            maps[f"flux_{line}"] = paint(gas_flux[:, k] * per_spaxel * flux_unit[0])
            maps[f"flux_{line}_err"] = paint(gas_flux_err[:, k] * per_spaxel * flux_unit[0])
            maps.units[f"flux_{line}"] = maps.units[f"flux_{line}_err"] = flux_unit[1]
        # The lines' centres are l0 (1 + v / c) at rest: v itself, relative to the redshift.
        for key, values in (("velocity_gas_kms", gas_v), ("velocity_gas_err_kms", gas_v_err),
                            ("sigma_gas_kms", gas_s), ("sigma_gas_err_kms", gas_s_err)):
            maps[key] = paint(values)
            maps.units[key] = "km/s"
    maps.units["snr_spaxel"] = ""
    seconds = time.perf_counter() - start
    maps.info = dict(
        cube=name, library=library.name, redshift=z, target_snr=target_snr, min_snr=min_snr,
        n_bins=n_bins, n_spaxels=int(idx.size), fit_range_rest_angstrom=[float(lo), float(hi)],
        velscale_kms=float(velscale), degree=degree, mdegree=mdegree, moments=moments,
        covariance_alpha=covariance_alpha, processes=processes, fit_seconds=fit_seconds,
        seconds=seconds, bins_per_second=n_bins / fit_seconds if fit_seconds > 0 else float("inf"),
        failed_bins=int(np.sum(~np.isfinite(chi2))), emission_lines=line_names)
    try:
        maps.wcs = cube.wcs.celestial
    except Exception:  # noqa: BLE001  (astropy missing or a WCS it cannot read: maps still fine)
        maps.wcs = None
    return maps


# ---------------------------------------------------------------------------------------------
# Intrinsic maps for comparison


def psf_kernel(cube, prov: Optional[dict] = None) -> Optional[np.ndarray]:
    """The run's PSF on the spaxel grid (stages.psf, else the telescope's FWHM), normalised;
    None when the run had no psf stage. Gaussian or Moffat as stages/psf (docs/post_stages.md),
    at the mean FWHM over the band when it varies with wavelength."""
    prov = prov or _provenance(cube)
    config = prov["CONFIG"]
    if "psf" not in _pipeline_stages(config):
        return None
    params = config.get("stages", {}).get("psf", {})
    lam = np.asarray(cube.wavelength, float)
    fwhm_value = params.get("fwhm_arcsec", _telescope(config)["psf_fwhm_arcsec"])
    fwhm = float(np.mean(_curve(fwhm_value, "fwhm_arcsec")(lam))) / cube.spaxel_arcsec
    shape = params.get("shape", "gaussian")
    half = int(math.ceil(4 * fwhm)) + 1
    y, x = np.mgrid[-half:half + 1, -half:half + 1].astype(float)
    r2 = x * x + y * y
    if shape == "moffat":
        beta = params.get("beta", 2.5)
        beta = float(np.mean(_curve(beta, "beta")(lam))) if isinstance(beta, dict) else float(beta)
        alpha = fwhm / (2 * math.sqrt(2 ** (1 / beta) - 1))
        k = (1 + r2 / alpha**2) ** -beta
    else:
        k = np.exp(-0.5 * r2 / (fwhm * SIGMA_PER_FWHM) ** 2)
    return k / k.sum()


def light_before_psf(config: dict, **run_kwargs) -> np.ndarray:
    """The light weighting the run's light-weighted maps, before the PSF: the white light of the
    same run without its psf, lsf and noise stages (the cube stages after the deposit are
    linear, so this is the light the kinematics maps were weighted with when
    ``stages.stellar_spectra.kinematics_band_angstrom`` is the whole band, its default).
    config: the run's config as a dict; run_kwargs: as ifusim.run (galaxy=, overrides=, ...)."""
    from . import run

    config = json.loads(json.dumps(config))
    config["pipeline"] = [s for s in _pipeline_stages(config) if s not in ("psf", "lsf", "noise")]
    for stage in ("psf", "lsf", "noise"):
        config.get("stages", {}).pop(stage, None)
    return np.array(run(config, **run_kwargs).maps["white_light"], float)


def intrinsic_maps(cube, light: np.ndarray) -> dict:
    """The run's light-weighted velocity and dispersion (particles, before the PSF), and the
    same seen through the run's PSF: the first two moments of the line-of-sight velocities,
    light * v and light * (sigma^2 + v^2) convolved with the PSF and divided by the convolved
    light. These are what a perfect measurement of the cube would give: compare them with
    measure()'s maps. light: the light before the PSF (light_before_psf)."""
    from scipy.signal import fftconvolve

    prov = _provenance(cube)
    m = cube.maps
    for key in ("velocity_light_kms", "dispersion_light_kms"):
        if key not in m:
            raise AnalysisError(f"the cube has no {key} map (written by stellar_spectra)")
    v = np.asarray(m["velocity_light_kms"], float)
    s = np.asarray(m["dispersion_light_kms"], float)
    light = np.asarray(light, float)
    if light.shape != v.shape:
        raise AnalysisError(f"light: shape {light.shape}, expected the cube's maps' {v.shape}")
    out = {"velocity_light_kms": v, "dispersion_light_kms": s}
    kernel = psf_kernel(cube, prov)
    ok = np.isfinite(light) & (light > 0) & np.isfinite(v) & np.isfinite(s)
    w = np.where(ok, light, 0.0)
    wv = np.where(ok, w * v, 0.0)
    wm2 = np.where(ok, w * (s**2 + v**2), 0.0)
    conv = [fftconvolve(a, kernel, mode="same") for a in (w, wv, wm2)] if kernel is not None \
        else [w, wv, wm2]
    with np.errstate(invalid="ignore", divide="ignore"):
        seen = conv[0] > 1e-6 * conv[0].max()
        vc = np.where(seen, conv[1] / conv[0], np.nan)
        sc = np.sqrt(np.clip(np.where(seen, conv[2] / conv[0], np.nan) - vc**2, 0, None))
    out["velocity_light_psf_kms"] = vc
    out["dispersion_light_psf_kms"] = sc
    out["light_psf"] = conv[0]
    return out


# ---------------------------------------------------------------------------------------------
# Files


# measure()'s settings as primary-header cards (8-character keywords).
_FITS_INFO = {
    "cube": ("CUBEFILE", "the measured cube"),
    "library": ("SSPLIB", "SSP templates fitted"),
    "redshift": ("REDSHIFT", "velocities are relative to it"),
    "target_snr": ("TARGSNR", "Voronoi target S/N (vorbin)"),
    "min_snr": ("MINSNR", "spaxels below it are not binned"),
    "n_bins": ("NBINS", "Voronoi bins"),
    "n_spaxels": ("NSPAXEL", "spaxels in the bins"),
    "fit_lo": ("FITWMIN", "[Angstrom] fitted range, rest frame"),
    "fit_hi": ("FITWMAX", "[Angstrom] fitted range, rest frame"),
    "velscale_kms": ("VELSCALE", "[km/s] log-rebinned pixel"),
    "degree": ("DEGREE", "pPXF additive polynomial degree"),
    "mdegree": ("MDEGREE", "pPXF multiplicative polynomial degree"),
    "moments": ("MOMENTS", "pPXF LOSVD moments"),
    "covariance_alpha": ("COVALPHA", "noise x (1 + alpha log10 N) per bin"),
    "processes": ("NPROC", "worker processes"),
    "fit_seconds": ("FITSEC", "[s] time of the fits"),
    "bins_per_second": ("BINSPSEC", "bins fitted per second"),
    "failed_bins": ("NFAILED", "bins pPXF could not fit"),
}


def write_maps(maps: Maps, path: Union[str, os.PathLike], png_dir=None) -> None:
    """One FITS image extension per map (EXTNAME = its name, BUNIT, the cube's 2-D WCS), the
    fit's settings in the primary header; quick-look PNGs into png_dir. Written to a temporary
    file and moved into place: a failure leaves nothing."""
    from astropy.io import fits

    path = Path(path)
    header = maps.wcs.to_header() if maps.wcs is not None else fits.Header()
    primary = fits.PrimaryHDU()
    primary.header["ORIGIN"] = ("ifusim.analysis", "maps measured from an ifusim cube")
    info = dict(maps.info)
    if "fit_range_rest_angstrom" in info:
        info["fit_lo"], info["fit_hi"] = info.pop("fit_range_rest_angstrom")
    if "cube" in info:
        info["cube"] = os.path.basename(str(info["cube"]))
    for key, (card, comment) in _FITS_INFO.items():
        value = info.get(key)
        if value is not None and not (isinstance(value, float) and not math.isfinite(value)):
            primary.header[card] = (value, comment)
    hdus = [primary]
    for key, values in maps.items():
        hdu = fits.ImageHDU(np.asarray(values), header=header.copy(), name=key.upper())
        if maps.units.get(key):
            hdu.header["BUNIT"] = maps.units[key]
        hdus.append(hdu)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".fits", dir=path.parent)
    os.close(fd)
    try:
        fits.HDUList(hdus).writeto(tmp, overwrite=True)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    if png_dir is not None:
        quicklooks(maps, png_dir)


def quicklooks(maps: Maps, out_dir, intrinsic: Optional[dict] = None) -> list:
    """PNG quick-looks of the velocity, dispersion, S/N and bins (and, given intrinsic maps,
    the recovered minus intrinsic velocity). Returns the files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    panels = [("velocity_kms", "RdBu_r", True), ("sigma_kms", "viridis", False),
              ("snr", "magma", False), ("bin_id", "tab20", False)]
    for key in ("flux_halpha", "velocity_gas_kms"):
        if key in maps:
            panels.append((key, "RdBu_r" if key.startswith("velocity") else "inferno",
                           key.startswith("velocity")))
    if intrinsic is not None and "velocity_light_psf_kms" in intrinsic:
        maps = dict(maps)
        maps["velocity_minus_intrinsic_kms"] = (maps["velocity_kms"]
                                                - intrinsic["velocity_light_psf_kms"])
        panels.append(("velocity_minus_intrinsic_kms", "RdBu_r", True))
    files = []
    for key, cmap, symmetric in panels:
        values = np.asarray(maps[key], float)
        if key == "bin_id":
            values = np.where(values >= 0, values, np.nan)
        fig, ax = plt.subplots(figsize=(4.2, 3.6))
        finite = values[np.isfinite(values)]
        kw = {}
        if symmetric and finite.size:
            lim = float(np.percentile(np.abs(finite), 98)) or 1.0
            kw = dict(vmin=-lim, vmax=lim)
        im = ax.imshow(values, origin="lower", cmap=cmap, **kw)
        fig.colorbar(im, ax=ax, label=key)
        ax.set_xlabel("x (spaxels)")
        ax.set_ylabel("y (spaxels)")
        fig.tight_layout()
        f = out_dir / f"{key}.png"
        fig.savefig(f, dpi=90)
        plt.close(fig)
        files.append(f)
    return files


def main(argv=None) -> int:
    import argparse

    from . import Error

    p = argparse.ArgumentParser(
        prog="python -m ifusim.analysis",
        description="Voronoi-bin a cube and fit its stellar kinematics with pPXF (issue 26)")
    p.add_argument("cube", help="a cube written by ifusim (FITS or HDF5)")
    p.add_argument("--out", required=True, help="the maps' FITS file")
    p.add_argument("--png", help="a folder for quick-look PNGs")
    p.add_argument("--target-snr", type=float, default=20.0)
    p.add_argument("--min-snr", type=float, default=DAP_MIN_SNR)
    p.add_argument("--degree", type=int, default=DAP_DEGREE)
    p.add_argument("--mdegree", type=int, default=DAP_MDEGREE)
    p.add_argument("--moments", type=int, default=2, choices=(2, 4))
    p.add_argument("--ssp-library", help="default: the library the cube names")
    p.add_argument("--processes", type=int, default=2)
    a = p.parse_args(argv)
    try:
        maps = measure(a.cube, a.target_snr, min_snr=a.min_snr, degree=a.degree,
                       mdegree=a.mdegree, moments=a.moments, ssp_library=a.ssp_library,
                       processes=a.processes)
        write_maps(maps, a.out, a.png)
    except (AnalysisError, OSError, Error) as e:  # Error: ifusim's (a cube it cannot read)
        print(f"ifusim analyse: {e}", file=__import__("sys").stderr)
        return 1
    info = maps.info
    print(f"{info['n_bins']} bins from {info['n_spaxels']} spaxels, fitted in "
          f"{info['fit_seconds']:.1f} s ({info['bins_per_second']:.1f} bins/s); wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
