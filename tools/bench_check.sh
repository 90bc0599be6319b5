#!/usr/bin/env bash
# Benchmark (not a test): wall time of `tpcc --check` on a Llama-3.1-405B-sized
# plan (plans/llama-405b.plan: 126 layers, hidden 16384, tp 8, seq 8192).
#
#   tools/bench_check.sh [RUNS]      # RUNS defaults to 50
#
# Prints runs, median, p10/p90 and min in ms, the median startup time of
# /bin/true measured in the same session (how much of a run is just process
# spawn), the ratio median / 20 ms target, and one markdown table row for the
# docs/performance.md. It fails only if tpcc cannot be built or a check does not exit 0; it
# does not assert the target, since timings depend on the machine.
set -euo pipefail

# Run from the repository root so the plan path (and the model path the plan
# resolves relative to itself) are the same wherever the script is called from.
cd "$(dirname "$0")/.."

runs="${1:-50}"
mode="${2:-check}"
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]] || [[ "$mode" != check && "$mode" != compile ]]; then
    echo "usage: $0 [RUNS] [check|compile]   (RUNS a positive integer, default 50)" >&2
    exit 2
fi

plan=plans/llama-405b.plan
# check: tpcc --check, target 20 ms; compile: tpcc PLAN -o FILE, target 100 ms
if [[ "$mode" == check ]]; then target_ms=20; else target_ms=100; fi

# shellcheck source=tools/bench_build.sh
. tools/bench_build.sh
bench_build bench_check tpcc

# The timing loop is a small Python driver rather than `date +%s%N` in bash:
# perf_counter_ns is monotonic and high resolution, and the driver's own
# overhead per run (fork/exec via subprocess) is identical for tpcc and for
# the /bin/true reference, so the reference shows exactly what spawn costs.
python3 - "$build_dir/tpcc" "$plan" "$runs" "$target_ms" "$mode" "$build_dir/bench.sched" <<'PY'
import os
import statistics
import subprocess
import sys
import time

tpcc, plan, runs, target_ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
mode, sched = sys.argv[5], sys.argv[6]
check_cmd = [tpcc, "--check", plan] if mode == "check" else [tpcc, plan, "-o", sched]
true_cmd = ["/bin/true"]

# One untimed run first: it warms the page cache (binary, model, plan) so the
# first timed run is not an outlier, and it shows the diagnostics if the plan
# does not check clean -- timing a failing check would be meaningless.
warm = subprocess.run(check_cmd, capture_output=True, text=True)
if warm.returncode != 0:
    sys.stderr.write(warm.stdout + warm.stderr)
    sys.exit(f"bench_check: '{' '.join(check_cmd)}' exited {warm.returncode}")
subprocess.run(true_cmd, check=True)

def timed(cmd):
    # Output to /dev/null: no pipe to drain, so only tpcc's own work is timed.
    t0 = time.perf_counter_ns()
    rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    t1 = time.perf_counter_ns()
    if rc != 0:
        sys.exit(f"bench_check: '{' '.join(cmd)}' exited {rc}")
    return (t1 - t0) / 1e6

# Interleave the two commands so the reference sees the same machine state
# (frequency scaling, noisy neighbours) as the measurement it is compared to.
check_ms, true_ms = [], []
for _ in range(runs):
    check_ms.append(timed(check_cmd))
    true_ms.append(timed(true_cmd))

def pct(xs, p):
    # Linear interpolation between closest ranks; well defined for any N >= 1.
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

med = statistics.median(check_ms)
p10, p90 = pct(check_ms, 10), pct(check_ms, 90)
mn = min(check_ms)
true_med = statistics.median(true_ms)
ratio = med / target_ms

print(f"plan:               {plan} ({mode})")
if mode == "compile":
    print(f"schedule:           {os.path.getsize(sched) / 2**20:.2f} MiB")
print(f"runs:               {runs}")
print(f"median:             {med:.2f} ms")
print(f"p10 / p90:          {p10:.2f} / {p90:.2f} ms")
print(f"min:                {mn:.2f} ms")
print(f"/bin/true median:   {true_med:.2f} ms  (process spawn, same session)")
print(f"median / target:    {ratio:.2f}  (target {target_ms:g} ms)")
print()
print("docs/performance.md row (| plan | runs | median ms | p10 ms | p90 ms | min ms | /bin/true median ms | median/target |):")
print(f"| Llama-3.1-405B SP, 126 layers, tp 8, seq 8192, {mode} | {runs} | {med:.2f} | {p10:.2f} | {p90:.2f} "
      f"| {mn:.2f} | {true_med:.2f} | {ratio:.2f} (target {target_ms:g} ms) |")
PY
