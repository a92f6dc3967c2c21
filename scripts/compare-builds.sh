#!/usr/bin/env bash
# Runs the same seven configurations with two ifusim binaries (say one built from an earlier
# commit and build/ifusim) and compares every dataset of their cube.h5 files (flux, variance,
# every map) bit for bit: a refactoring that must not change any cube is checked this way.
# Usage: scripts/compare-builds.sh OLD_IFUSIM NEW_IFUSIM [OUT_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
old="$1"
new="$2"
out="${3:-$(mktemp -d)}"
export IFUSIM_DATA_DIR="${IFUSIM_DATA_DIR:-$root/../shared/data}" OMP_NUM_THREADS=2
status=0

# compare NAME ARGS...: `ifusim run ARGS` with both binaries, then their cubes' datasets.
compare() {
  local name="$1" which binary
  shift
  for which in old new; do
    binary="$old"
    [ "$which" = new ] && binary="$new"
    mkdir -p "$out/$which"
    if ! "$binary" run "$@" --set output.hdf5=true --out "$out/$which/$name" --no-progress \
      > "$out/$which/$name.log" 2>&1; then
      echo "$name: the $which binary failed (see $out/$which/$name.log)"
      status=1
      return
    fi
  done
  /usr/bin/python3 - "$out/old/$name/cube.h5" "$out/new/$name/cube.h5" "$name" <<'PY' || status=1
import sys
import h5py
import numpy as np
a, b, name = h5py.File(sys.argv[1]), h5py.File(sys.argv[2]), sys.argv[3]
names = []
a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) else None)
different = [n for n in names if n not in b or a[n].shape != b[n].shape or not np.array_equal(
    a[n][()], b[n][()], equal_nan=a[n].dtype.kind in "fc")]
print(f"{name}: {len(names)} datasets, {len(different)} different {different if different else ''}")
sys.exit(1 if different else 0)
PY
}

synthetic="$root/configs/examples/muse_synthetic.json"
small=(--set input.synthetic.stars=20000 --set input.synthetic.gas=4000)
gas=(--set pipeline=calc_ifu_gas --set 'stages={"noise": {"snr": 20}}')
compare tng_mastar "$root/configs/examples/muse_tng_mastar.json"
compare sami_miles "$root/configs/examples/sami_tng_miles.json" --devices 2
compare synthetic "$synthetic" "${small[@]}"
compare manga_gas "$synthetic" "${small[@]}" --set telescope=MaNGA-32 "${gas[@]}"
compare manga_gas_kernel "$synthetic" "${small[@]}" --set telescope=MaNGA-32 \
  --set pipeline=calc_ifu_gas \
  --set 'stages={"aperture": {"smoothing": "kernel"}, "noise": {"snr": 20}}'
compare streamed_gas "$synthetic" "${small[@]}" --set input.stream_block_stars=3000 "${gas[@]}" \
  --devices 2
compare exact "$synthetic" --set input.synthetic.stars=5000 --set input.synthetic.gas=0 \
  --set 'stages={"stellar_spectra": {"method": "exact"}}' \
  --set 'pipeline=["orient", "aperture", "stellar_spectra", "psum", "flux"]'
exit $status
