#!/usr/bin/env bash
# Fuzzing (run by scripts/test.sh): builds the libFuzzer targets of tests/fuzz with Debian's
# clang, ASan and UBSan into build-fuzz/ (or $1), and runs each for FUZZ_SECONDS (default 30)
# from its seeds and regression inputs. A fault stops the run and fails the script; libFuzzer
# saves the input as build-fuzz/findings/<target>/crash-* (replay it with the target binary).
# Once fixed, the input goes into tests/fuzz/regressions/<target>/, which every build's test
# suite replays (tests/CMakeLists.txt).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build-fuzz}"
seconds="${FUZZ_SECONDS:-30}"
targets=(fuzz_run_config fuzz_tng_cutout fuzz_ssp_hdf5 fuzz_ssp_fits)

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DIFUSIM_FUZZ=ON -DIFUSIM_CUDA=OFF -DIFUSIM_BUILD_TESTS=OFF \
  -DIFUSIM_BUILD_BENCH=OFF
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

for t in "${targets[@]}"; do
  echo "== fuzzing $t for ${seconds} s"
  mkdir -p "$build/corpus/$t" "$build/findings/$t"
  ASAN_OPTIONS=detect_leaks=1 \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$root/scripts/ubsan-suppressions.txt" \
    "$build/$t" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=3072 \
    -print_final_stats=1 -artifact_prefix="$build/findings/$t/" \
    "$build/corpus/$t" "$root/tests/fuzz/seeds/$t" "$root/tests/fuzz/regressions/$t"
done
