"""Smoothing classes (issue 22, step 2): how well a few classes of smoothing length and a sub-spaxel
phase grid reproduce the exact per-star kernel (stages/common/footprint.h), before it is built.

Spreading commutes with the product, K (H B) = (K H) B, so the binned method could deposit each
star without spreading into a histogram per (smoothing class, sub-spaxel phase), multiply each
class's unsmoothed histogram by B, and spread each class's cube planes once with the class's kernel.
The approximation is purely spatial (it acts on each histogram column alike), so this script
measures it on images: the stars of the benchmark's disc (bench/bench_common.h: exponential disc,
scale a fifth of the field, inclined 60 degrees, arctan rotation curve, 40 km/s dispersion,
log-normal masses), on MaNGA-32's simulated grid, with 32-neighbour smoothing lengths, split into
slices of line-of-sight velocity (a stand-in for the histogram's velocity columns, sparser than
any wavelength bin of the cube, which mixes many columns: a pessimistic proxy). The exact image
puts each star through footprint.h's kernel (a Gaussian of sigma = H / sqrt(40/3), truncated to
|dx|, |dy| <= H, renormalised over that square, integrated exactly over each spaxel); the
approximation:
- phase: each star split bilinearly between the 2 x 2 nearest nodes of a grid P times finer than
  the spaxels (P x P phases per spaxel); a class kernel is the exact kernel of a star sitting on
  that phase node;
- class: each star split between the two neighbouring of C log-spaced sigmas (or between a point,
  sigma = 0, and the smallest) with weights linear in sigma^2, so that the deposited variance is
  the star's (the error is then of fourth moment, second order in the class spacing);
and prints the binned method's targets' quantities against the exact images: max |diff| over the
peak voxel, the median and 99th percentile relative difference over voxels >= 1% of the peak,
and the total (no target for these slices: they are images, not the cube).

  build/venv/bin/python bench/smoothing_classes_study.py [--stars 20000]
"""

import argparse

import numpy as np
from scipy.spatial import cKDTree
from scipy.special import erf

THRESHOLDS, CLASSES, PHASES = (1.0, 2.0), (4, 8, 16), (1, 4)
SUPPORT_PER_SIGMA = np.sqrt(40.0 / 3.0)  # footprint.h: kSplineSupportPerSigma
INV_NORM = 0.5 / erf(SUPPORT_PER_SIGMA / np.sqrt(2.0))


def disc(n, seed, scale_kpc):
    """bench_common.h's disc_stars (the same distributions, numpy's generator)."""
    rng = np.random.default_rng(seed)
    r = rng.gamma(2.0, scale_kpc, n)
    phi = 2 * np.pi * rng.random(n)
    height = 0.05 * scale_kpc * rng.normal(size=n)
    x, y = r * np.cos(phi), r * np.sin(phi)
    v_c = 200.0 * (2 / np.pi) * np.arctan(r / 0.5)
    vy = v_c * np.cos(phi) + 40 * rng.normal(size=n)
    vz = 40 * rng.normal(size=n)
    inc = np.radians(60.0)
    pos = np.stack([x, y * np.cos(inc) - height * np.sin(inc), y * np.sin(inc) + height * np.cos(inc)], 1)
    v_los = vy * np.sin(inc) + vz * np.cos(inc)
    mass = 1e5 * 10 ** (0.3 * rng.normal(size=n))
    return pos, v_los, mass


def axis_weights(centre, sigma, reach, n, d):
    """Per star, the exact kernel's integral over each spaxel of one axis (footprint.h), on a window
    of W spaxels from i0: (i0, weights[n_stars, W])."""
    half = n * d / 2
    lo, hi = centre - reach, centre + reach
    i0 = np.clip(np.floor((lo + half) / d), 0, n - 1).astype(int)
    i1 = np.clip(np.floor((hi + half) / d), 0, n - 1).astype(int)
    w = int((i1 - i0).max()) + 1
    k = i0[:, None] + np.arange(w + 1)[None, :]  # spaxel edges
    edges = np.clip(k * d - half, lo[:, None], hi[:, None])
    e = erf((edges - centre[:, None]) / (np.sqrt(2) * sigma[:, None]))
    return i0, np.diff(e, axis=1) * INV_NORM


