#!/usr/bin/env bash
# The second README command: installs what is missing, builds both backends (CUDA wherever nvcc
# exists) and runs the whole test suite (the Python package's pytest suite among it), installs the
# Python package into a fresh virtual environment and runs that suite against it, then an
# ASan/UBSan build of the CPU tests, then the
# fuzz targets on a fixed set of generated inputs (scripts/fuzz.sh, about 2 minutes).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
export IFUSIM_DATA_DIR="${IFUSIM_DATA_DIR:-$root/../shared/data}"

echo "== build (Release, CUDA backend where nvcc exists)"
"$root/scripts/build.sh" "$root/build"
echo "== Python package: pip install . into a fresh virtual environment, reusing build/"
# Before ctest: it configures build/ with the environment's interpreter, which has ppxf and
# vorbin (PyPI) for ifusim.analysis's tests among ctest's pytest suite and examples.
"$root/scripts/install-python.sh" "$root/build/venv" "$root/build"
echo "== tests"
ctest --test-dir "$root/build" --output-on-failure -j2
echo "== the installed package's pytest suite"
IFUSIM_CLI="$root/build/ifusim" OMP_NUM_THREADS=4 "$root/build/venv/bin/python" -m pytest -q \
  -p no:cacheprovider "$root/tests/python"

echo "== build (ASan + UBSan, CPU backend)"
"$root/scripts/build.sh" "$root/build-sanitize" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DIFUSIM_SANITIZE=ON -DIFUSIM_CUDA=OFF -DIFUSIM_PYTHON=OFF -DIFUSIM_MPI=OFF
echo "== tests under ASan + UBSan"
ASAN_OPTIONS=detect_leaks=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$root/scripts/ubsan-suppressions.txt \
  ctest --test-dir "$root/build-sanitize" --output-on-failure -j2

echo "== fuzzing (clang, libFuzzer, ASan + UBSan)"
"$root/scripts/fuzz.sh" "$root/build-fuzz"
