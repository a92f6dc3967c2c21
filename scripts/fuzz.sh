#!/usr/bin/env bash
# Fuzzing (run by scripts/test.sh): builds the libFuzzer targets of tests/fuzz with Debian's
# clang, ASan and UBSan, into build-fuzz/ (or $1), and runs each from its seeds and regression
# inputs. By default each target runs a fixed number of inputs from a fixed random seed and a
# fresh corpus (about 30 s each on a 2-core machine), so CI sees nearly the same inputs on every
# run (coverage feedback still varies a little, e.g. with the scratch folder's name) instead of
# whatever a clock-bounded run happens to reach. FUZZ_SECONDS=N runs each for N seconds from a random seed
# instead, keeping the corpus, to look for new faults. A fault stops the run and fails the
# script; libFuzzer saves the input as build-fuzz/findings/<target>/crash-* (replay it with the
# target binary). Once fixed, the input goes into tests/fuzz/regressions/<target>/, which every
# build's test suite replays (tests/CMakeLists.txt).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build-fuzz}"
targets=(fuzz_run_config fuzz_tng_cutout fuzz_ssp_hdf5 fuzz_ssp_fits fuzz_survey_catalog)
declare -A runs=([fuzz_run_config]=60000 [fuzz_tng_cutout]=1800 [fuzz_ssp_hdf5]=9000
  [fuzz_ssp_fits]=24000 [fuzz_survey_catalog]=10000)

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DIFUSIM_FUZZ=ON -DIFUSIM_CUDA=OFF -DIFUSIM_BUILD_TESTS=OFF \
  -DIFUSIM_BUILD_BENCH=OFF -DIFUSIM_PYTHON=OFF -DIFUSIM_MPI=OFF
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

for t in "${targets[@]}"; do
  if [ -n "${FUZZ_SECONDS:-}" ]; then
    budget=(-max_total_time="$FUZZ_SECONDS")
    echo "== fuzzing $t for $FUZZ_SECONDS s"
  else
    rm -rf "$build/corpus/$t"
    budget=(-seed=1 -runs="${runs[$t]}")
    echo "== fuzzing $t: ${runs[$t]} inputs from seed 1"
  fi
  mkdir -p "$build/corpus/$t" "$build/findings/$t"
  regressions=()  # a target may have no finding yet
  [ -d "$root/tests/fuzz/regressions/$t" ] && regressions=("$root/tests/fuzz/regressions/$t")
  ASAN_OPTIONS=detect_leaks=1 \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$root/scripts/ubsan-suppressions.txt" \
    "$build/$t" "${budget[@]}" -timeout=60 -rss_limit_mb=3072 -print_final_stats=1 \
    -artifact_prefix="$build/findings/$t/" \
    "$build/corpus/$t" "$root/tests/fuzz/seeds/$t" "${regressions[@]}"
done
