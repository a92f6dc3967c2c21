#!/usr/bin/env bash
# Configures and builds ifusim into build/ (or $1), passing any further arguments to CMake.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
# The Python module is built for Debian's interpreter, which setup.sh equips with numpy, pytest
# and astropy (an interpreter first on PATH, such as pyenv's, may have none of them).
python=()
[ -x /usr/bin/python3 ] && python=(-DPython_EXECUTABLE=/usr/bin/python3)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "${python[@]}" "$@"
cmake --build "$build" -j"$(nproc)"
