#!/usr/bin/env bash
# The second README command: installs what is missing, builds both backends (CUDA wherever nvcc
# exists), makes the swiftsimio/pynbody test environment, installs the Python package into a
# fresh virtual environment with its extras analysis, jax and torch (which ctest's Python tests,
# test_jax.py, test_torch.py and the examples then use), runs the whole test suite,
# builds the GPU bundle and runs its check up to the no-GPU exit, runs the installed package's
# pytest suite, then an ASan/UBSan build of the CPU tests, then the fuzz targets on a fixed set
# of generated inputs (scripts/fuzz.sh, about 2 minutes).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
export IFUSIM_DATA_DIR="${IFUSIM_DATA_DIR:-$root/../shared/data}"
# Each section's heading carries the time since the start, so CI's log shows where its time goes.
section() { printf '== [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

section "build (Release, CUDA backend where nvcc exists)"
"$root/scripts/build.sh" "$root/build"
section "the Python test environment of swiftsimio and pynbody (tests/python/requirements-simulations.txt)"
"$root/scripts/python-test-env.sh" "$root/build/python-test-env"
section "Python package: pip install . into a fresh virtual environment, reusing build/"
# Before ctest: it configures build/ with the environment's interpreter, which has ppxf and
# vorbin (PyPI) for ifusim.analysis's tests among ctest's pytest suite and examples.
"$root/scripts/install-python.sh" "$root/build/venv" "$root/build"
section "tests"
ctest --test-dir "$root/build" --output-on-failure -j2

section "GPU bundle (scripts/gpu-bundle.sh from build/) and its check up to the first GPU call"
if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc > /dev/null; then
  "$root/scripts/gpu-bundle.sh" "$root/build" "$root/build/gpu-bundle"
  status=0
  bash "$root/build/gpu-bundle/gpu-check.sh" "$root/build/gpu-check-report.txt" || status=$?
  # 3: no usable GPU here (the report says why); 0: a GPU was present and every step passed.
  if [ "$status" -ne 3 ] && [ "$status" -ne 0 ]; then
    cat "$root/build/gpu-check-report.txt"
    exit 1
  fi
else
  echo "SKIPPED: GPU bundle: no nvcc, so no CUDA backend to bundle"
fi

section "the installed package's pytest suite"
# (test_simulation_libraries.py needs numpy >= 2, which Debian's packages that this environment
# sees are not built for: ctest ran it in build/python-test-env.)
IFUSIM_CLI="$root/build/ifusim" OMP_NUM_THREADS=4 \
  IFUSIM_SWIFTSIMIO_PYTHON="$root/build/python-test-env/bin/python" \
  "$root/build/venv/bin/python" -m pytest -q -p no:cacheprovider \
  --ignore="$root/tests/python/test_simulation_libraries.py" "$root/tests/python"

section "build (ASan + UBSan, CPU backend)"
# Line tables (-g1) are all a sanitizer's report needs, and they cut a fifth of the compile time
# of full debug information; the test programs' own code is built at -O1 (tests/CMakeLists.txt).
"$root/scripts/build.sh" "$root/build-sanitize" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DIFUSIM_SANITIZE=ON -DIFUSIM_CUDA=OFF -DIFUSIM_PYTHON=OFF -DIFUSIM_MPI=OFF -DIFUSIM_BUILD_BENCH=OFF
section "tests under ASan + UBSan"
ASAN_OPTIONS=detect_leaks=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$root/scripts/ubsan-suppressions.txt \
  ctest --test-dir "$root/build-sanitize" --output-on-failure -j2

section "fuzzing (clang, libFuzzer, ASan + UBSan)"
"$root/scripts/fuzz.sh" "$root/build-fuzz"
section "done"
