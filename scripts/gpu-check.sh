#!/usr/bin/env bash
# The GPU node's check, one command, under 10 minutes (docs/gpu.md). Run from the folder
# scripts/gpu-bundle.sh made (it holds this script and ifusim-gpu.tar.gz), on a machine with a
# GPU and no network:
#
#   bash gpu-check.sh [REPORT]      (default: gpu-check-report.txt beside this script)
#
# Writes one report: nvidia-smi, the libraries resolved, the devices, the CUDA suite five times
# with IFUSIM_REQUIRE_CUDA=1 (the zeroing race it guards against was intermittent),
# compute-sanitizer's memcheck and racecheck on the small cases, the MUSE-WFM disc example with
# several histogram tiles and the MUSE one with kernel smoothing, each on 1 and 4 logical devices
# (compared bitwise with each other, and with the CPU cube to float rounding), a streamed run, and the benchmarks. Each
# step has its own time limit, so one that hangs cannot take the others' time. Where no GPU can
# be used it says so and exits 3 after the library check. Exit 0 only when every step ran and
# passed. IFUSIM_GPU_CHECK_SECONDS bounds the whole check, IFUSIM_GPU_CHECK_REPEATS the suite's
# runs (5), IFUSIM_GPU_CHECK_BIG_STARS the large streamed runs' star counts ("1e8 1e9"),
# IFUSIM_GPU_CHECK_STEPS (an extended regular expression) the steps to run, by name (default all;
# those left out are reported as not run, so the check is then at best incomplete).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
report="${1:-$here/gpu-check-report.txt}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=()

log() { echo "$*" | tee -a "$report"; }
# The whole check's budget (IFUSIM_GPU_CHECK_SECONDS, default none): a step gets what is left of
# it if that is less than its own limit, and is not started, but reported, once under 15 s is
# left, so that a lease that ends first still returns a report that says what did not run.
budget="${IFUSIM_GPU_CHECK_SECONDS:-}"
not_run=()
# step NAME SECONDS COMMAND...: runs COMMAND with a time limit, its output into the report.
step() {
  local name="$1" limit="$2"
  shift 2
  if [ -n "${IFUSIM_GPU_CHECK_STEPS:-}" ] && ! [[ "$name" =~ $IFUSIM_GPU_CHECK_STEPS ]]; then
    log "-- $name: NOT RUN (not in IFUSIM_GPU_CHECK_STEPS)"
    not_run+=("$name")
    return 1
  fi
  if [ -n "$budget" ]; then
    local left=$((budget - SECONDS))
    if [ $left -lt 15 ]; then
      log "-- $name: NOT RUN (the check's budget of $budget s is spent)"
      not_run+=("$name")
      return 1
    fi
    [ $left -lt "$limit" ] && limit=$left
  fi
  log ""
  log "== $name (limit ${limit} s)"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >> "$report" 2>&1
  local rc=$?
  log "-- $name: $([ $rc -eq 0 ] && echo passed || echo "FAILED (exit $rc$([ $rc -eq 124 ] && echo ', time limit'))") in $((SECONDS - start)) s"
  [ $rc -eq 0 ] || failures+=("$name")
  return $rc
}

: > "$report"
log "ifusim GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), on $(hostname)"
[ -f "$here/ifusim-gpu.tar.gz" ] || { log "no ifusim-gpu.tar.gz beside $0: run scripts/gpu-bundle.sh first"; exit 2; }
tar -C "$work" -xzf "$here/ifusim-gpu.tar.gz"
bundle="$work/ifusim-gpu"
bin="$bundle/bin"
log "bundle: commit $(cat "$bundle/COMMIT")"
export IFUSIM_DATA_DIR="$bundle/data"
export IFUSIM_REQUIRE_CUDA=1
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"

# NCCL from the image: a system library, or the nvidia-nccl wheel of its Python.
if ! ldconfig -p 2> /dev/null | grep -q libnccl.so.2; then
  for dir in $(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__path__[0] + "/lib/x"))' 2> /dev/null) \
    /usr/local/cuda/lib /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
    [ -e "$dir/libnccl.so.2" ] && { export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; }
  done
