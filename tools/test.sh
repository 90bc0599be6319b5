#!/usr/bin/env bash
# Build every target the tests need (tools/setup.sh --tests) and run the
# whole test suite (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --tests
ctest --test-dir build --output-on-failure -j2
