#!/usr/bin/env bash
# Build the Debian package: tpcc and tprun without the tests (no
# GoogleTest, no NumPy) and without the CUDA backend (its libraries are
# NVIDIA's packages, not Debian's), then cpack -G DEB. The .deb lands in
# build-deb/ (or the directory given); install it with
#   sudo apt install ./build-deb/tpcc_*.deb
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-deb}
cmake -S . -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPCC_TESTS=OFF -DTPCC_CUDA=OFF
cmake --build "$out" -j"${JOBS:-2}"
(cd "$out" && cpack -G DEB)
ls "$out"/tpcc_*.deb
