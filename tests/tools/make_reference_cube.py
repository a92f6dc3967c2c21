#!/usr/bin/env python3
"""Stores an example run's cube.h5 as a compact reference cube: the data (no variance) with the
float32 mantissa cut to 13 bits (relative precision 2^-13 = 1.2e-4), shuffled and deflated.
tests/test_pipeline.cpp compares fresh runs with it at a relative tolerance of 2.5e-4.
Usage: make_reference_cube.py RUN/cube.h5 tests/reference/NAME.h5"""
import sys

import h5py
import numpy as np

source, target = sys.argv[1], sys.argv[2]
with h5py.File(source, "r") as src, h5py.File(target, "w") as dst:
    for key, value in src.attrs.items():
        dst.attrs[key] = value
    for name in src:
        if name in ("variance",):
            continue
        if name == "data":
            bits = src["data"][...].view(np.uint32) & np.uint32(0xFFFFFC00)
            dst.create_dataset("data", data=bits.view(np.float32), compression="gzip",
                               compression_opts=9, shuffle=True, chunks=True)
            for key, value in src["data"].attrs.items():
                dst["data"].attrs[key] = value
        else:
            src.copy(name, dst)
print(f"{target}: reference cube written")
