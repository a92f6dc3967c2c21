#!/usr/bin/env bash
# Builds ifusim against MPICH instead of Open MPI (Debian's libmpich-dev, beside Open MPI: the
# system's default mpicc and mpirun stay Open MPI's) and runs the MPI tests with MPICH's mpiexec:
# tests/mpi/run.sh and tests/mpi/survey.sh, which ctest runs with Open MPI. Not part of CI (a
# second build); run it after changing data/collectives/processes.* or the MPI tests.
# Usage: scripts/check-mpich.sh [BUILD_DIR]   (default build-mpich)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build-mpich}"
"$root/scripts/setup.sh"
if ! dpkg-query -W -f='${Status}' libmpich-dev 2> /dev/null | grep -q "install ok installed"; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends libmpich-dev mpich
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DIFUSIM_CUDA=OFF -DIFUSIM_PYTHON=OFF \
  -DIFUSIM_BUILD_BENCH=OFF -DIFUSIM_BUILD_TESTS=OFF -DMPI_C_COMPILER=/usr/bin/mpicc.mpich \
  -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich
cmake --build "$build" -j "$(nproc)" --target ifusim
grep -q "^MPI_C_LIB_NAMES:STRING=mpich$" "$build/CMakeCache.txt" ||
  { echo "check-mpich: the build did not find MPICH"; exit 1; }
export IFUSIM_DATA_DIR="${IFUSIM_DATA_DIR:-$root/../shared/data}"
bash "$root/tests/mpi/run.sh" "$build/ifusim" /usr/bin/mpiexec.mpich "$root"
bash "$root/tests/mpi/survey.sh" "$build/ifusim" /usr/bin/mpiexec.mpich
echo "check-mpich: built against MPICH, the MPI tests pass with its mpiexec"
