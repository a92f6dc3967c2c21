#!/usr/bin/env bash
# Builds the benchmarks (Release) into build/ (or $1) and runs them, printing their tables.
# Any further arguments go to CMake. Benchmarks are never part of ctest; see docs/benchmarks.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
export IFUSIM_DATA_DIR="${IFUSIM_DATA_DIR:-$root/../shared/data}"
jobs="$(nproc)"
jobs=$(( jobs > 2 ? 2 : jobs ))  # keep builds gentle on shared machines
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DIFUSIM_BUILD_BENCH=ON "$@"
cmake --build "$build" -j"$jobs" --target bench_spectral_memory bench_spectral_speed bench_binned

echo "== $(hostname): $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
echo "== bench_spectral_memory"
"$build/bench_spectral_memory"
echo
echo "== bench_spectral_speed"
"$build/bench_spectral_speed"
echo
echo "== bench_binned"
"$build/bench_binned"
