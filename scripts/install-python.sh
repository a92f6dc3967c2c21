#!/usr/bin/env bash
# Installs the Python package (`pip install .`) into a fresh virtual environment: $1, default
# .venv in the repository. It is made with Debian's interpreter and sees its packages (numpy,
# astropy, pytest, from setup.sh). With $2, an existing build folder of the project (say build/),
# scikit-build-core builds in it (build-dir), so that only the module is compiled again; its tests
# and benchmarks stay configured. scikit-build-core and pybind11 come from PyPI (pip's isolated
# build environment).
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
start=$(date +%s)
# Make, as the project's build folders use (scikit-build-core would otherwise fetch ninja).
# With the extra "analysis": ppxf and vorbin from PyPI (not packaged by Debian) for
# ifusim.analysis and its tests (scipy, astropy, matplotlib come from Debian, setup.sh); with
# "test": mpdaf too (PyPI; tests/python/test_mpdaf.py), the rest of it Debian's.
CMAKE_GENERATOR="Unix Makefiles" "$venv/bin/pip" install --quiet "${reuse[@]}" \
  "$root[analysis,test]"
echo "install-python: ifusim installed into $venv in $(($(date +%s) - start)) s"
