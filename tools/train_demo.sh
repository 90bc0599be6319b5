#!/bin/sh
# A training run end to end on the shipped text (data/genesis: Genesis
# 1-25 of the King James Version, public domain, tokenised with its own
# 512-token BPE by tools/prepare_data.py, 10% of the chapters held out):
# a random Llama checkpoint of that vocabulary (tools/make_checkpoint.py,
# numpy only), tpcc --train, tprun training with sequence parallelism over
# 2 ranks over 5 shuffled epochs and the validation loss every 25 steps, a Hugging Face checkpoint
# saved, and both losses drawn (docs/train_loss.svg). Needs a build
# (build/) and python3 with numpy; no PyTorch, no tokenizers.
#
#   tools/train_demo.sh [STEPS] [OUT]
#
# OUT (kept; default a temporary directory, removed) receives the
# checkpoints, the schedule and log.json; STEPS defaults to 300.
#
# docs/training.md ("End to end: training from text") and the README show
# its output.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
steps=${1:-300}
if [ $# -ge 2 ]; then
    out=$2
    mkdir -p "$out"
else
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi
data="$here/data/genesis"

python3 "$here/tools/make_checkpoint.py" --family llama --out "$out/init" --seed 0 \
    --config hidden=128 heads=4 kv_heads=4 layers=4 ffn=352 vocab=512

"$here/build/tpcc" "$here/plans/llama-sp.plan" --hf-config "$out/init/config.json" \
    -D seq=128 -D batch=4 -D tp=2 --train -o "$out/train.sched"
"$here/build/tprun" -n 2 "$out/train.sched" --weights "$out/init" --data "$data/genesis.train.npy" --steps "$steps" \
    --epochs 5 --shuffle-seed 0 --lr 3e-3 --warmup 20 --eval-data "$data/genesis.val.npy" --eval-every 25 \
    --log-json "$out/log.json" \
    --save "$out/trained"

python3 - "$out/log.json" "$here/docs/train_loss.svg" <<'EOF'
import json, math, sys
steps = json.load(open(sys.argv[1]))["steps"]
loss = [s["loss"] for s in steps]
evals = [(i, s["eval_loss"]) for i, s in enumerate(steps) if "eval_loss" in s]
n, top = len(loss), max(loss)
w, h, m = 640, 320, 48
def xy(i, v):
    return m + (w - 2 * m) * i / max(1, n - 1), h - m - (h - 2 * m) * v / top
def path(points):
    return " ".join(("M" if k == 0 else "L") + "%.1f,%.1f" % xy(i, v) for k, (i, v) in enumerate(points))
ticks = "".join('<text x="%d" y="%.1f" text-anchor="end">%.1f</text>' % (m - 6, xy(0, v)[1] + 4, v)
                for v in (0, top / 2, top))
tps = sum(s["seconds"] for s in steps[1:]) / max(1, n - 1)
print("steps %d, loss %.3f -> %.3f, validation %.3f -> %.3f (perplexity %.1f), %.1f ms per step after the first"
      % (n, loss[0], loss[-1], evals[0][1], evals[-1][1], math.exp(evals[-1][1]), tps * 1e3))
with open(sys.argv[2], "w") as f:
    f.write('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
            'font-size="12">\n<rect width="100%%" height="100%%" fill="white"/>\n' % (w, h))
    f.write('<path d="M%d,%d L%d,%d L%d,%d" fill="none" stroke="black"/>\n' % (m, m, m, h - m, w - m, h - m))
    f.write(ticks + "\n")
    f.write('<text x="%d" y="%d" text-anchor="middle">step (1 to %d)</text>\n' % (w // 2, h - 12, n))
    f.write('<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">loss</text>\n' % (h // 2, h // 2))
    f.write('<path d="%s" fill="none" stroke="#1f77b4" stroke-width="1.5"/>\n' % path(enumerate(loss)))
    f.write('<path d="%s" fill="none" stroke="#d62728" stroke-width="2"/>\n' % path(evals))
    f.write('<text x="%d" y="%d" fill="#1f77b4">training</text>\n' % (w - m - 120, m + 4))
    f.write('<text x="%d" y="%d" fill="#d62728">validation</text>\n</svg>\n' % (w - m - 120, m + 20))
EOF
ls "$out/trained"
