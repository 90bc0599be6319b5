#!/usr/bin/env bash
# Benchmark (not a test): tprun's memory at tp 1 on the ~125M-parameter
# Llama of tools/bench_tprun.sh (vocab 32000, hidden 768, 12 layers, 12
# heads, 4 kv heads, ffn 2048, seq 256, batch 1), its weights read from an
# fp32 safetensors checkpoint (tools/make_checkpoint.py) on the CPU backend.
#
#   tools/bench_memory.sh [BUILD_DIR]      # BUILD_DIR defaults to build
#
# Prints, in MiB: the peak resident set of the run (/usr/bin/time's
# "Maximum resident set size"), what the
# schedule says the rank must hold -- its weight slices, its activation
# arena and the executor's two reshard staging buffers (the largest
# collective's input or output each; none at tp 1) -- and the ratio of
# the peak to their sum, for a quiet run (-q: no logits copied back to the
# host) and for one printing its summary (the full logits on the host,
# [seq, vocab] floats). The rest of the peak is the process itself: the
# libraries (OpenBLAS and its buffers, MPI), the schedule, the inputs. Also the peak of `tprun --version`, and which CUDA
# libraries each process mapped (a CUDA build loads them only for
# --backend cuda). Takes about a minute, most of it writing the checkpoint.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
[ -x "$build/tpcc" ] && [ -x "$build/tprun" ] || { echo "bench_memory: no $build/tpcc or tprun: build first" >&2; exit 2; }
work=$(mktemp -d /tmp/bench-memory-XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$root"

config="vocab=32000 hidden=768 layers=12 heads=12 kv_heads=4 ffn=2048"
python3 tools/make_checkpoint.py --family llama --out "$work/ckpt" --config $config >/dev/null
defs=()
for kv in $config seq=256 batch=1 tp=1; do defs+=(-D "$kv"); done
"$build/tpcc" plans/llama-sp.plan "${defs[@]}" -o "$work/tp1.sched"

python3 - "$build/tprun" "$work/tp1.sched" "$work/ckpt" <<'PY'
import json, os, platform, subprocess, sys, time

tprun, sched, ckpt = sys.argv[1:4]
MiB = 1 << 20
CUDA_LIBS = ("libcudart", "libcublas", "libnccl")


def run(cmd):
    """Run cmd under /usr/bin/time (output discarded): its peak RSS in bytes,
    and the CUDA libraries its /proc/PID/maps showed while it ran."""
    report = os.path.join(os.path.dirname(sched), "time.txt")
    null = os.open(os.devnull, os.O_WRONLY)
    p = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", report] + cmd, stdout=null, stderr=null)
    mapped = set()
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
                children = f.read().split()
            for child in children:
                with open(f"/proc/{child}/maps") as f:
                    for line in f:
                        parts = line.split()
                        name = os.path.basename(parts[5]) if len(parts) >= 6 else ""
                        if name.startswith(CUDA_LIBS):
                            mapped.add(name.split(".so")[0])
        except OSError:
            pass
        time.sleep(0.002)
    if p.returncode != 0:
        sys.exit(f"bench_memory: {' '.join(cmd)} failed")
    with open(report) as f:
        return int(f.read().split()[-1]) * 1024, mapped


with open(sched) as f:
    s = json.load(f)
size = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4}
rank = s["ranks"][0]
weights = 0
for w in rank["weights"]:
    shape = list(w["shape"])
    if w.get("slice"):
        shape[w["slice"]["dim"]] = w["slice"]["length"]
    n = 1
    for d in shape:
        n *= d
    weights += n * size[w["dtype"]]
arena = s["arena_bytes"]
bufs = s["buffers"]
# the executor's staging (runtime/exec/exec.c): two buffers of the largest
# collective's input or output; a collective is an op that moves "bytes"
staging = 2 * max([max(bufs[op["in"][0]]["bytes"], bufs[op["out"]]["bytes"]) for op in rank["ops"] if "bytes" in op],
                  default=0)

args = [tprun, sched, "--backend", "cpu", "--weights", ckpt, "--labels", "tokens"]
rss_quiet, cuda_run = run(args + ["-q"])
rss_summary, _ = run(args)
rss_version, cuda_version = run([tprun, "--version"])
need = weights + arena + staging
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
           platform.machine())
print("tp 1, Llama 125M (12 layers, hidden 768, vocab 32000), seq 256, fp32 checkpoint, --backend cpu")
print(f"  weights                   {weights / MiB:8.1f} MiB")
print(f"  arena                     {arena / MiB:8.1f} MiB")
print(f"  staging                   {staging / MiB:8.1f} MiB")
print(f"  peak RSS, -q              {rss_quiet / MiB:8.1f} MiB   ratio {rss_quiet / need:.3f}")
print(f"  peak RSS, with summary    {rss_summary / MiB:8.1f} MiB   ratio {rss_summary / need:.3f}"
      "  (+ the logits on the host)")
print(f"  CUDA libraries            {', '.join(sorted(cuda_run)) or 'none'}")
print("tprun --version")
print(f"  peak RSS                  {rss_version / MiB:8.1f} MiB")
print(f"  CUDA libraries            {', '.join(sorted(cuda_version)) or 'none'}")
print(f"(ratio: peak RSS / (weights + arena + staging); {cpu}, {time.strftime('%Y-%m-%d')})")
PY
