#!/usr/bin/env python3
"""ifusim from Python: the MUSE example run in-process, its white-light image and central
spectrum drawn with matplotlib, and the cube compared with the command line's.

    python examples/quickstart.py [--cli build/ifusim] [--out out/quickstart]

Needs the package (`pip install .`, docs/python.md), matplotlib, and the reference data in
$IFUSIM_DATA_DIR (default ../shared/data beside the repository).
"""

import argparse
import shutil
import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files, no window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import ifusim  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "configs" / "examples" / "muse_tng_mastar.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default=shutil.which("ifusim") or str(ROOT / "build" / "ifusim"))
    parser.add_argument("--out", default=str(ROOT / "out" / "quickstart"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # 1. The run, in this process: a Cube with numpy arrays (n_wave, ny, nx).
    cube = ifusim.run(EXAMPLE, devices=2, overrides={"devices.oversubscribe": True})
    print(cube)
    print(f"{cube.summary['n_stars']} stars in {cube.summary['total_seconds']:.1f} s")

    # 2. The white-light image (a map the run made) and the spectrum of the central spaxel.
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    image = left.imshow(cube.maps["white_light"], origin="lower", cmap="viridis")
    fig.colorbar(image, ax=left, label=cube.unit)
    left.set(title="White light", xlabel="x (spaxel)", ylabel="y (spaxel)")
    n_wave, ny, nx = cube.shape
    right.plot(cube.wavelength, cube.data[:, ny // 2, nx // 2], lw=0.6)
    right.set(
        title="Central spaxel",
        xlabel=f"Wavelength ({cube.medium}, Angstrom)",
        ylabel=cube.unit,
    )
    fig.tight_layout()
    fig.savefig(out / "quickstart.png", dpi=120)
    print(f"drawn: {out / 'quickstart.png'}")

    # 3. The command line's cube of the same config: the same numbers.
    subprocess.run(
        [args.cli, "run", str(EXAMPLE), "--out", str(out / "cli"), "--no-progress"],
        check=True,
        capture_output=True,
    )
    cube.to_fits(out / "python.fits")
    result = ifusim.compare(out / "python.fits", out / "cli" / "cube.fits", rtol=0)
    print(result)
    assert np.isfinite(cube.data).all()
    return 0 if result.equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