def kernel_image(x, y, sigma, weight, slice_index, n_slices, n, d):
    """Sum over stars of weight x the exact footprint, per slice: (n_slices, n, n). sigma 0: the
    star's own spaxel."""
    out = np.zeros(n_slices * n * n)
    half = n * d / 2
    point = sigma <= 0
    if point.any():
        ix = np.floor((x[point] + half) / d).astype(int)
        iy = np.floor((y[point] + half) / d).astype(int)
        ok = (ix >= 0) & (iy >= 0) & (ix < n) & (iy < n)
        idx = (slice_index[point] * n + iy) * n + ix
        out += np.bincount(idx[ok], weight[point][ok], out.size)
    order = np.where(~point)[0]
    # Bucket by the window's width so that the outer products stay small.
    reach = SUPPORT_PER_SIGMA * sigma
    width = np.ceil(2 * reach / d).astype(int) + 2
    for w in np.unique(width[order]):
        sel = order[width[order] == w]
        for chunk in np.array_split(sel, max(1, len(sel) * w * w // 4_000_000 + 1)):
            if len(chunk) == 0:
                continue
            ix0, wx = axis_weights(x[chunk], sigma[chunk], reach[chunk], n, d)
            iy0, wy = axis_weights(y[chunk], sigma[chunk], reach[chunk], n, d)
            cx = ix0[:, None] + np.arange(wx.shape[1])[None, :]
            cy = iy0[:, None] + np.arange(wy.shape[1])[None, :]
            vals = weight[chunk][:, None, None] * wy[:, :, None] * wx[:, None, :]
            okx = cx < n
            oky = cy < n
            idx = (slice_index[chunk][:, None, None] * n + cy[:, :, None]) * n + cx[:, None, :]
            ok = oky[:, :, None] & okx[:, None, :] & (vals != 0)
            out += np.bincount(idx[ok], vals[ok], out.size)
    return out.reshape(n_slices, n, n)


def class_kernel_1d(offset, sigma, d):
    """The exact kernel's per-spaxel integrals along one axis for a star at `offset` (in spaxels,
    from the centre of spaxel 0): (first relative spaxel, weights)."""
    if sigma <= 0:
        return 0, np.array([1.0])  # the node lies in spaxel 0 (offset within [-0.5, 0.5))
    n_big = 2 * int(np.ceil(SUPPORT_PER_SIGMA * sigma / d)) + 5
    grid_n = n_big
    half = grid_n * d / 2
    # Place spaxel 0's centre at the middle of a scratch axis of grid_n spaxels.
    mid = grid_n // 2
    centre = np.array([(offset + mid + 0.5) * d - half])
    i0, w = axis_weights(centre, np.array([sigma]), SUPPORT_PER_SIGMA * np.array([sigma]), grid_n, d)
    return int(i0[0]) - mid, w[0]


def spread(image, first, kern, axis):
    """Adds image shifted by first + j, times kern[j], along axis (light beyond the field is lost)."""
    out = np.zeros_like(image)
    n = image.shape[axis]
    for j, k in enumerate(kern):
        s = first + j
        if k == 0 or abs(s) >= n:
            continue
        src = [slice(None)] * image.ndim
        dst = [slice(None)] * image.ndim
        if s >= 0:
            src[axis], dst[axis] = slice(0, n - s), slice(s, n)
        else:
            src[axis], dst[axis] = slice(-s, n), slice(0, n + s)
        out[tuple(dst)] += k * image[tuple(src)]
    return out


def class_image(x, y, sigma, weight, slice_index, n_slices, n, d, classes, phases):
    """The approximation: classes (sigmas, the first may be 0: a point) x phases per axis."""
    half = n * d / 2
    c = np.asarray(classes)
    var = sigma**2
    # Class weights linear in sigma^2 between neighbours, clamped at the ends.
    hi = np.clip(np.searchsorted(c**2, var), 1, len(c) - 1)
    lo = hi - 1
    t = np.clip((var - c[lo] ** 2) / (c[hi] ** 2 - c[lo] ** 2), 0, 1)
    P = phases
    f = d / P
    # Phase nodes at the centres of the fine cells: node j at (j + 0.5) f - half.
    ux = (x + half) / f - 0.5
    uy = (y + half) / f - 0.5
    jx0 = np.floor(ux).astype(int)
    jy0 = np.floor(uy).astype(int)
    tx, ty = ux - jx0, uy - jy0
    dep = np.zeros(len(c) * P * P * n_slices * n * n)  # (class, phase y, phase x, slice, y, x)
    for cls, cw in ((lo, 1 - t), (hi, t)):
        for ax, wx in ((0, 1 - tx), (1, tx)):
            for ay, wy in ((0, 1 - ty), (1, ty)):
                jx = np.clip(jx0 + ax, 0, n * P - 1)
                jy = np.clip(jy0 + ay, 0, n * P - 1)
                w = weight * cw * wx * wy
                key = (cls * P + jy % P) * P + jx % P
                idx = ((key * n_slices + slice_index) * n + jy // P) * n + jx // P
                dep += np.bincount(idx, w, dep.size)
    dep = dep.reshape(len(c), P, P, n_slices, n, n)
    out = np.zeros((n_slices, n, n))
    for k in range(len(c)):
        for py in range(P):
            for px in range(P):
                img = dep[k, py, px]
                if not img.any():
                    continue
                off_x = (px + 0.5) / P - 0.5
                off_y = (py + 0.5) / P - 0.5
                fx, kx = class_kernel_1d(off_x, c[k], d)
                fy, ky = class_kernel_1d(off_y, c[k], d)
                out += spread(spread(img, fx, kx, 2), fy, ky, 1)
    return out


def agreement(approx, exact):
    peak = np.abs(exact).max()
    diff = np.abs(approx - exact)
    bright = exact >= 0.01 * peak
    rel = diff[bright] / np.abs(exact[bright])
    return dict(
        total=abs(approx.sum() - exact.sum()) / exact.sum(),
        max_over_peak=diff.max() / peak,
        median=np.median(rel),
        p99=np.percentile(rel, 99),
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stars", type=float, default=2e4)
    ap.add_argument("--slice-kms", type=float, default=25.0)
    args = ap.parse_args()
    n_stars = int(args.stars)
    kpc_per_arcsec = 0.6046  # z = 0.03, Planck 2015 (cosmology.h's default), as bench_common.h
    d = 0.5 * kpc_per_arcsec  # MaNGA-32's 0.5 arcsec spaxels
    n = 78  # the simulated grid of the benchmark run (6084 spaxels)
    scale = 0.2 * 32.0 * kpc_per_arcsec
    pos, v_los, mass = disc(n_stars, 5, scale)
    h = cKDTree(pos).query(pos, k=33)[0][:, 32]  # 32-neighbour lengths (support H)
    sigma = h / SUPPORT_PER_SIGMA
    s_d = sigma / d
    print(f"{n_stars} stars, MaNGA-32 grid {n} x {n}, spaxel {d:.3f} kpc; sigma / spaxel: "
          f"min {s_d.min():.3f} median {np.median(s_d):.3f} p99 {np.percentile(s_d, 99):.2f} "
          f"max {s_d.max():.2f}")
    sl = np.clip(np.floor((v_los + 400) / args.slice_kms), 0, int(800 / args.slice_kms) - 1)
    sl = sl.astype(int)
    n_sl = int(sl.max()) + 1
    # Both on a grid with a margin of M spaxels, cropped to the field: the exact kernel's weights do
    # not depend on the grid (footprint.h renormalises over the whole square), and a star beyond
    # the field may still reach into it, which the class deposit needs its node for. Stars beyond
    # the margin are left out of both.
    margin = 40
    n_big = n + 2 * margin
    inside = (np.abs(pos[:, 0]) < n_big * d / 2) & (np.abs(pos[:, 1]) < n_big * d / 2)
    x, y, sigma, mass, sl = pos[inside, 0], pos[inside, 1], sigma[inside], mass[inside], sl[inside]
    crop = (slice(None), slice(margin, margin + n), slice(margin, margin + n))
    exact = kernel_image(x, y, sigma, mass, sl, n_sl, n_big, d)[crop]
    white_exact = exact.sum(0)
    hi_s = sigma.max()
    print(f"velocity slices of {args.slice_kms} km/s ({n_sl}); stars with sigma below THR spaxels "
          f"keep the exact kernel, the others go into C classes log-spaced over THR..{hi_s / d:.2f}")
    print("THR  C  P  class stars   slices: max/peak  median    p99       total   | white light: "
          "max/peak  median    p99")
    for thr in THRESHOLDS:
        small = sigma < thr * d
        exact_part = kernel_image(x[small], y[small], sigma[small], mass[small], sl[small], n_sl,
                                  n_big, d)[crop]
        big = ~small
        for C in CLASSES:
            for P in PHASES:
                classes = list(np.geomspace(thr * d, hi_s, C))
                approx = exact_part + class_image(x[big], y[big], sigma[big], mass[big], sl[big],
                                                  n_sl, n_big, d, classes, P)[crop]
                a = agreement(approx, exact)
                w = agreement(approx.sum(0), white_exact)
                print(f"{thr:3.1f} {C:2d} {P:2d}  {big.mean():10.3f}   {a['max_over_peak']:.2e}  "
                      f"{a['median']:.2e}  {a['p99']:.2e}  {a['total']:.1e}  |  "
                      f"{w['max_over_peak']:.2e}  {w['median']:.2e}  {w['p99']:.2e}", flush=True)

if __name__ == "__main__":
    main()
