#!/usr/bin/env bash
# GPU training benchmark (not a test; needs an NVIDIA GPU, python3 with
# numpy, and torch + transformers for the peer): one tprun training run
# with the CUDA backend and the same run in PyTorch eager, side by side on
# the same checkpoint, tokens and optimizer settings.
#
#   tools/bench_train_gpu.sh [STEPS]     # STEPS defaults to 12
#
# Environment (all optional):
#   CONFIG   make_checkpoint.py sizes (default a 125M Llama: hidden 768,
#            12 layers, 12 heads, 4 kv heads, ffn 2048, vocab 32000)
#   SEQ, BATCH   the step's shape (default 512 x 8)
#   DTYPE    the schedule's dtype (default fp32; PyTorch then runs fp32
#            with TF32 off, as cuBLAS does for tprun)
#   TPCC, TPRUN  the binaries (default build/tpcc, build/tprun, with the CUDA
#            backend beside it: tools/setup.sh --cuda)
#
# Both sides: AdamW (lr 1e-3 after 2 warm-up steps, cosine, betas 0.9 and
# 0.999, weight decay 0.01 on matrices only), clip_grad_norm_ at 1.0,
# transformers' shifted loss; step i takes the i-th batch * seq tokens.
# Prints each side's loss per step (the two should agree to the
# precision's rounding: a correctness check at a real size) and the median
# step time over the steps after the first two, as tokens/s and the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."

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

"$tpcc" plans/llama-sp.plan --hf-config "$out/init/config.json" -D tp=1 -D seq="$seq" -D batch="$batch" \
    --dtype "$dtype" --train -o "$out/train.sched"
"$tprun" "$out/train.sched" --backend cuda --weights "$out/init" --data "$out/tokens.npy" --steps "$steps" \
    --warmup 2 --log-json "$out/tprun.json" -q

python3 - "$out" "$steps" "$seq" "$batch" "$dtype" <<'EOF'
import json, statistics, sys, time
import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, get_cosine_schedule_with_warmup

out, steps, seq, batch, dtype = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
# the CPU stands in only to try the script on a machine without a GPU
device = "cuda" if torch.cuda.is_available() else "cpu"
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
model = AutoModelForCausalLM.from_pretrained(out + "/init", torch_dtype=torch.float32,
                                             attn_implementation="sdpa").to(device)
decay = [p for p in model.parameters() if p.ndim >= 2]
no_decay = [p for p in model.parameters() if p.ndim < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=steps)
tokens = torch.from_numpy(np.load(out + "/tokens.npy").astype(np.int64)).to(device)
amp = torch.autocast(device, dtype=torch.bfloat16, enabled=dtype == "bf16")
torch_log = []
for step in range(steps):
    sync()
    t0 = time.perf_counter()
    ids = tokens[step * batch * seq:(step + 1) * batch * seq].view(batch, seq)
    opt.zero_grad(set_to_none=True)
    with amp:
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    sync()
    torch_log.append({"loss": loss.item(), "grad_norm": norm.item(), "seconds": time.perf_counter() - t0})

ours = json.load(open(out + "/tprun.json"))["steps"]
print("%-5s %12s %12s %10s %10s %10s" % ("step", "tprun loss", "torch loss", "rel diff", "tprun ms", "torch ms"))
for i, (a, b) in enumerate(zip(ours, torch_log)):
    print("%-5d %12.6f %12.6f %10.2e %10.1f %10.1f" % (i + 1, a["loss"], b["loss"], abs(a["loss"] - b["loss"]) / b["loss"],
                                                     a["seconds"] * 1e3, b["seconds"] * 1e3))
t_ours = statistics.median(s["seconds"] for s in ours[2:])
t_torch = statistics.median(s["seconds"] for s in torch_log[2:])
tokens_per_step = batch * seq
print("torch %s, transformers %s" % (torch.__version__, transformers.__version__))
print("%s, %s, seq %d x batch %d: tprun %.1f ms/step (%.0f tok/s), PyTorch eager %.1f ms/step (%.0f tok/s), "
      "tprun/PyTorch throughput %.2f" % (torch.cuda.get_device_name() if device == "cuda" else "CPU", dtype, seq, batch, t_ours * 1e3,
                                         tokens_per_step / t_ours, t_torch * 1e3, tokens_per_step / t_torch,
                                         t_torch / t_ours))
EOF
