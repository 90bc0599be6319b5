#!/usr/bin/env bash
# GPU training benchmark (not a test; needs an NVIDIA GPU, python3 with
# numpy, and torch + transformers for the peers): one tprun training run
# with the CUDA backend and the same run in PyTorch eager and under
# torch.compile, side by side on the same checkpoint, tokens and optimizer
# settings; then where tprun's step goes against the best the GPU allows.
#
#   tools/bench_train_gpu.sh [STEPS]     # STEPS defaults to 12
#
# Environment (all optional):
#   CONFIG   make_checkpoint.py sizes (default a 125M Llama: hidden 768,
#            12 layers, 12 heads, 4 kv heads, ffn 2048, vocab 32000)
#   SEQ, BATCH   the step's shape (default 512 x 8)
#   DTYPE    the schedule's dtype (default fp32; PyTorch then runs fp32
#            with TF32 off, as cuBLAS does for tprun; bf16: PyTorch runs
#            fp32 weights under autocast(bfloat16))
#   COMPILE  0 leaves torch.compile out (it compiles for minutes on a CPU)
#   PEAK_TFLOPS  the peak MFU is taken against (tools/gpu_peak.sh)
#   TPCC, TPRUN  the binaries (default build/tpcc, build/tprun, with the CUDA
#            backend beside it: tools/setup.sh --cuda; build/tprun_emulated
#            tries the script on a machine without a GPU, the numbers then
#            meaning nothing)
#
# Every side: AdamW (lr 1e-3 after 2 warm-up steps, cosine, betas 0.9 and
# 0.999, weight decay 0.01 on matrices only), clip_grad_norm_ at 1.0,
# transformers' shifted loss; step i takes the i-th batch * seq tokens.
# Prints each side's loss per step (they should agree to the precision's
# rounding: a correctness check at a real size) and the median step time
# over the steps after the first two, as tokens/s, MFU and the ratios.
# MFU counts `tpcc --report --train`'s forward and backward FLOPs (2mnk a
# matmul, attention without a causal discount; recomputation not counted).
#
# Then, from a second tprun run with --profile-json (a synchronisation
# after every op, so its steps are a little slower):
#   - attention: the step's attention and attention_grad ops against
#     scaled_dot_product_attention's forward and backward on the same
#     shapes (causal, GQA, as many layers), its flash backend in bf16;
#   - the optimizer (the gradient norm, clipping and AdamW): its time
#     against the least traffic it needs, per parameter 28 bytes for
#     AdamW (read and written: the fp32 master, or the fp32 weight, and
#     both moments; the gradient read, and with masters the weight
#     written) and the norm's read of the gradient, as a share of the
#     GPU's copy bandwidth measured here (a 1 GiB device copy, read and
#     write counted, the best of 10).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -c 'import torch, transformers' 2>/dev/null ||
    { echo "bench_train_gpu: needs torch and transformers (pip install torch transformers)" >&2; exit 1; }
steps=${1:-12}
[[ "$steps" =~ ^[1-9][0-9]*$ ]] && (( steps >= 3 )) ||
    { echo "usage: $0 [STEPS]   (STEPS an integer >= 3, default 12)" >&2; exit 2; }
config=${CONFIG:-hidden=768 heads=12 kv_heads=4 layers=12 ffn=2048 vocab=32000}
seq=${SEQ:-512}
batch=${BATCH:-8}
dtype=${DTYPE:-fp32}
tpcc=${TPCC:-build/tpcc}
tprun=${TPRUN:-build/tprun}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# shellcheck disable=SC2086  # CONFIG is a list of key=value words
python3 tools/make_checkpoint.py --family llama --out "$out/init" --seed 0 --config $config
python3 - "$out/tokens.npy" "$(( (steps + 1) * seq * batch ))" "$config" <<'EOF'
import re, sys
import numpy as np
vocab = int(re.search(r"vocab=(\d+)", sys.argv[3]).group(1))
np.save(sys.argv[1], np.random.default_rng(0).integers(0, vocab, int(sys.argv[2]), dtype=np.int32))
EOF

shape=(plans/llama-sp.plan --hf-config "$out/init/config.json" -D tp=1 -D seq="$seq" -D batch="$batch" --dtype "$dtype"
       --train)
"$tpcc" "${shape[@]}" -o "$out/train.sched"
"$tpcc" "${shape[@]}" --report --report-format=json > "$out/report.json"
run=("$tprun" "$out/train.sched" --backend cuda --weights "$out/init" --data "$out/tokens.npy" --warmup 2 -q)
"${run[@]}" --steps "$steps" --log-json "$out/tprun.json"
"${run[@]}" --steps $(( steps < 5 ? steps : 5 )) --profile-json "$out/profile.json"

# shellcheck source=tools/gpu_peak.sh
source tools/gpu_peak.sh
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
python3 - "$out" "$steps" "$seq" "$batch" "$dtype" "${COMPILE:-1}" "$(peak_tflops "$name" "$dtype")" <<'EOF'
import json, statistics, sys, time
import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, get_cosine_schedule_with_warmup

out, steps, seq, batch, dtype = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
compile_too, peak = sys.argv[6] != "0", float(sys.argv[7]) if sys.argv[7] else None
# the CPU stands in only to try the script on a machine without a GPU
device = "cuda" if torch.cuda.is_available() else "cpu"
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
tokens = torch.from_numpy(np.load(out + "/tokens.npy").astype(np.int64)).to(device)
amp = torch.autocast(device, dtype=torch.bfloat16, enabled=dtype == "bf16")


