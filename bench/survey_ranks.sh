#!/usr/bin/env bash
# Survey throughput on 1, 2 and 3 MPI processes (docs/survey.md, docs/scaling.md): a made
# snapshot of 8 subhalos (the central's stars given, the satellites' falling as 1 / (4 s)), 2
# orientations each, MUSE and MaStar, calc_ifu; cubes per minute and the ratio to one process,
# each process given its share of the cores (OMP_NUM_THREADS). Then the per-cube cost from the
# catalog's seconds and n_stars columns: seconds = fixed + per_star * n_stars (least squares).
# Usage: bench/survey_ranks.sh [IFUSIM] [CENTRAL_STARS] [TELESCOPE]  (MPIEXEC: the launcher,
# default mpirun)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
ifusim="${1:-$root/build/ifusim}"
stars="${2:-400000}"
telescope="${3:-MUSE}"
export IFUSIM_DATA_DIR="${IFUSIM_DATA_DIR:-$root/../shared/data}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores="$(nproc)"
mpiexec="${MPIEXEC:-mpirun}"
# Open MPI runs more processes than cores only when told; MPICH's Hydra needs no flag.
oversubscribe=()
"$mpiexec" --version 2>&1 | grep -q "Open MPI\|OpenRTE" && oversubscribe=(--oversubscribe)
d="$(mktemp -d)"
trap 'rm -rf "$d"' EXIT

"$ifusim" make-galaxy "$d/snap" --stars "$stars" --gas 0 --layout snapshot --subhalos 8 \
  --groups 3 --chunks 4 --redshift 0.05 --seed 8 > /dev/null
cat > "$d/survey.json" <<JSON
{
  "survey": {"snapshot_dir": "snap", "snapshot": 99, "select": {"max_count": 8},
             "orientations": ["face-on", "edge-on"]},
  "galaxy": {"redshift": 0.05},
  "cosmology": "snapshot",
  "telescope": "$telescope",
  "ssp": {"library": "\${IFUSIM_DATA_DIR}/ssp/MaStar_CB19.12_1_5.fits.gz", "outside_grid": "clamp"},
  "pipeline": "calc_ifu",
  "stages": {"noise": {"snr": 20}},
  "output": {"png": false, "fits": false, "hdf5": true}
}
JSON

echo "== survey throughput: $cores cores, 16 cubes ($telescope, central of $stars stars)"
printf "%-10s %8s %10s %12s %8s\n" processes threads seconds cubes/min ratio
base=""
for np in 1 2 3; do
  threads=$(( cores / np > 0 ? cores / np : 1 ))
  start=$(date +%s%N)
  OMP_NUM_THREADS=$threads "$mpiexec" "${oversubscribe[@]}" -np "$np" "$ifusim" survey "$d/survey.json" \
    --out "$d/np$np" > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
  seconds=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { print (b - a) / 1e9 }')
  rate=$(awk -v s="$seconds" 'BEGIN { print 16 * 60 / s }')
  [ -n "$base" ] || base=$rate
  printf "%-10s %8s %10.1f %12.2f %8.2f\n" "$np" "$threads" "$seconds" "$rate" \
    "$(awk -v r="$rate" -v b="$base" 'BEGIN { print r / b }')"
done

echo "== per-cube cost (one process, $cores threads): seconds = fixed + per_star * n_stars"
tail -n +2 "$d/np1/catalog.csv" | awk -F, '
  { n = $6; t = $5; sx += n; sy += t; sxx += n * n; sxy += n * t; k++ }
  END {
    b = (k * sxy - sx * sy) / (k * sxx - sx * sx); a = (sy - b * sx) / k
    printf "%d cubes, %d to %d stars: fixed %.3f s, per star %.3g s (%.2f s per 1e6 stars)\n",
           k, mn, mx, a, b, b * 1e6
  }
  NR == 1 || $6 < mn { mn = $6 } NR == 1 || $6 > mx { mx = $6 }'
