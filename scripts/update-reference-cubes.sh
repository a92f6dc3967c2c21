#!/usr/bin/env bash
# Re-makes the reference cubes of the example runs (tests/reference/) after a deliberate change
# to the physics (IFUSIM_BUILD names another build folder). Review the differences (ifusim compare) before committing them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# Each example with the overrides its test uses: the disc example's MUSE-WFM cube (1.3 GB) is
# kept small by observing it with MUSE's narrow field and fewer particles.
while IFS='|' read -r example overrides; do
  out="$(mktemp -d)"
  # shellcheck disable=SC2086
  "${IFUSIM_BUILD:-$root/build}/ifusim" run "$root/configs/examples/$example.json" --out "$out" \
    --no-progress --set output.hdf5=true $overrides
  /usr/bin/python3 "$root/tests/tools/make_reference_cube.py" "$out/cube.h5" "$root/tests/reference/$example.h5"
  rm -rf "$out"
done <<'EOF_EXAMPLES'
muse_tng_mastar|
sami_tng_miles|
muse_disc_stars_gas|--set telescope=MUSE --set input.synthetic.stars=20000 --set input.synthetic.gas=5000
EOF_EXAMPLES
