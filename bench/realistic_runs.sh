#!/usr/bin/env bash
# Realistic runs against plain ones (issue 22), whole processes, one cpu device: on MaNGA-32 with
# the issue's synthetic galaxy (STARS stars, GAS gas cells, z = 0.03, MaStar), plain calc_ifu,
# calc_ifu_gas (dust + emission lines) and calc_ifu_gas with kernel smoothing, each as a ratio to
# the plain run (targets: <= 1.3x without smoothing, <= 2x with it); then the MUSE-WFM disc
# example (configs/examples/muse_disc_stars_gas.json; targets <= 10 s, <= 3 GB peak RSS).
# Each run REPEATS times, the best wall kept; a pause of PAUSE seconds before each run, so that
# every run starts from the same state of the machine's memory (on a VM that hands freed memory
# back to its host, a run's first touch of its arrays costs ~1 s a GB more than a warm one).
# Usage: bench/realistic_runs.sh [IFUSIM]   (STARS 1e6, GAS 1e5, REPEATS 2, PAUSE 20)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-$root/build/ifusim}"
stars="${STARS:-1e6}" gas="${GAS:-1e5}" repeats="${REPEATS:-2}" pause="${PAUSE:-20}"
export IFUSIM_DATA_DIR="${IFUSIM_DATA_DIR:-$root/../shared/data}"
d="$(mktemp -d)"
trap 'rm -rf "$d"' EXIT

for p in plain gas smooth; do
  case $p in
    plain) pipeline=calc_ifu smoothing=none ;;
    gas) pipeline=calc_ifu_gas smoothing=none ;;
    smooth) pipeline=calc_ifu_gas smoothing=kernel ;;
  esac
  cat > "$d/$p.json" <<JSON
{"input": {"synthetic": {"stars": $stars, "gas": $gas, "seed": 1, "redshift": 0.03}},
 "galaxy": {"redshift": 0.03}, "telescope": "MaNGA-32",
 "ssp": {"library": "\${IFUSIM_DATA_DIR}/ssp/MaStar_CB19.12_1_5.fits.gz", "outside_grid": "clamp"},
 "pipeline": "$pipeline", "stages": {"aperture": {"smoothing": "$smoothing"}, "noise": {"snr": 20}},
 "devices": {"backend": "cpu", "count": 1}}
JSON
done
cp "$root/configs/examples/muse_disc_stars_gas.json" "$d/disc.json"

# best_of CONFIG: "wall_s peak_MB psum_s" of the run with the best wall.
best_of() {
  local best=""
  for _ in $(seq "$repeats"); do
    sleep "$pause"
    rm -rf "$d/out"
    /usr/bin/time -f "%e %M" -o "$d/time" "$bin" run "$1" --out "$d/out" --no-progress \
      > /dev/null 2>&1
    local line
    line="$(python3 - "$d/out/summary.json" "$d/time" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
wall, hwm_kb = open(sys.argv[2]).read().split()[-2:]
peak = max([x["peak_rss_bytes"] for x in s["stages"]] + [int(hwm_kb) * 1024]) / 1e6
psum = sum(x["seconds"] for x in s["stages"] if x["stage"] == "psum")
print(f"{float(wall):.2f} {peak:.0f} {psum:.2f}")
PY
)"
    if [ -z "$best" ] || python3 -c "import sys; sys.exit(not float('${line%% *}') < float('${best%% *}'))"; then
      best="$line"
    fi
  done
  echo "$best"
}

printf '%-34s %8s %9s %7s %8s\n' run wall_s peak_MB psum_s ratio
plain="$(best_of "$d/plain.json")"
for p in plain gas smooth; do
  r="$plain"; [ "$p" = plain ] || r="$(best_of "$d/$p.json")"
  ratio="$(python3 -c "print(f'{float(\"${r%% *}\") / float(\"${plain%% *}\"):.2f}')")"
  label="MaNGA-32 $stars+$gas $p"
  read -r wall peak psum <<< "$r"
  printf '%-34s %8s %9s %7s %7sx\n' "$label" "$wall" "$peak" "$psum" "$ratio"
done
echo "  targets: gas <= 1.3x plain, smooth <= 2x plain"
read -r wall peak psum <<< "$(best_of "$d/disc.json")"
printf '%-34s %8s %9s %7s\n' "MUSE-WFM disc example" "$wall" "$peak" "$psum"
echo "  targets: wall <= 10 s, peak <= 3000 MB"
