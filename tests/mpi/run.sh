#!/usr/bin/env bash
# `mpirun -np K ifusim run` (docs/streaming.md): one galaxy across processes, each depositing its
# share of the blocks, the partials summed over the processes. The cube is bitwise that of
# `ifusim run` in one process: a synthetic galaxy on 1, 2 and 3 processes; the TNG cutout in
# blocks fewer than the processes (one process deposits no star); the sparse histogram and the
# exact method; dust and emission lines (the gas in its own block, on process 0); kNN smoothing
# (a pass over every star's position). A run that cannot be made is refused on every process,
# and nothing hangs.
# Usage: run.sh IFUSIM MPIEXEC SOURCE_DIR
set -euo pipefail
ifusim="$1"
mpiexec="$2"
examples="$3/configs/examples"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1
d="$(mktemp -d)"
trap 'rm -rf "$d"' EXIT
common=(--set output.png=false --set output.fits=false --set output.hdf5=true --no-progress)
# Open MPI runs more processes than cores only when told; MPICH's Hydra needs no flag.
oversubscribe=()
"$mpiexec" --version 2>&1 | grep -q "Open MPI\|OpenRTE" && oversubscribe=(--oversubscribe)

# same CONFIG NP NAME [--set ...]: mpirun -np NP against one process, bitwise.
same() {
  local config="$1" np="$2" name="$3"
  shift 3
  "$ifusim" run "$config" "${common[@]}" "$@" --out "$d/$name.one" > "$d/log" 2>&1 ||
    { cat "$d/log"; exit 1; }
  timeout 300 "$mpiexec" "${oversubscribe[@]}" -np "$np" "$ifusim" run "$config" "${common[@]}" "$@" \
    --out "$d/$name.np$np" > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
  "$ifusim" compare "$d/$name.np$np/cube.h5" "$d/$name.one/cube.h5" --rtol 0 > "$d/compare" ||
    { cat "$d/compare"; echo "$name on $np processes differs from one process"; exit 1; }
  echo "$name: mpirun -np $np bitwise the one-process cube"
}

for np in 1 2 3; do
  same "$examples/muse_synthetic.json" "$np" synthetic --set input.synthetic.stars=30000
done
same "$examples/muse_tng_mastar.json" 3 cutout_blocks --set input.stream_block_stars=1000
same "$examples/muse_tng_mastar.json" 2 sparse --set 'stages.stellar_spectra.histogram="sparse"'
same "$examples/muse_tng_mastar.json" 3 exact --set 'stages.stellar_spectra.method="exact"'

same "$examples/muse_tng_mastar_dusty.json" 2 dusty
same "$examples/muse_tng_mastar.json" 3 gas_lines --set 'pipeline="calc_ifu_gas"' \
  --set input.stream_block_stars=700

same "$examples/muse_synthetic.json" 2 knn --set input.synthetic.stars=20000 \
  --set 'stages.aperture.smoothing="kernel"'

# A run that cannot be made is refused on every process, and nothing hangs or is written.
if timeout 120 "$mpiexec" "${oversubscribe[@]}" -np 2 "$ifusim" run "$examples/muse_synthetic.json" \
  "${common[@]}" --set 'telescope="MUSE-WFM"' --set 'stages.stellar_spectra.histogram="dense"' \
  --set stages.stellar_spectra.histogram_memory_gb=0.01 --out "$d/refused" > "$d/log" 2>&1; then
  echo "a dense histogram too large for its budget was not refused"
  exit 1
fi
grep -q 'stages.stellar_spectra.histogram: "dense" needs the whole histogram at once' "$d/log" ||
  { cat "$d/log"; echo "no refusal naming the key"; exit 1; }
[ ! -e "$d/refused" ] || { echo "a refused run left $d/refused"; exit 1; }
echo "a dense histogram too large across processes: refused, naming the key, nothing written"
