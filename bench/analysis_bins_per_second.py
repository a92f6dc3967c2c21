#!/usr/bin/env python3
"""ifusim.analysis's speed (docs/benchmarks.md, issue 26): bins fitted per second, 1 and 2 worker
processes, on the MaNGA disc of examples/observed_maps.py (a 2000 A slice, then MaNGA's whole
range). Not run by ctest.

    PYTHONPATH=build/python OMP_NUM_THREADS=1 build/venv/bin/python \
        bench/analysis_bins_per_second.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import warnings  # noqa: E402

import ifusim  # noqa: E402
from ifusim import analysis  # noqa: E402
import observed_maps as E  # noqa: E402

warnings.simplefilter("ignore")
for full in (False, True):
    cube = ifusim.run(E.config(full))
    for p in (1, 2):
        m = analysis.measure(cube, target_snr=10, processes=p)
        i = m.info
        print(f"full={full} target_snr=10 processes={p} n_wave={cube.shape[0]} fit {i['fit_range_rest_angstrom'][0]:.0f}-{i['fit_range_rest_angstrom'][1]:.0f} A, velscale {i['velscale_kms']:.1f}: {i['n_bins']} bins, fit {i['fit_seconds']:.2f} s, {i['bins_per_second']:.1f} bins/s, measure() {i['seconds']:.2f} s", flush=True)