fi

step "nvidia-smi" 30 nvidia-smi
# The CUDA runtime reserves a large virtual address range at start; under a soft address-space
# limit every later large malloc then fails (cfitsio's "could not allocate memory" on opening the
# SSP library). The limits are logged, and the soft one raised to the hard one.
log "limits: address space $(ulimit -S -v) (soft) / $(ulimit -H -v) (hard), data $(ulimit -S -d), memlock $(ulimit -S -l)"
ulimit -S -v "$(ulimit -H -v)" 2> /dev/null || true
log ""
log "== libraries (ldd)"
missing=0
for b in "$bin"/*; do
  ldd "$b" >> "$report" 2>&1
  if ldd "$b" | grep -q "not found"; then missing=1; log "MISSING for $(basename "$b"): $(ldd "$b" | grep 'not found' | tr -s ' \t' ' ')"; fi
done
[ $missing -eq 0 ] && log "-- libraries: every one resolved" || failures+=("libraries")

if ! "$bin/ifusim" devices --backend cuda >> "$report" 2>&1; then
  log ""
  log "NO GPU: the cuda backend cannot run here (the reason is above); the check stops before its first GPU call."
  exit 3
fi
step "devices: 4 logical devices" 30 "$bin/ifusim" devices --backend cuda --devices 4
repeats="${IFUSIM_GPU_CHECK_REPEATS:-5}"
for i in $(seq 1 "$repeats"); do
  step "CUDA suite, run $i of $repeats" 120 "$bin/ifusim_cuda_tests" --durations yes
done
if command -v compute-sanitizer > /dev/null; then
  small='cuda: sharded arrays round-trip through GPU memory,cuda: global_max_abs*,cuda: sum_by_key*,cuda: skeleton image*,cuda: the binned product on a GPU*,cuda: the binned product transposed on a GPU*'
  step "compute-sanitizer memcheck" 240 compute-sanitizer --tool memcheck --error-exitcode 1 "$bin/ifusim_cuda_tests" "$small"
  step "compute-sanitizer racecheck" 240 compute-sanitizer --tool racecheck --error-exitcode 1 "$bin/ifusim_cuda_tests" "cuda: sharded arrays*,cuda: sum_by_key*"
else
  log "compute-sanitizer: not on PATH, skipped"
fi

# three_ways LABEL CONFIG LIMIT ARGS...: CONFIG on the GPU on 1 and 4 logical devices and on the
# CPU; the two GPU cubes bitwise equal (ifusim compare --rtol 0), the CPU's within 1e-6 of the
# peak voxel (the per-star maths, log10, pow, fused multiply-adds, may round differently on the
# device, as tests/test_cuda.cpp holds the smaller examples).
three_ways() {
  local label="$1" config="$2" limit="$3" dir="$work/$(echo "$1" | tr -c 'A-Za-z0-9\n' _)"
  shift 3
  local args=("$@" --set output.hdf5=true --no-progress)
  step "$label, cuda, 1 device" "$limit" "$bin/ifusim" run "$config" --backend cuda --devices 1 "${args[@]}" --out "$dir/gpu1"
  step "$label, cuda, 4 logical devices" "$limit" "$bin/ifusim" run "$config" --backend cuda --devices 4 "${args[@]}" --out "$dir/gpu4"
  step "$label, cpu" "$limit" "$bin/ifusim" run "$config" --backend cpu "${args[@]}" --out "$dir/cpu"
  step "$label: 1 == 4 logical devices, bitwise" 60 "$bin/ifusim" compare "$dir/gpu1/cube.fits" "$dir/gpu4/cube.fits" --rtol 0
  step "$label: cuda == cpu within 1e-6 of the peak" 60 python3 -c '
import sys, h5py, numpy as np
a = h5py.File(sys.argv[1])["data"][()]; b = h5py.File(sys.argv[2])["data"][()]
ok = np.isfinite(b); assert (np.isfinite(a) == ok).all(), "NaN in different voxels"
peak = np.abs(b[ok]).max(); worst = np.abs(a[ok] - b[ok]).max()
print(f"max |cuda - cpu| / peak = {worst / peak:.3e} (peak {peak:.4e})"); sys.exit(int(worst > 1e-6 * peak))
' "$dir/gpu1/cube.h5" "$dir/cpu/cube.h5"
}
# The MUSE-WFM disc example (stars, gas, dust, lines), histogram tiles forced small so that
# there are several. Kernel smoothing on a 25 x 25 field: on MUSE-WFM's 0.2" spaxels each star's
# kernel covers hundreds of spaxels, and the CPU alone took 139 s of psum on 16 cores (issue 22).
three_ways "MUSE-WFM disc" "$bundle/configs/examples/muse_disc_stars_gas.json" 120 \
  --set stages.stellar_spectra.histogram=dense --set stages.stellar_spectra.histogram_memory_gb=0.05
three_ways "MUSE disc, kernel smoothing" "$bundle/configs/examples/muse_disc_stars_gas.json" 120 \
  --set telescope=MUSE --set stages.aperture.smoothing=kernel
step "streamed run (1e6 stars in blocks of 2e5), cuda" 120 "$bin/ifusim" run "$bundle/configs/examples/muse_synthetic.json" --backend cuda \
  --set input.synthetic.stars=1000000 --set input.stream_block_stars=200000 --no-progress --out "$work/streamed"

# Gradients (issue 27): the VJP against the forward run on the GPU and on the host's cores, then
# the issue's GPU target, 1e8 stars on MUSE-WFM (held in memory: gradients need the galaxy at once).
step "bench_vjp_entry, MUSE, 1e6 stars, cuda" 120 "$bin/bench_vjp_entry" --config "$bundle/configs/examples/muse_synthetic.json" --backend cuda --stars 1000000 --reps 2
step "bench_vjp_entry, MUSE, 1e6 stars, cpu" 120 "$bin/bench_vjp_entry" --config "$bundle/configs/examples/muse_synthetic.json" --backend cpu --stars 1000000 --reps 2
step "bench_vjp_entry, MUSE-WFM, ${IFUSIM_GPU_CHECK_VJP_STARS:-100000000} stars, cuda" 300 \
  "$bin/bench_vjp_entry" --config "$bundle/configs/examples/muse_synthetic.json" --backend cuda --telescope MUSE-WFM --stars "${IFUSIM_GPU_CHECK_VJP_STARS:-100000000}" --reps 1
step "bench_binned (speed, devices, cuda)" 240 "$bin/bench_binned" --only speed --speed-stars 1000000
for stars in ${IFUSIM_GPU_CHECK_BIG_STARS:-100000000 1000000000}; do
  step "synthetic $stars stars, MUSE-WFM, cuda, streamed" 240 "$bin/ifusim" run "$bundle/configs/examples/muse_synthetic.json" \
    --backend cuda --set telescope=MUSE-WFM --set input.synthetic.stars=$stars --set input.synthetic.gas=0 \
    --set input.stream_block_stars=50000000 --set output.png=false --no-progress --out "$work/big$stars"
  [ -f "$work/big$stars/summary.json" ] && python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('stages:', {k['stage']: round(k['seconds'], 3) for k in s['stages']}, 'total', s.get('total_seconds'))" "$work/big$stars/summary.json" >> "$report" 2>&1
done
step "exact method, 1e6 stars, cuda" 180 "$bin/ifusim" run "$bundle/configs/examples/muse_synthetic.json" --backend cuda \
  --set input.synthetic.stars=1000000 --set stages.stellar_spectra.method=exact --no-progress --out "$work/exact"

log ""
[ ${#not_run[@]} -eq 0 ] || log "NOT RUN (budget): ${not_run[*]}"
if [ ${#failures[@]} -eq 0 ] && [ ${#not_run[@]} -eq 0 ]; then
  log "GPU CHECK PASSED"
  exit 0
fi
[ ${#failures[@]} -eq 0 ] && log "GPU CHECK INCOMPLETE: every step that ran passed" ||
  log "GPU CHECK FAILED: ${failures[*]}"
exit 1
