#!/usr/bin/env bash
# GPU benchmark (not a test; needs NVIDIA GPUs): tprun's forward step with
# the CUDA backend, as tokens/s and model FLOP utilisation (MFU), and the
# time attention takes.
#
#   tools/bench_gpu.sh [STEPS]           # STEPS defaults to 10
#
# Environment (all optional):
#   PLAN         plan file (default plans/llama-megatron.plan)
#   SIZES        -D overrides; default a Llama-3-8B: vocab 128256, hidden 4096,
#                32 layers, 32 heads, 8 kv heads, ffn 14336, seq 2048, batch 1
#   TPS          tensor-parallel degrees (default: 1, then 2, 4, 8 up to the GPUs)
#   DTYPES       schedule dtypes (default "bf16 fp32")
#   PEAK_TFLOPS  dense peak of one GPU for the dtype, e.g. "bf16=989,fp32=67";
#                default from the GPU's name (table below); MFU is n/a otherwise
#   TPCC, TPRUN  binaries built elsewhere: both set, nothing is built here
#                (a GPU machine without our build dependencies)
#   TPRUN        alone: the tprun to time (default the one built here); pointing it at
#                build/tprun_emulated checks this script on a machine without
#                GPUs (the numbers then mean nothing)
#
# For each (dtype, tp): the schedule from `tpcc -o`, then two processes of
# `tprun -n tp SCHED --backend cuda --repeat STEPS` on seeded weights, each
# running the forward STEPS times after loading (steady state: the first
# step's one-time costs do not count in the median):
#   - the timed one: the median step as tprun's summary prints it (rank 0;
#     the executor synchronises the device before it stops each step's
#     clock, and the ranks meet in collectives);
#   - the profiled one (--profile-json): the time per op kind of the median
#     step, the slowest rank's; the executor then synchronises after every
#     op, so its steps are a little slower: the table gives attention's
#     time and its share of that step.
#
#   tokens/s  = batch * seq / forward seconds
#   MFU       = model FLOPs / forward seconds / (tp * peak FLOP/s of one GPU)
#
# Model FLOPs are `tpcc --report`'s forward FLOPs of the tp = 1 schedule:
# 2mnk per matmul and 4 b h s^2 d per attention (no causal discount, as in
# PaLM's MFU), so work a plan replicates across ranks does not count twice.
# Peaks are NVIDIA's dense figures (no sparsity); fp32 schedules run cuBLAS
# without TF32 (CUBLAS_DEFAULT_MATH), so their peak is the non-tensor fp32
# one.
#
# CUDA_MODULE_LOADING=EAGER loads every kernel (ours and cuBLAS's) when the
# context is created, outside the timed steps. It fails only when something cannot
# be built or a run fails; it asserts no target, since timings are the
# machine's.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=tools/gpu_peak.sh
source tools/gpu_peak.sh

steps="${1:-10}"
if ! [[ "$steps" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 [STEPS]   (STEPS a positive integer, default 10)" >&2
    exit 2
fi
command -v mpiexec >/dev/null || { echo "bench_gpu: mpiexec not found (Debian: mpich; tools/setup.sh installs it)" >&2; exit 1; }
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] ||
    { echo "bench_gpu: nvcc not found: the CUDA backend cannot be built" >&2; exit 1; }
export PATH="$PATH:/usr/local/cuda/bin"

plan="${PLAN:-plans/llama-megatron.plan}"
sizes="${SIZES:--D vocab=128256 -D hidden=4096 -D layers=32 -D heads=32 -D kv_heads=8 -D ffn=14336 -D seq=2048 -D batch=1}"
dtypes="${DTYPES:-bf16 fp32}"

build_dir=build-bench-gpu
mkdir -p "$build_dir"
if [[ -n "${TPCC:-}" && -n "${TPRUN:-}" ]]; then
    tpcc="$TPCC" tprun="$TPRUN"          # built elsewhere (a machine without our build tools)
else
    # the log keeps ptxas's register and spill report of every kernel beside the timings
    log="$build_dir/bench-gpu-build.log"
    if ! cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DTPCC_TESTS=OFF -DTPCC_CUDA=ON \
             -DTPCC_PTXAS_VERBOSE=ON >"$log" 2>&1 ||
       ! cmake --build "$build_dir" -j"$(nproc)" --target tpcc tprun tprun_cuda >>"$log" 2>&1; then
        cat "$log" >&2
        echo "bench_gpu: build failed (log: $log)" >&2
        exit 1
    fi
    tpcc="$build_dir/tpcc"
    tprun="${TPRUN:-$build_dir/tprun}"
fi
work="$build_dir/bench-gpu"
mkdir -p "$work"

# Is a GPU usable? tprun says why not.
"$tpcc" "$plan" -o "$work/probe.sched" -D vocab=256 -D hidden=64 -D layers=1 -D heads=8 -D kv_heads=4 -D ffn=128 \
    -D seq=16 -D batch=1 -D tp=1 >/dev/null
if ! probe=$("$tprun" "$work/probe.sched" --backend cuda --labels tokens -q 2>&1); then
    echo "bench_gpu: $probe" >&2
    exit 1
fi

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
gpus=${gpus:-1}
[[ "$gpus" -ge 1 ]] || gpus=1
if [[ -n "${TPS:-}" ]]; then
    tps="$TPS"
else
    tps=1
    for t in 2 4 8; do [[ "$t" -le "$gpus" ]] && tps="$tps $t"; done
fi

model_flops() {   # dtype
    # shellcheck disable=SC2086
    "$tpcc" --report --report-format=json "$plan" $sizes -D tp=1 --dtype "$1" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["forward_flops"])'
}

