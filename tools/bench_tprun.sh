#!/usr/bin/env bash
# Benchmark (not a test): tprun's forward step on a ~125M-parameter Llama
# (vocab 32000, hidden 768, 12 layers, 12 heads, 4 kv heads, ffn 2048,
# seq 256, batch 1; seeded weights, no checkpoint) under
# plans/llama-megatron.plan and plans/llama-sp.plan, at
#
#   tp 1, 1 rank x 1 BLAS thread     (the serial baseline)
#   tp 1, 1 rank x 2 BLAS threads    (the same two cores, used by OpenBLAS)
#   tp 2, 2 ranks x 1 BLAS thread    (tprun -n 2, ranks over MPI)
#
#   tools/bench_tprun.sh [RUNS]      # RUNS defaults to 5
#
# For each configuration: tokens/s of a forward step (batch x seq over the
# median forward time, where a run's forward time is the max over ranks of
# --profile-json's forward_seconds), the share of the forward spent in
# matmuls and in collectives (per-op-kind seconds summed over ranks over
# forward seconds summed over ranks), and the matmul efficiency against
# OpenBLAS measured in the same session: tools/bench_sgemm.c times
# cblas_sgemm(RowMajor, NoTrans, Trans, m, n, k) -- the backend's exact call
# -- for the matmul shapes of the schedule's rank-0 program (grouped, each
# with its count) with the same BLAS thread count, and
#
#   efficiency = (matmul FLOPs / tprun matmul seconds) / (FLOPs / sgemm seconds)
#
# (tprun's side summed over ranks: every rank runs the same shapes; the
# sgemm side the median over rounds of each shape's time per call). Each
# round runs the six configurations and then the sgemm references once, so
# drifting machine state (clock, other processes) reaches all of them; the
# CPU time other processes used in a second before and after the runs is
# printed, with a warning above 10%. Prints a markdown table for the
# docs/performance.md with a one-line note on the machine, then a per-shape breakdown
# (tprun per-call times from --trace against sgemm's). Whole script: about
# 2 minutes on the 2-core development machine.
#
# OPENBLAS_NUM_THREADS and OMP_NUM_THREADS are set explicitly on every
# command; other OpenBLAS variables (OPENBLAS_CORETYPE, say) are inherited
# by tprun and bench_sgemm alike. It fails only if something cannot be
# built or a run fails; it asserts no target, since timings are the
# machine's.
set -euo pipefail

cd "$(dirname "$0")/.."

runs="${1:-5}"
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 [RUNS]   (RUNS a positive integer, default 5)" >&2
    exit 2
fi
command -v mpiexec >/dev/null || { echo "bench_tprun: mpiexec not found (Debian: mpich; tools/setup.sh installs it)" >&2; exit 1; }
if ! { command -v pkg-config >/dev/null && pkg-config --exists openblas; }; then
    echo "bench_tprun: OpenBLAS not found by pkg-config (tools/setup.sh installs it)" >&2
    exit 1
fi

# Same Release build directory as tools/bench_check.sh: timings must not
# depend on how build/ is configured. Configured every time (a fraction of a
# second): a build-bench/ configured before the runtime existed has no tprun
# target until cmake re-reads the top CMakeLists. Builds are incremental.
build_dir=build-bench
mkdir -p "$build_dir"
build_log="$build_dir/bench-tprun-build.log"
if ! cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DTPCC_TESTS=OFF >"$build_log" 2>&1; then
    cat "$build_log" >&2
    echo "bench_tprun: cmake configure failed" >&2
    exit 1
fi
if ! cmake --build "$build_dir" -j2 --target tpcc tprun >"$build_log" 2>&1; then
    cat "$build_log" >&2
    echo "bench_tprun: build failed" >&2
    exit 1
fi
# bench_sgemm directly with the compiler: no dependency on the top-level
# CMakeLists (tools/CMakeLists.txt has a target for it as well).
sgemm="$build_dir/bench_sgemm"
if [[ ! -x "$sgemm" || tools/bench_sgemm.c -nt "$sgemm" ]]; then
    # shellcheck disable=SC2046  # pkg-config output is meant to be split
    if ! ${CC:-cc} -O2 -Wall -Wextra tools/bench_sgemm.c $(pkg-config --cflags --libs openblas) -o "$sgemm" \
            >"$build_log" 2>&1; then
        cat "$build_log" >&2
        echo "bench_tprun: cannot compile tools/bench_sgemm.c" >&2
        exit 1
    fi
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/bench_tprun.XXXXXX")"
trap 'rm -rf "$work"' EXIT

