#!/usr/bin/env bash
# Install the build dependencies of tpcc and tprun from Debian's packages
# (python3-numpy for the reference tests, python3-jsonschema and python3-yaml
# for the SARIF schema and CI-file tests) and build both into build/.
# Idempotent: re-running only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config flex bison libjansson-dev libgtest-dev
          libopenblas-dev libmpich-dev mpich python3-numpy python3-jsonschema python3-yaml)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2
