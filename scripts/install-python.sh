#!/usr/bin/env bash
# Installs the Python package (`pip install .`) into a fresh virtual environment: $1, default
# .venv in the repository. It is made with Debian's interpreter and sees its packages (numpy,
# astropy, pytest, from setup.sh). With $2, an existing build folder of the project (say build/),
# scikit-build-core builds in it (build-dir), so that only the module is compiled again; its tests
# and benchmarks stay configured. scikit-build-core and pybind11 come from PyPI (pip's isolated
# build environment). With the extras "jax" (jax, optax) and "torch", the frameworks of ifusim.jax
# and ifusim.torch, whose tests and examples/fit_disc_gradients.py ctest then runs
# (docs/gradients.md). torch comes from PyPI, whose Linux build carries its CUDA libraries (about
# 4 GB of the environment's 6, unused on a CPU): IFUSIM_TORCH_INDEX_URL, where set, names a wheel
# index to take torch from first, such as PyTorch's CPU-only one where it can be reached.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
venv="${1:-$root/.venv}"
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
reuse=()
if [ -n "${2:-}" ]; then
  reuse=(--config-settings "build-dir=$2" --config-settings cmake.define.IFUSIM_BUILD_TESTS=ON
         --config-settings cmake.define.IFUSIM_BUILD_BENCH=ON)
fi
# The interpreter's numpy and scipy (Debian's, which its other packages are built against) are
# kept: the newest jax and ml_dtypes would put numpy 2 into the environment, under Debian's scipy,
# astropy and h5py (built for numpy 1). pip then picks the newest jax that fits them.
constraints="$venv/constraints.txt"
"$venv/bin/python" -c 'import importlib
for name in ("numpy", "scipy"):
    try:
        print(f"{name}=={importlib.import_module(name).__version__}")
    except ImportError:
        pass' > "$constraints"
start=$(date +%s)
# The frameworks of the extras "jax" and "torch" first, on their own, so that CI's log shows
# their share of the time and of the disk.
if [ -n "${IFUSIM_TORCH_INDEX_URL:-}" ]; then
  "$venv/bin/pip" install --quiet --constraint "$constraints" \
    --index-url "$IFUSIM_TORCH_INDEX_URL" torch
fi
"$venv/bin/pip" install --quiet --constraint "$constraints" jax optax torch
echo "install-python: jax, optax and torch installed in $(($(date +%s) - start)) s;" \
  "$venv holds $(du -sm "$venv" | cut -f1) MiB"
start=$(date +%s)
# Make, as the project's build folders use (scikit-build-core would otherwise fetch ninja).
# With the extra "analysis": ppxf and vorbin from PyPI (not packaged by Debian) for
# ifusim.analysis and its tests (scipy, astropy, matplotlib come from Debian, setup.sh); the
# extras "jax" and "torch" are there already.
CMAKE_GENERATOR="Unix Makefiles" "$venv/bin/pip" install --quiet --constraint "$constraints" \
  "${reuse[@]}" "$root[analysis,jax,torch]"
echo "install-python: ifusim installed into $venv in $(($(date +%s) - start)) s"