python3 - "$build_dir" "$sgemm" "$work" "$runs" <<'PY'
import collections
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time

build, sgemm, work, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tpcc, tprun = os.path.join(build, "tpcc"), os.path.join(build, "tprun")
t_start = time.monotonic()

# ~125M parameters; every size divides 2 (vocab, hidden, heads, kv_heads, ffn, seq).
model = dict(vocab=32000, hidden=768, layers=12, heads=12, kv_heads=4, ffn=2048, seq=256, batch=1)
model_desc = "Llama 12 layers, hidden 768, 12 heads / 4 kv, ffn 2048, vocab 32000, seq 256, batch 1"
plans = [("megatron", "plans/llama-megatron.plan"), ("sp", "plans/llama-sp.plan")]
# (tp, ranks, BLAS threads per rank)
setups = [(1, 1, 1), (1, 1, 2), (2, 2, 1)]


def die(msg):
    sys.exit(f"bench_tprun: {msg}")


def run(cmd, env_extra):
    """Run with OPENBLAS_NUM_THREADS / OMP_NUM_THREADS set explicitly."""
    env = dict(os.environ, **env_extra)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        die(f"'{' '.join(cmd)}' exited {r.returncode}")
    return r.stdout


def blas_env(threads):
    return {"OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}


def shown(cmd, env_extra):
    return " ".join(f"{k}={v}" for k, v in env_extra.items()) + " " + " ".join(shlex.quote(c) for c in cmd)


# ---- schedules -------------------------------------------------------------
defs = [a for k, v in model.items() for a in ("-D", f"{k}={v}")]
scheds = {}
for pname, plan in plans:
    for tp in sorted({s[0] for s in setups}):
        out = os.path.join(work, f"{pname}-tp{tp}.sched")
        run([tpcc, plan, *defs, "-D", f"tp={tp}", "-o", out], {})
        with open(out) as f:
            scheds[pname, tp] = json.load(f)


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def matmuls(sched, rank):
    return [op for op in sched["ranks"][rank]["ops"] if op["op"] == "matmul"]


def flops_of(ops):
    return sum(2 * op["m"] * op["n"] * op["k"] for op in ops)


# Parameter count from the weight table: logical (checkpoint) shapes, padding excluded.
s1 = scheds[plans[0][0], 1]
params = sum(numel(w["logical_shape"]) for w in s1["ranks"][0]["weights"])
for key, s in scheds.items():
    p = sum(numel(w["logical_shape"]) for w in s["ranks"][0]["weights"])
    if p != params:
        die(f"{key}: {p} parameters in the weight table, {params} at tp 1")
tokens = model["batch"] * model["seq"]

# ---- configurations ----------------------------------------------------------
configs = []
for pname, plan in plans:
    for tp, ranks, threads in setups:
        sched = scheds[pname, tp]
        path = os.path.join(work, f"{pname}-tp{tp}.sched")
        tag = f"{pname}-tp{tp}-r{ranks}-t{threads}"
        prof = os.path.join(work, tag + ".profile.json")
        trace = os.path.join(work, tag + ".trace.json")
        cmd = [tprun] + (["-n", str(ranks)] if ranks > 1 else []) + [
            "--threads", str(threads), "--labels", "tokens", "-q", "--profile-json", prof, "--trace", trace, path]
        rank_flops = [flops_of(matmuls(sched, r)) for r in range(sched["world_size"])]
        configs.append(dict(plan=pname, tp=tp, ranks=ranks, threads=threads, cmd=cmd, prof=prof, trace=trace,
                            env=blas_env(threads), sched=sched, rank_flops=rank_flops,
                            fwd=[], mm_share=[], comm_share=[], mm_rate=[], per_op=collections.defaultdict(list)))

collective_kinds = {"all_gather", "all_reduce", "reduce_scatter", "all_to_all", "broadcast"}

def measure(c):
    for p in (c["prof"], c["trace"]):
        if os.path.exists(p):
            os.remove(p)
    run(c["cmd"], c["env"])
    with open(c["prof"]) as f:
        ranks = json.load(f)["ranks"]
    if len(ranks) != c["ranks"]:
        die(f"{c['prof']}: {len(ranks)} ranks, expected {c['ranks']}")
    fwd = max(r["forward_seconds"] for r in ranks)
    tot = sum(r["forward_seconds"] for r in ranks)
    mm = [r["ops"].get("matmul", {}).get("seconds", 0.0) for r in ranks]
    comm = sum(v["seconds"] for r in ranks for k, v in r["ops"].items() if k in collective_kinds)
    c["fwd"].append(fwd)
    c["mm_share"].append(sum(mm) / tot)
    c["comm_share"].append(comm / tot)
    c["mm_rate"].append(sum(c["rank_flops"]) / sum(mm))
    # per-op durations of rank 0 (trace events of pid 0 follow the op order)
    with open(c["trace"]) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e["pid"] == 0]
    ops = c["sched"]["ranks"][0]["ops"]
    if len(ev) != len(ops):
        die(f"{c['trace']}: {len(ev)} events for {len(ops)} ops")
    for op, e in zip(ops, ev):
        if op["op"] == "matmul":
            c["per_op"][op["m"], op["n"], op["k"]].append(e["dur"] * 1e-6)