def train(compiled):
    """The recipe's steps in PyTorch: each step's loss, norm and time."""
    model = AutoModelForCausalLM.from_pretrained(out + "/init", dtype=torch.float32,
                                                 attn_implementation="sdpa").to(device)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=steps)
    forward = torch.compile(model) if compiled else model
    log = []
    for step in range(steps):
        sync()
        t0 = time.perf_counter()
        ids = tokens[step * batch * seq:(step + 1) * batch * seq].view(batch, seq)
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        sync()
        log.append({"loss": loss.item(), "grad_norm": norm.item(), "seconds": time.perf_counter() - t0})
    return model.config, log


def timed(f, repeat):
    """The best of `repeat` calls of f, in seconds (after one warm-up call)."""
    f()
    best = float("inf")
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        f()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


config, eager = train(False)
sides = [("PyTorch eager", eager)] + ([("torch.compile", train(True)[1])] if compile_too else [])
ours = json.load(open(out + "/tprun.json"))["steps"]
print("%-5s %12s" % ("step", "tprun loss") + "".join(" %14s %9s" % (n[:14], "rel diff") for n, _ in sides) +
      " %10s" % "tprun ms" + "".join(" %16s" % (n + " ms") for n, _ in sides))
for i, a in enumerate(ours):
    line = "%-5d %12.6f" % (i + 1, a["loss"])
    for _, log in sides:
        line += " %14.6f %9.2e" % (log[i]["loss"], abs(a["loss"] - log[i]["loss"]) / log[i]["loss"])
    line += " %10.1f" % (a["seconds"] * 1e3) + "".join(" %16.1f" % (log[i]["seconds"] * 1e3) for _, log in sides)
    print(line)

report = json.load(open(out + "/report.json"))
flops = report["training"]["flops"]["forward"] + report["training"]["flops"]["backward"]
tokens_per_step = batch * seq


def summary(name, seconds):
    mfu = "%.1f%% MFU" % (100 * flops / seconds / (peak * 1e12)) if peak else "MFU n/a (set PEAK_TFLOPS)"
    return "%s %.1f ms/step (%.0f tok/s, %s)" % (name, seconds * 1e3, tokens_per_step / seconds, mfu)


t_ours = statistics.median(s["seconds"] for s in ours[2:])
medians = [(n, statistics.median(s["seconds"] for s in log[2:])) for n, log in sides]
gpu = torch.cuda.get_device_name() if device == "cuda" else "CPU"
print("%s, %s, torch %s, transformers %s, %s" % (gpu, time.strftime("%Y-%m-%d"), torch.__version__,
                                                 transformers.__version__, dtype))
print("seq %d x batch %d, %.3g model FLOPs a step: %s" % (seq, batch, flops, "; ".join(
    [summary("tprun", t_ours)] + [summary(n, t) for n, t in medians])))
print("tprun throughput: " + ", ".join("%.2fx %s's" % (t / t_ours, n) for n, t in medians))

# where tprun's step goes: the profiled run's median step
prof = json.load(open(out + "/profile.json"))["ranks"][0]
ops = prof["ops"]
# -O1: a rotary model's attention rotates q and k in it (rope_attention), RoPE included
attn_ours = sum(ops[k]["seconds"] for k in ("attention", "attention_grad", "rope_attention", "rope_attention_grad")
                if k in ops)
layers, heads = config.num_hidden_layers, config.num_attention_heads
d = config.hidden_size // heads
half = torch.bfloat16 if dtype == "bf16" else torch.float32
q = torch.randn(batch, heads, seq, d, device=device, dtype=half, requires_grad=True)
k = torch.randn(batch, config.num_key_value_heads, seq, d, device=device, dtype=half, requires_grad=True)
v = torch.randn_like(k, requires_grad=True)
dy = torch.randn_like(q)
flash = device == "cuda" and dtype == "bf16"
SDPBackend = torch.nn.attention.SDPBackend
backends = [SDPBackend.FLASH_ATTENTION] if flash else \
    [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def sdpa_layers():
    with torch.nn.attention.sdpa_kernel(backends):
        for _ in range(layers):
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            torch.autograd.grad(y, (q, k, v), dy)


attn_sdpa = timed(sdpa_layers, 5)
print("attention forward+backward, %d layers of %d heads (%d kv), d %d: tprun %.2f ms, SDPA%s %.2f ms: "
      "tprun takes %.2fx SDPA's time" % (layers, heads, config.num_key_value_heads, d, attn_ours * 1e3,
                                         " (flash)" if flash else "", attn_sdpa * 1e3, attn_ours / attn_sdpa))

esize = 2 if dtype == "bf16" else 4
params = report["training"]["param_bytes"] / esize
least = params * (28 + esize)
src = torch.empty(1 << 28, device=device)
dst = torch.empty_like(src)
copy = 2 * src.numel() * 4 / timed(lambda: dst.copy_(src), 10)
opt_s = prof["phases"]["optimizer"]
print("optimizer (norm, clipping, AdamW) of %.3g parameters: %.2f ms for %.3g GB at least: %.0f GB/s, %.0f%% of "
      "the %s's copy bandwidth (%.0f GB/s)" % (params, opt_s * 1e3, least / 1e9, least / opt_s / 1e9,
                                               100 * least / opt_s / copy, gpu, copy / 1e9))
EOF
