#!/usr/bin/env bash
# The whole process against its stages (issue 22): a made TNG cutout (make-galaxy, seed 1), MUSE
# (25 x 25 x 3721), MaStar, the binned method, the stellar part of calc_ifu (orient, aperture,
# stellar_spectra, psum, flux: no psf, lsf, noise, as RUBIX's comparison) and, for reference, all
# of calc_ifu. Each case runs REPEATS times; the best wall is printed with its stages' sum,
# their ratio and the peak RSS, against the targets: at 1e6 stars wall <= 1.3 x the stages and
# <= 0.6 s; at 1e5 stars peak RSS <= 62.5 MB (RUBIX: 625 MB on the same stars).
# Peak RSS: the largest of the stages' peaks in summary.json and the process's VmHWM at exit
# (/usr/bin/time %M): the runner resets VmHWM before each stage, so neither alone is the peak.
# Usage: bench/whole_process.sh [IFUSIM ...]   (default build/ifusim; REPEATS, default 3)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
binaries=("$@")
[ ${#binaries[@]} -eq 0 ] && binaries=("$root/build/ifusim")
repeats="${REPEATS:-3}"
export IFUSIM_DATA_DIR="${IFUSIM_DATA_DIR:-$root/../shared/data}"
d="$(mktemp -d)"
trap 'rm -rf "$d"' EXIT

for n in 1e5 1e6; do
  "${binaries[0]}" make-galaxy "$d/g$n.hdf5" --stars "$n" --seed 1 > /dev/null
  for p in stellar calc_ifu; do
    if [ "$p" = stellar ]; then
      pipeline='["orient", "aperture", "stellar_spectra", "psum", "flux"]'
      stages='{"flux": {"unit_scale": 1e-20}}'
    else
      pipeline='"calc_ifu"'
      stages='{"flux": {"unit_scale": 1e-20}, "psf": {"shape": "moffat", "fwhm_arcsec": 0.7, "beta": 2.5}, "noise": {"snr": 20, "per": "angstrom"}}'
    fi
    cat > "$d/$p$n.json" <<JSON
{
  "input": {"file": "$d/g$n.hdf5"},
  "galaxy": {"redshift": 0.1, "orientation": "face-on", "ra_deg": 150.1, "dec_deg": 2.2},
  "cosmology": "snapshot",
  "telescope": "MUSE",
  "ssp": {"library": "\${IFUSIM_DATA_DIR}/ssp/MaStar_CB19.12_1_5.fits.gz", "outside_grid": "clamp"},
  "pipeline": $pipeline,
  "stages": $stages,
  "devices": {"backend": "cpu", "count": 1},
  "seed": 42
}
JSON
  done
done

printf '%-28s %-9s %-5s %8s %8s %7s %9s\n' binary pipeline stars wall_s stages_s ratio peak_MB
for bin in "${binaries[@]}"; do
  for n in 1e6 1e5; do
    for p in stellar calc_ifu; do
      best=""
      for _ in $(seq "$repeats"); do
        rm -rf "$d/out"
        /usr/bin/time -f "%e %M" -o "$d/time" "$bin" run "$d/$p$n.json" --out "$d/out" \
          --no-progress > /dev/null 2>&1
        line="$(python3 - "$d/out/summary.json" "$d/time" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
wall, hwm_kb = open(sys.argv[2]).read().split()[-2:]
stages = sum(x["seconds"] for x in s["stages"])
peak = max([x["peak_rss_bytes"] for x in s["stages"]] + [int(hwm_kb) * 1024]) / 2**20
print(f"{float(wall):.3f} {stages:.3f} {float(wall) / stages:.2f} {peak:.1f}")
PY
)"
        if [ -z "$best" ] || awk -v a="$line" -v b="$best" \
          'BEGIN { split(a, x, " "); split(b, y, " "); exit !(x[1] < y[1]) }'; then
          best="$line"
        fi
      done
      read -r wall stages ratio peak <<< "$best"
      printf '%-28s %-9s %-5s %8s %8s %7s %9s\n' "$(basename "$(dirname "$(dirname "$bin")")")" \
        "$p" "$n" "$wall" "$stages" "$ratio" "$peak"
      if [ "$p" = stellar ] && [ "$n" = 1e6 ]; then
        awk -v w="$wall" -v r="$ratio" 'BEGIN { printf "  target wall/stages <= 1.3: %.2f (%s); wall <= 0.6 s: %.2fx of it (%s)\n", r, (r <= 1.3 ? "met" : "not met"), w / 0.6, (w <= 0.6 ? "met" : "not met") }'
      fi
      if [ "$p" = stellar ] && [ "$n" = 1e5 ]; then
        awk -v m="$peak" 'BEGIN { printf "  target peak RSS <= 62.5 MB (RUBIX 625 MB / 10): RUBIX/ours = %.2f (%s)\n", 625 / m, (m <= 62.5 ? "met" : "not met") }'
      fi
    done
  done
done