# ---- the sgemm reference: grouped rank-0 shapes, same thread counts ----------
# Configurations sharing shapes and threads share a measurement.
sgemm_refs = {}
for c in configs:
    shapes = collections.Counter((op["m"], op["n"], op["k"]) for op in matmuls(c["sched"], 0))
    key = (tuple(sorted(shapes.items())), c["threads"])
    if key not in sgemm_refs:
        cmd = [sgemm, "--threads", str(c["threads"]), "--min-passes", "1", "--min-seconds", "0.1"] + [
            f"{m},{n},{k},{cnt}" for (m, n, k), cnt in shapes.items()]
        sgemm_refs[key] = dict(cmd=cmd, env=blas_env(c["threads"]), threads=c["threads"], shapes=shapes,
                               per=collections.defaultdict(list))
    c["sgemm"] = sgemm_refs[key]
    c["shapes"] = shapes

blas_id = ""

def measure_sgemm(ref):
    global blas_id
    for line in run(ref["cmd"], ref["env"]).splitlines():
        f = line.split()
        if f[0] == "openblas":
            if int(f[1]) != ref["threads"]:
                die(f"bench_sgemm ran {f[1]} BLAS threads, asked for {ref['threads']}")
            blas_id = " ".join(f[2:])
        elif f[0] == "shape":
            ref["per"][int(f[1]), int(f[2]), int(f[3])].append(float(f[5]))


