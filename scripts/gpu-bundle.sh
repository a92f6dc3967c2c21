#!/usr/bin/env bash
# Gathers what a GPU node's check needs into one relocatable folder (docs/gpu.md): the
# CUDA-enabled ifusim, its CUDA test binary, bench_binned and bench_vjp_entry, every shared library they load that
# a bare GPU image lacks (HDF5, cfitsio, spdlog, fmt, libpng, the OpenMP runtime, Open MPI, ...;
# not the driver, NCCL (the image has it as a Python wheel) nor the C and C++ runtimes), the
# reference data the checks read, the example configs, and scripts/gpu-check.sh. Binaries and
# libraries travel packed in ifusim-gpu.tar.gz (the CUDA code compresses 2.5x), so the folder
# stays under 64 MiB; gpu-check.sh unpacks it on the node.
#
#   scripts/gpu-bundle.sh [BUILD_DIR] [BUNDLE_DIR]
# BUILD_DIR: a CUDA-enabled build folder to take the binaries from (CI passes its own build/);
# without it, build-gpu/ is configured (CUDA on, MPI and Python off) and built. BUNDLE_DIR:
# default gpu-bundle/ in the repository (ignored by git).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-}"
bundle="${2:-$root/gpu-bundle}"
data="${IFUSIM_DATA_DIR:-$root/../shared/data}"

if [ -z "$build" ]; then
  build="$root/build-gpu"
  command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ] || {
    echo "gpu-bundle: no nvcc (looked on PATH and in /usr/local/cuda/bin): cannot build the CUDA backend" >&2
    exit 1
  }
  "$root/scripts/build.sh" "$build" -DIFUSIM_CUDA=ON -DIFUSIM_MPI=OFF -DIFUSIM_PYTHON=OFF \
    -DIFUSIM_REQUIRE_CUDA=ON
fi
binaries=(ifusim ifusim_cuda_tests bench_binned bench_vjp_entry)
cmake --build "$build" -j2 --target ifusim ifusim_cuda_tests bench_binned bench_vjp_entry > /dev/null
for b in "${binaries[@]}"; do
  [ -x "$build/$b" ] || { echo "gpu-bundle: $build/$b was not built" >&2; exit 1; }
done
devices="$("$build/ifusim" devices --backend cuda 2>&1 || true)"
if [[ "$devices" == *"built without the CUDA backend"* ]]; then
  echo "gpu-bundle: $build was configured without the CUDA backend (-DIFUSIM_CUDA=ON)" >&2
  exit 1
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/ifusim-gpu/bin" "$stage/ifusim-gpu/lib" "$stage/ifusim-gpu/data/ssp" \
  "$stage/ifusim-gpu/data/snapshots"
for b in "${binaries[@]}"; do cp "$build/$b" "$stage/ifusim-gpu/bin/"; done
# Every library the binaries load, but the system's own and what the GPU image provides.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libstdc\+\+|libgcc_s|libcuda\.so|libnccl)'
for b in "${binaries[@]}"; do ldd "$build/$b"; done | awk '/=> \// {print $1, $3}' | sort -u |
  while read -r name path; do
    [[ "$name" =~ $skip ]] && continue
    cp -L "$path" "$stage/ifusim-gpu/lib/$name"
  done
# Relocatable: the binaries find lib/ beside them (DT_RPATH, which also serves the libraries'
# own dependencies), wherever the folder is unpacked.
for b in "$stage"/ifusim-gpu/bin/*; do
  patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$b"
  strip --strip-unneeded "$b"
done
cp "$data/ssp/MaStar_CB19.12_1_5.fits.gz" "$stage/ifusim-gpu/data/ssp/"
cp "$data/snapshots/tng100-1_snap078_subhalo_subsample.hdf5" "$stage/ifusim-gpu/data/snapshots/"
cp -r "$root/configs" "$stage/ifusim-gpu/configs"
git -C "$root" rev-parse HEAD > "$stage/ifusim-gpu/COMMIT" 2> /dev/null || echo unknown > "$stage/ifusim-gpu/COMMIT"

rm -rf "$bundle"
mkdir -p "$bundle"
tar -C "$stage" -czf "$bundle/ifusim-gpu.tar.gz" ifusim-gpu
cp "$root/scripts/gpu-check.sh" "$bundle/"
unpacked=$(du -sb "$stage/ifusim-gpu" | cut -f1)
packed=$(du -sb "$bundle" | cut -f1)
echo "gpu-bundle: $bundle: $((packed / 1048576)) MiB ($((unpacked / 1048576)) MiB unpacked), $(ls "$stage/ifusim-gpu/lib" | wc -l) libraries, commit $(cat "$stage/ifusim-gpu/COMMIT")"
if [ "$packed" -ge $((64 * 1048576)) ]; then
  echo "gpu-bundle: the bundle is over 64 MiB" >&2
  exit 1
fi
