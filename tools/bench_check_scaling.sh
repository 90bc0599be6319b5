#!/usr/bin/env bash
# Benchmark (not a test): how tpcc's time grows with the number of layers.
# plans/llama-tiny.plan (sequence parallel, tp 2, hidden 64) with -D layers=N
# for N = 2048 and 8192, timed as whole process runs of `tpcc --check` and of
# the compile to a schedule (`tpcc PLAN -o FILE`).
#
#   tools/bench_check_scaling.sh [RUNS] [LAYERS...]   # RUNS defaults to 5; LAYERS to 2048 8192
#
# Prints, per mode and size, the minimum over RUNS of the wall time and of the
# CPU time (user + system, of tpcc alone: on a shared, loaded machine the
# wall time mostly measures the wait for a core; the minimum is the run least
# disturbed by others), the CPU time per layer, and its ratio to the first
# size's. Linear work gives a ratio near 1; the target is at most 4 for 8192
# against 2048 layers.
# It fails only if tpcc cannot be built or a run does not exit 0; it does
# not assert the target, since timings depend on the machine.
set -euo pipefail

cd "$(dirname "$0")/.."

runs="${1:-5}"
shift || true
layers=("$@")
[[ ${#layers[@]} -gt 0 ]] || layers=(2048 8192)
for n in "$runs" "${layers[@]}"; do
    if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then
        echo "usage: $0 [RUNS] [LAYERS...]   (positive integers)" >&2
        exit 2
    fi
done

# shellcheck source=tools/bench_build.sh
. tools/bench_build.sh
bench_build bench_check_scaling tpcc

python3 - "$build_dir/tpcc" plans/llama-tiny.plan "$runs" "$build_dir/scaling.sched" "${layers[@]}" <<'PY'
import os
import resource
import subprocess
import sys
import time

tpcc, plan, runs, sched = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sizes = [int(n) for n in sys.argv[5:]]

def command(mode, n):
    define = ["-D", f"layers={n}"]
    return [tpcc, "--check", plan] + define if mode == "check" else [tpcc, plan] + define + ["-o", sched]

def cpu_s():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime

def timed(cmd):
    """(wall ms, CPU ms) of one run"""
    c0, t0 = cpu_s(), time.perf_counter_ns()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    t1, c1 = time.perf_counter_ns(), cpu_s()
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        sys.exit(f"bench_check_scaling: '{' '.join(cmd)}' exited {r.returncode}")
    return (t1 - t0) / 1e6, (c1 - c0) * 1e3

print(f"plan: {plan} -D layers=N, min of {runs} runs")
print("| mode | layers | min wall ms | min CPU ms | CPU us per layer | per layer / first |")
print("|---|---|---|---|---|---|")
for mode in ("check", "compile"):
    first = None
    for n in sizes:
        cmd = command(mode, n)
        timed(cmd)                      # warm the page cache
        times = [timed(cmd) for _ in range(runs)]
        wall, cpu = min(t[0] for t in times), min(t[1] for t in times)
        per = cpu * 1000 / n
        first = first or per
        extra = f", {os.path.getsize(sched) / 2**20:.1f} MiB schedule" if mode == "compile" else ""
        print(f"| {mode}{extra} | {n} | {wall:.0f} | {cpu:.0f} | {per:.1f} | {per / first:.2f} |")
PY
