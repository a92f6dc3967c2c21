#!/usr/bin/env bash
# `mpirun -np K ifusim survey` (docs/survey.md): for K = 1, 2 and 3 processes every cube is bitwise
# the one-process survey's and every row is done; more processes than tasks is fine; a survey whose worker is killed (SIGKILL) part
# way leaves only complete rows and no partial file, and a rerun finishes the rest.
# Usage: survey.sh IFUSIM MPIEXEC  (oversubscribed, and allowed as root, for CI machines)
set -euo pipefail
ifusim="$1"
mpiexec="$2"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1
d="$(mktemp -d)"
trap 'rm -rf "$d"' EXIT
# Open MPI runs more processes than cores only when told; MPICH's Hydra needs no flag.
oversubscribe=()
"$mpiexec" --version 2>&1 | grep -q "Open MPI\|OpenRTE" && oversubscribe=(--oversubscribe)
mpirun() { "$mpiexec" "${oversubscribe[@]}" "$@"; }

"$ifusim" make-galaxy "$d/snap" --stars 40000 --gas 0 --layout snapshot --subhalos 6 --groups 2 \
  --chunks 2 --redshift 0.05 --seed 4 > /dev/null
cat > "$d/survey.json" <<JSON
{
  "survey": {"snapshot_dir": "snap", "snapshot": 99,
             "select": {"max_count": 5}, "orientations": {"random": 3, "seed": 2}},
  "galaxy": {"redshift": 0.05},
  "cosmology": "snapshot",
  "telescope": "MUSE",
  "ssp": {"library": "\${IFUSIM_DATA_DIR}/ssp/MaStar_CB19.12_1_5.fits.gz", "outside_grid": "clamp"},
  "pipeline": ["orient", "aperture", "stellar_spectra", "psum", "flux"],
  "output": {"png": false, "fits": false, "hdf5": true}
}
JSON

rows_done() { grep -c ',done,' "$1/catalog.csv" || true; }
same_cubes() {  # every cube of survey $1 bitwise that of survey $2
  tail -n +2 "$2/catalog.csv" | cut -d, -f4 | while read -r cube; do
    "$ifusim" compare "$1/$cube" "$2/$cube" --rtol 0 > /dev/null ||
      { echo "$1/$cube differs from $2/$cube"; return 1; }
  done
}

"$ifusim" survey "$d/survey.json" --out "$d/one" > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
# ifusim reports HDF5's errors itself: HDF5's own stack trace (printed per thread unless each
# thread turns it off; "Is a directory" when the snapshot folder is probed) must not reach the log.
if grep -q "HDF5-DIAG" "$d/log"; then grep -m 5 -A 5 "HDF5-DIAG" "$d/log"; exit 1; fi
[ "$(rows_done "$d/one")" = 15 ] || { echo "one process: $(rows_done "$d/one") of 15 rows done"; exit 1; }
for np in 1 2 3; do
  mpirun -np "$np" "$ifusim" survey "$d/survey.json" --out "$d/np$np" > "$d/log" 2>&1 ||
    { cat "$d/log"; exit 1; }
  [ "$(rows_done "$d/np$np")" = 15 ] || { echo "-np $np: $(rows_done "$d/np$np") rows done"; exit 1; }
  same_cubes "$d/np$np" "$d/one"
  echo "mpirun -np $np: 15 cubes, bitwise the one-process survey's"
done

# More processes than tasks: the idle ones are told so and end.
mpirun -np 3 "$ifusim" survey "$d/survey.json" --out "$d/idle" --set survey.select.max_count=1 \
  --set 'survey.orientations=["face-on"]' > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
[ "$(rows_done "$d/idle")" = 1 ] || { echo "one task on 3 processes: not done"; exit 1; }
echo "mpirun -np 3 with one task: done, the idle processes ended"

# A worker (rank 2) killed once the first row is written: mpirun stops the survey, and every row
# written names a whole cube. A rerun (2 processes) makes the rest and leaves no partial file
# (the killed runs' staging folders and catalog are cleared by the runs that redo their cubes).
mpirun -np 3 "$ifusim" survey "$d/survey.json" --out "$d/killed" > "$d/log" 2>&1 &
launcher=$!
for _ in $(seq 600); do
  [ -s "$d/killed/catalog.csv" ] && break
  sleep 0.1
done
for pid in $(pgrep -f "survey $d/survey.json --out $d/killed"); do
  if tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qxE "(OMPI_COMM_WORLD|PMI)_RANK=2"; then
    kill -9 "$pid"
  fi
done
wait "$launcher" || true
for _ in $(seq 300); do  # mpirun may return before its last process is gone
  pgrep -f "survey $d/survey.json --out $d/killed" > /dev/null || break
  sleep 0.1
done
before="$(rows_done "$d/killed")"
[ "$before" -lt 15 ] || { echo "the survey finished before its worker was killed"; exit 1; }
tail -n +2 "$d/killed/catalog.csv" | grep ',done,' | cut -d, -f4 | while read -r cube; do
  [ -s "$d/killed/$cube" ] || { echo "row of $cube written without its cube"; exit 1; }
done
mpirun -np 2 "$ifusim" survey "$d/survey.json" --out "$d/killed" > "$d/log" 2>&1 ||
  { cat "$d/log"; exit 1; }
[ "$(rows_done "$d/killed")" = 15 ] || { echo "rerun: $(rows_done "$d/killed") rows done"; exit 1; }
same_cubes "$d/killed" "$d/one"
if find "$d/killed" -name '*.partial*' | grep -q .; then
  find "$d/killed" -name '*.partial*'
  echo "a partial file was left"
  exit 1
fi
echo "killed after $before rows; the rerun finished the other $((15 - before)), bitwise"