def busy_fraction(seconds=1.0):
    """Share of the machine's CPU time others used over `seconds` (nothing of ours runs)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + (v[4] if len(v) > 4 else 0)     # total, idle + iowait
    try:
        t0, i0 = sample()
        time.sleep(seconds)
        t1, i1 = sample()
        return 1 - (i1 - i0) / (t1 - t0) if t1 > t0 else float("nan")
    except (OSError, ValueError, IndexError):
        return float("nan")


busy_before = busy_fraction()
# One untimed run of each first: warms the page cache and shows a failure early.
for c in configs:
    run(c["cmd"], c["env"])
# Timed rounds: every configuration once, then every sgemm reference once, so
# drifting machine state (clock, other processes) reaches all of them alike.
for _ in range(runs):
    for c in configs:
        measure(c)
    for ref in sgemm_refs.values():
        measure_sgemm(ref)
busy_after = busy_fraction()

# sgemm: per shape, the median over rounds of the seconds per call
for ref in sgemm_refs.values():
    ref["sec"] = {shp: statistics.median(v) for shp, v in ref["per"].items()}
    ref["flops"] = sum(2 * m * n * k * cnt for (m, n, k), cnt in ref["shapes"].items())
    ref["seconds"] = sum(ref["sec"][shp] * cnt for shp, cnt in ref["shapes"].items())

# ---- report ------------------------------------------------------------------
def cpu_model():
    name, fam, mod = "unknown CPU", "?", "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k, v = k.strip(), v.strip()
                if k == "model name" and name == "unknown CPU":
                    name = v
                elif k == "cpu family" and fam == "?":
                    fam = v
                elif k == "model" and mod == "?":
                    mod = v
    except OSError:
        pass
    name = re.sub(r"\s+", " ", name)
    return f"{name} (family {fam}, model {mod})"


nproc = os.cpu_count()
base = statistics.median(configs[0]["fwd"])
mm_flops = flops_of(matmuls(s1, 0))
print(f"model:       {model_desc}")
print(f"parameters:  {params:,} (logical shapes of the schedule's weight table)")
print(f"matmul work: {mm_flops / 1e9:.2f} GFLOP per forward step (2 m n k over the tp 1 program's matmuls)")
print(f"runs:        {runs} per configuration and per sgemm reference, interleaved; medians reported")
print(f"other load:  {100 * busy_before:.0f}% of the CPUs busy in the second before the runs, "
      f"{100 * busy_after:.0f}% in the second after (nproc {os.cpu_count()})")
if max(busy_before, busy_after) > 0.10:
    print("             warning: other processes were running; the timings include their interference")
print("commands (one per configuration; schedules from tpcc PLAN -D ... -D tp=TP -o X.sched):")
for c in configs:
    print("  " + shown(c["cmd"], c["env"]).replace(work + "/", ""))
for ref in sgemm_refs.values():
    print("  " + shown(ref["cmd"], ref["env"]))
print()

rows = []
hdr = ("| plan | tp | ranks x BLAS threads | tokens/s | forward ms (median) | min ms | speedup vs tp 1 x 1 "
       "| matmul share | collectives share | tprun matmul GFLOP/s | sgemm GFLOP/s | matmul efficiency |")
print(f"Forward step, {model_desc}, {params / 1e6:.1f}M parameters, seeded weights; "
      f"median of {runs} runs per row (tools/bench_tprun.sh).")
print()
print(hdr)
print("|" + "---|" * (hdr.count("|") - 1))
for c in configs:
    fwd = statistics.median(c["fwd"])
    rate = statistics.median(c["mm_rate"])
    ref = c["sgemm"]["flops"] / c["sgemm"]["seconds"]
    print(f"| {c['plan']} | {c['tp']} | {c['ranks']} x {c['threads']} | {tokens / fwd:.0f} | {fwd * 1e3:.1f} "
          f"| {min(c['fwd']) * 1e3:.1f} | {base / fwd:.2f} | {100 * statistics.median(c['mm_share']):.1f}% "
          f"| {100 * statistics.median(c['comm_share']):.1f}% | {rate / 1e9:.1f} | {ref / 1e9:.1f} | {rate / ref:.2f} |")
print()
print(f"Machine: nproc {nproc}, {cpu_model()}; OpenBLAS core {blas_id or '?'}. "
      f"Forward time = max over ranks of forward_seconds; shares = op-kind seconds / forward seconds, summed over "
      f"ranks; efficiency = tprun matmul GFLOP/s / cblas_sgemm GFLOP/s on the rank-0 shapes, same threads, "
      f"interleaved in the same session.")
print()

print("Per-shape matmul time, rank 0 (tprun: median per call from --trace; sgemm: median per call, weights cycled "
      "through COUNT copies as in the forward):")
print()
print("| plan | tp | ranks x threads | m x n x k | count | tprun ms/call | sgemm ms/call | efficiency |")
print("|---|---|---|---|---|---|---|---|")
for c in configs:
    for shp, cnt in sorted(c["shapes"].items(), key=lambda kv: -kv[0][0] * kv[0][1] * kv[0][2] * kv[1]):
        t = statistics.median(c["per_op"][shp])
        r = c["sgemm"]["sec"][shp]
        print(f"| {c['plan']} | {c['tp']} | {c['ranks']} x {c['threads']} | {shp[0]} x {shp[1]} x {shp[2]} | {cnt} "
              f"| {t * 1e3:.3f} | {r * 1e3:.3f} | {r / t:.2f} |")
print()
print(f"elapsed: {time.monotonic() - t_start:.0f} s")
PY
