#!/usr/bin/env bash
# Build tpcc and run the whole test suite (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
ctest --test-dir build --output-on-failure -j2
