#!/usr/bin/env bash
# The first README command: installs what is missing, builds, and runs the main job: the showcase
# (a synthetic disc of 1e5 stars seen by MUSE, smoothed), the ingest example (the shared
# IllustrisTNG cutout with the MaStar templates), then the disc example (a synthetic star-forming
# disc seen by MUSE-WFM: stars, emission lines and dust; the shared cutout has no star-forming
# gas). The cubes and their pictures land in out/muse_disc_showcase/, out/muse_tng_mastar/ and
# out/muse_disc_stars_gas/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
export IFUSIM_DATA_DIR="${IFUSIM_DATA_DIR:-$root/../shared/data}"
"$root/build/ifusim" devices
"$root/build/ifusim" run "$root/configs/examples/muse_disc_showcase.json" "$@"
"$root/build/ifusim" run "$root/configs/examples/muse_tng_mastar.json" "$@"
"$root/build/ifusim" run "$root/configs/examples/muse_disc_stars_gas.json" "$@"
