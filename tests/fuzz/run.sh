#!/usr/bin/env bash
# run.sh BUILD TARGET SECONDS [libFuzzer flags...]: fuzz one target of a
# TPCC_FUZZ build for SECONDS, from the committed corpus (corpus/TARGET), the
# real files (BUILD/seeds/TARGET, from seeds.sh) and what earlier runs found
# (BUILD/corpus/TARGET, where new inputs go), with the target's dictionary
# (run reads schedules: schedule.dict). A crash or a hang leaves its input
# in BUILD/artifacts/ and fails.
set -euo pipefail
build=$1 target=$2 seconds=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
dict=$here/${target/#run/schedule}.dict
mkdir -p "$build/corpus/$target" "$build/artifacts" "$build/seeds/$target"
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    "$build/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$target-" -dict="$dict" "$@" \
    "$build/corpus/$target" "$here/corpus/$target" "$build/seeds/$target"
