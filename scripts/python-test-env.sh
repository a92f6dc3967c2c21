#!/usr/bin/env bash
# The virtual environment in which ctest runs tests/python/test_simulation_libraries.py
# (Galaxy.from_swiftsimio and Galaxy.from_pynbody on files written by swiftsimio and pynbody):
# $1, default build/python-test-env. It is isolated from Debian's Python packages (no
# --system-site-packages): swiftsimio and pynbody need numpy >= 2, against which Debian's
# astropy, sympy and coverage (which numba, swiftsimio's dependency, imports) break. Everything
# in tests/python/requirements-simulations.txt comes from PyPI as wheels (pynbody has wheels for
# CPython 3.11 on x86_64: nothing is compiled); about 1 to 3 minutes on a fresh machine. Does
# nothing when the environment already holds the pinned versions.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
env="${1:-$root/build/python-test-env}"
requirements="$root/tests/python/requirements-simulations.txt"
stamp="$env/.requirements"
if [ -x "$env/bin/python" ] && [ -f "$stamp" ] && cmp -s "$requirements" "$stamp"; then
  exit 0
fi
"$root/scripts/setup.sh"  # python3-venv
start=$(date +%s)
rm -rf "$env"
/usr/bin/python3 -m venv "$env"
"$env/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
cp "$requirements" "$stamp"
echo "python-test-env: swiftsimio and pynbody installed into $env in $(($(date +%s) - start)) s"
