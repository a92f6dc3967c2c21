#!/usr/bin/env bash
# Re-makes the reference cubes of the example runs (tests/reference/) after a deliberate change
# to the physics (IFUSIM_BUILD names another build folder). Review the differences (ifusim compare) before committing them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
for example in muse_tng_mastar sami_tng_miles; do
  out="$(mktemp -d)"
  "${IFUSIM_BUILD:-$root/build}/ifusim" run "$root/configs/examples/$example.json" --out "$out" --no-progress
  /usr/bin/python3 "$root/tests/tools/make_reference_cube.py" "$out/cube.h5" "$root/tests/reference/$example.h5"
  rm -rf "$out"
done