# profile.json -> "attention seconds, step seconds" of the slowest rank's median step
attention_seconds() {
    python3 -c 'import json, sys
ranks = json.load(open(sys.argv[1]))["ranks"]
slowest = max(ranks, key=lambda r: r["forward_seconds"])
assert len(slowest["steps"]) == int(sys.argv[2]), "one time per step"
ops = slowest["ops"]   # -O1: a rotary model'"'"'s attention is rope_attention, RoPE included
print(sum(ops[k]["seconds"] for k in ("attention", "rope_attention") if k in ops), slowest["forward_seconds"])' "$1" "$2"
}

# PyTorch's forward of the same shapes (transformers' LlamaForCausalLM,
# SDPA attention, random weights: the time does not depend on them) on one
# GPU, eager and under torch.compile: for each the median of STEPS calls
# after warm-up calls (compile's first compiles); "n/a" for each that
# cannot run (no torch and transformers; compile without Triton or a C
# compiler). Only for plans of the Llama family at tp 1.
torch_ms() {   # dtype
    # shellcheck disable=SC2086
    python3 - "$1" "$steps" $sizes <<'EOF' 2>/dev/null || echo "n/a n/a"
import statistics, sys, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM
dt, steps = sys.argv[1], int(sys.argv[2])
d = dict(a.split("=", 1) for a in sys.argv[3:] if a != "-D")
torch.backends.cuda.matmul.allow_tf32 = False
config = LlamaConfig(vocab_size=int(d["vocab"]), hidden_size=int(d["hidden"]), num_hidden_layers=int(d["layers"]),
                     num_attention_heads=int(d["heads"]), num_key_value_heads=int(d["kv_heads"]),
                     intermediate_size=int(d["ffn"]), max_position_embeddings=int(d["seq"]))
dtype = torch.bfloat16 if dt == "bf16" else torch.float32
with torch.device("cuda"):
    model = LlamaForCausalLM(config).to(dtype).eval()
ids = torch.randint(0, config.vocab_size, (int(d["batch"]), int(d["seq"])), device="cuda")


def median_ms(forward):
    times = []
    with torch.no_grad():
        for _ in range(2):
            forward(ids)
        for _ in range(steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            forward(ids)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


print("%.2f" % median_ms(model), end=" ", flush=True)
try:
    compiled = "%.2f" % median_ms(torch.compile(model))
except Exception:
    compiled = "n/a"
print(compiled)
EOF
}

# PyTorch's SDPA (FlashAttention on these GPUs) on one rank's attention
# inputs (heads / tp query heads, causal, GQA), once per layer: the median of
# STEPS calls after one warm-up, times the layers; "n/a" without torch.
sdpa_ms() {   # dtype tp
    # shellcheck disable=SC2086
    python3 - "$1" "$2" "$steps" $sizes <<'EOF' 2>/dev/null || echo "n/a"
import statistics, sys, time
import torch
import torch.nn.functional as F
dt, tp, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = dict(a.split("=", 1) for a in sys.argv[4:] if a != "-D")
b, s, h, g = int(d["batch"]), int(d["seq"]), int(d["heads"]) // tp, int(d["kv_heads"]) // tp
hd = int(d.get("head_dim", int(d["hidden"]) // int(d["heads"])))
dtype = torch.bfloat16 if dt == "bf16" else torch.float32
q = torch.randn(b, h, s, hd, device="cuda", dtype=dtype)
k, v = (torch.randn(b, g, s, hd, device="cuda", dtype=dtype) for _ in range(2))
times = []
F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
for _ in range(steps):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
print("%.2f" % (statistics.median(times) * 1e3 * int(d["layers"])))
EOF
}

torch_version=$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "not installed")
echo "GPU: ${name:-unknown} x $gpus; plan $plan; $sizes; median of $steps steps after loading; torch $torch_version"
echo
echo "| dtype | tp | median step ms | tokens/s | model TFLOP/s | MFU | attention ms (profiled) | attention share | PyTorch SDPA ms (same inputs) | attention / SDPA time | PyTorch eager ms | torch.compile ms | tprun / eager throughput | tprun / compile throughput |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"

for dt in $dtypes; do
    flops=$(model_flops "$dt")
    peak=$(peak_tflops "$name" "$dt")
    for tp in $tps; do
        sched="$work/$(basename "$plan" .plan)-$dt-tp$tp.sched"
        # shellcheck disable=SC2086
        "$tpcc" "$plan" -o "$sched" $sizes -D tp="$tp" --dtype "$dt"
        # batch x seq: the elements of the input ids
        tokens=$(python3 -c 'import json, math, sys
print(math.prod(next(b for b in json.load(open(sys.argv[1]))["buffers"] if b["name"] == "input_ids")["shape"]))' "$sched")
        launch=()
        [[ "$tp" -gt 1 ]] && launch=(-n "$tp")
        prof="$work/profile-$dt-tp$tp.json"
        timed="$work/timed-$dt-tp$tp.txt"
        if ! CUDA_MODULE_LOADING=EAGER "$tprun" ${launch[@]+"${launch[@]}"} "$sched" --backend cuda --labels tokens \
                --repeat "$steps" >"$timed" ||
           ! CUDA_MODULE_LOADING=EAGER "$tprun" ${launch[@]+"${launch[@]}"} "$sched" --backend cuda --labels tokens \
                --repeat "$steps" --profile-json "$prof" -q; then
            echo "bench_gpu: tprun failed (dtype $dt, tp $tp)" >&2
            exit 1
        fi
        # "  forward     12.345 ms, 165898 tokens/s (median of 10 steps)"
        med=$(sed -n 's/^  forward  *\([0-9.]*\) ms.*/\1/p' "$timed")
        if [[ -z "$med" ]]; then
            echo "bench_gpu: no forward time in tprun's summary ($timed)" >&2
            exit 1
        fi
        read -r attn profiled < <(attention_seconds "$prof" "$steps")
        peers="n/a n/a"
        [[ "$tp" -eq 1 && "$(basename "$plan")" == llama* ]] && peers=$(torch_ms "$dt")
        read -r eager compiled _ <<< "$peers"
        sdpa=$(sdpa_ms "$dt" "$tp")
        python3 - "$dt" "$tp" "$med" "$tokens" "$flops" "${peak:-}" "$attn" "$profiled" "$eager" "$sdpa" "$compiled" <<'EOF'
import sys
dt, tp, med_ms, tokens, flops, peak = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), \
    float(sys.argv[5]), sys.argv[6]
attn, profiled = float(sys.argv[7]), float(sys.argv[8])
med = med_ms / 1e3
tflops = flops / med / 1e12
mfu = f"{100 * tflops / (tp * float(peak)):.1f}%" if peak else "n/a (set PEAK_TFLOPS)"
share = f"{100 * attn / profiled:.1f}%" if profiled > 0 else "n/a"
eager, compiled = sys.argv[9], sys.argv[11]
ratio = lambda peer: f"{float(peer) / med_ms:.2f}" if peer != "n/a" else "n/a"
sdpa = sys.argv[10]
attn_ratio = f"{attn * 1e3 / float(sdpa):.2f}" if sdpa != "n/a" else "n/a"
print(f"| {dt} | {tp} | {med_ms:.2f} | {tokens / med:,.0f} | {tflops:.1f} | {mfu} | {attn * 1e3:.2f} | {share} | {sdpa} | {attn_ratio} | {eager} | {compiled} | {ratio(eager)} | {ratio(compiled)} |")
EOF
    done
done
