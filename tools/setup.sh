#!/usr/bin/env bash
# Install the build dependencies of tpcc and tprun from Debian's packages
# (python3-numpy for the reference tests, python3-jsonschema and python3-yaml
# for the SARIF schema and CI-file tests, pre-commit to run the hook as a
# user's pre-commit does) and build into build/ what is asked for:
#
#   tools/setup.sh           build/tpcc and build/tprun: all the main job
#                            (tools/main_job.sh) and any CPU run needs
#   tools/setup.sh --cuda    and tprun's CUDA backend, build/tprun_cuda.so,
#                            which tprun loads for GPUs (needs nvcc and NCCL)
#   tools/setup.sh --tests   every target: the test suites, the fuzz replays,
#                            and the CUDA backend where CMake finds nvcc
#                            (tools/test.sh)
#
# Quiet: the build's progress lines are dropped, so a build that succeeds
# prints one line; the compilers' warnings and errors are shown in full.
# Idempotent: re-running only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: tools/setup.sh [--cuda] [--tests]"
cuda=0 tests=0
for arg in "$@"; do
    case "$arg" in
        --cuda) cuda=1 ;;
        --tests) tests=1 ;;
        -h|--help) echo "$usage"; exit 0 ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
done

packages=(build-essential cmake pkg-config flex bison libjansson-dev libgtest-dev
          libopenblas-dev libmpich-dev mpich python3-numpy python3-jsonschema python3-yaml pre-commit)
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

configure=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
targets=(--target tpcc tprun)
if [ "$cuda" = 1 ]; then
    # NVIDIA's packages install nvcc outside PATH
    command -v nvcc >/dev/null || [ ! -x /usr/local/cuda/bin/nvcc ] || export PATH="$PATH:/usr/local/cuda/bin"
    command -v nvcc >/dev/null ||
        { echo "setup: --cuda needs nvcc (the CUDA toolkit), cuBLAS and NCCL: nvcc not found" >&2; exit 1; }
    configure+=(-DTPCC_CUDA=ON)
    targets+=(tprun_cuda)
fi
[ "$tests" = 0 ] || targets=()     # every target

cmake -S . -B build "${configure[@]}" >/dev/null
if [ "$cuda" = 1 ] && ! grep -qw tprun_cuda <<<"$(cmake --build build --target help)"; then
    echo "setup: --cuda: CMake did not configure the CUDA backend (its warning above says why)" >&2
    exit 1
fi
# the progress lines of make ("[ 42%] Building C object ...", "Consolidate
# compiler generated dependencies ...") and of ninja ("[12/80] ..."); the
# exit status is the build's (pipefail)
cmake --build build -j2 "${targets[@]}" 2>&1 |
    { grep -Ev '^(\[ *[0-9]+%\]|\[[0-9]+/[0-9]+\]|Consolidate compiler generated dependencies)' || true; }

built="build/tpcc, build/tprun"
if [ -f build/tprun_cuda.so ]; then
    built+=" and build/tprun_cuda.so (the CUDA backend)"
else
    built+=" (CPU backend; tools/setup.sh --cuda adds the CUDA backend)"
fi
[ "$tests" = 0 ] || built+=", and the tests"
echo "setup: built $built in ${SECONDS} s"
