#!/usr/bin/env bash
# Installs the system packages ifusim builds and tests with (Debian). Does nothing when they are
# all present. The CUDA Toolkit itself is not installed here: where /usr/local/cuda exists the
# CUDA backend is built, elsewhere the CPU backend alone (with Debian's Thrust headers).
set -euo pipefail
packages=(
  build-essential cmake pkg-config
  libhdf5-dev nlohmann-json3-dev libeigen3-dev catch2
  libcfitsio-dev libcli11-dev libspdlog-dev libfmt-dev libpng-dev libnanoflann-dev
  libfftw3-dev                          # the Moffat PSF's FFTs (stages/psf)
  python3-astropy python3-numpy python3-h5py
  python3-dev pybind11-dev python3-venv python3-pip   # the Python package (python/, pyproject.toml)
  python3-pytest python3-matplotlib python3-tqdm      # its tests and examples/quickstart.py
  python3-scipy                         # ifusim.analysis (with ppxf, vorbin: install-python.sh)
  fitsverify                            # the FITS conformance test (HEASARC fitsverify)
  patchelf                              # the GPU bundle: relocatable binaries (scripts/gpu-bundle.sh)
  libopenmpi-dev openmpi-bin            # surveys across processes (mpirun), tests/mpi
  clang libclang-rt-14-dev libomp-dev   # the fuzz targets (libFuzzer), scripts/fuzz.sh
)
[ -x /usr/local/cuda/bin/nvcc ] || packages+=(libthrust-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
