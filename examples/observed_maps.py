#!/usr/bin/env python3
"""Observed against intrinsic maps: a MaNGA cube of a synthetic rotating disc with noise,
Voronoi-binned and fitted with pPXF as MaNGA's DAP would (ifusim.analysis, docs/analysis.md),
drawn next to the run's light-weighted, PSF-convolved velocity and dispersion.

    python examples/observed_maps.py [--out out/observed_maps] [--full]

By default a 2000 A slice of MaNGA's range (4500-6500 A observed) so that it takes ~15 s;
--full fits MaNGA's whole 3622-10354 A. Writes maps.fits, observed_maps.png and the quick-looks.
Needs the package with its "analysis" extra (ppxf, vorbin: scripts/install-python.sh) and the
reference data in $IFUSIM_DATA_DIR.
"""

import argparse
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files, no window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import ifusim  # noqa: E402
from ifusim import analysis  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def config(full: bool) -> dict:
    telescope = "MaNGA-12" if full else {
        "preset": "MaNGA-12",
        "wavelength": {"start_angstrom": 4500.0, "end_angstrom": 6500.0, "step_angstrom": 1.04,
                       "medium": "vacuum"}}
    return {
        # A pure disc: a bulge would make the line-of-sight velocity distribution two-component.
        "input": {"synthetic": {"stars": 40000, "seed": 3, "redshift": 0.03,
                                "bulge_fraction": 0.0}, "read_gas": False},
        "galaxy": {"redshift": 0.03, "orientation": {"alpha_deg": 60}, "ra_deg": 150.0,
                   "dec_deg": 2.0},
        "telescope": telescope,
        "ssp": {"library": "${IFUSIM_DATA_DIR}/ssp/MaStar_CB19.12_1_5.fits.gz"},
        "pipeline": "calc_ifu",
        "stages": {"flux": {"unit_scale": 1e-17}, "noise": {"snr": 6, "per": "angstrom"}},
        "seed": 7,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "out" / "observed_maps"))
    parser.add_argument("--full", action="store_true", help="MaNGA's whole wavelength range")
    parser.add_argument("--target-snr", type=float, default=20.0)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # 1. The cube, and the light its light-weighted maps were weighted with (before the PSF).
    cfg = config(args.full)
    cube = ifusim.run(cfg)
    print(cube)
    intrinsic = analysis.intrinsic_maps(cube, analysis.light_before_psf(cfg))

    # 2. Voronoi bins to S/N 20 and pPXF stellar kinematics per bin, on both cores.
    start = time.perf_counter()
    maps = analysis.measure(cube, target_snr=args.target_snr, processes=2)
    info = maps.info
    print(f"{info['n_bins']} bins of {info['n_spaxels']} spaxels, fitted in "
          f"{info['fit_seconds']:.1f} s ({info['bins_per_second']:.1f} bins/s; "
          f"{time.perf_counter() - start:.1f} s in all)")
    maps.write(out / "maps.fits")
    analysis.quicklooks(maps, out, intrinsic)

    # 3. Recovered against intrinsic, bin by bin: the intrinsic maps averaged over each bin
    # with the PSF-convolved light (what the bin's summed spectrum weighs its spaxels by).
    bins, w = maps["bin_id"], intrinsic["light_psf"]
    vi, si = intrinsic["velocity_light_psf_kms"], intrinsic["dispersion_light_psf_kms"]
    rows = []
    for b in range(info["n_bins"]):
        sel = bins == b
        v_bin = np.sum(w[sel] * vi[sel]) / np.sum(w[sel])
        s_bin = np.sqrt(np.sum(w[sel] * (si[sel] ** 2 + vi[sel] ** 2)) / np.sum(w[sel]) - v_bin**2)
        rows.append((maps["snr"][sel][0], v_bin, maps["velocity_kms"][sel][0],
                     maps["velocity_err_kms"][sel][0], s_bin, maps["sigma_kms"][sel][0],
                     maps["sigma_err_kms"][sel][0]))
    snr, v_int, v_fit, v_err, s_int, s_fit, s_err = np.array(rows).T
    good = snr >= args.target_snr
    print(f"bins with S/N >= {args.target_snr:g}: {good.sum()}, median |dV| = "
          f"{np.median(np.abs(v_fit - v_int)[good]):.1f} km/s, median sigma ratio = "
          f"{np.median((s_fit / s_int)[good]):.3f}")

    fig, axes = plt.subplots(2, 3, figsize=(12, 7.5))
    lim = np.nanpercentile(np.abs(vi), 98)
    for ax, image, title in ((axes[0, 0], vi, "intrinsic V (light, PSF) [km/s]"),
                             (axes[0, 1], maps["velocity_kms"], "pPXF V [km/s]")):
        im = ax.imshow(image, origin="lower", cmap="RdBu_r", vmin=-lim, vmax=lim)
        fig.colorbar(im, ax=ax)
        ax.set_title(title)
    axes[0, 2].errorbar(v_int, v_fit, yerr=v_err, fmt="o", ms=3)
    axes[0, 2].plot([-lim, lim], [-lim, lim], "k:")
    axes[0, 2].set(xlabel="intrinsic V per bin [km/s]", ylabel="pPXF V [km/s]")
    smax = np.nanpercentile(si, 98)
    for ax, image, title in ((axes[1, 0], si, "intrinsic sigma (light, PSF) [km/s]"),
                             (axes[1, 1], maps["sigma_kms"], "pPXF sigma [km/s]")):
        im = ax.imshow(image, origin="lower", cmap="viridis", vmin=0, vmax=smax)
        fig.colorbar(im, ax=ax)
        ax.set_title(title)
    axes[1, 2].errorbar(s_int, s_fit, yerr=s_err, fmt="o", ms=3)
    axes[1, 2].plot([0, smax], [0, smax], "k:")
    axes[1, 2].set(xlabel="intrinsic sigma per bin [km/s]", ylabel="pPXF sigma [km/s]")
    fig.tight_layout()
    fig.savefig(out / "observed_maps.png", dpi=90)
    print(f"wrote {out / 'maps.fits'} and {out / 'observed_maps.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
