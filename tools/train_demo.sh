#!/bin/sh
# A training run end to end on a small text corpus, byte-level (vocabulary
# 256): a random Llama checkpoint (tools/make_checkpoint.py, numpy only),
# the text as an llm.c token file, tpcc --train, tprun training with
# sequence parallelism over 2 ranks, a Hugging Face checkpoint saved, and
# the loss curve drawn (docs/train_loss.svg). Needs a build (build/) and
# python3 with numpy; no PyTorch.
#
#   tools/train_demo.sh [TEXT] [STEPS] [OUT]
#
# OUT (kept; default a temporary directory, removed) receives the
# checkpoints, the token file, the schedule and log.json.
# TEXT is a file or a directory whose files (not links) are read in name
# order; default: /usr/share/common-licenses (about 240 KB of English
# licence texts, on every Debian system), 300 steps.
#
# docs/training.md ("End to end") and the README show its output.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
text=${1:-/usr/share/common-licenses}
steps=${2:-300}
if [ $# -ge 3 ]; then
    out=$3
    mkdir -p "$out"
else
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi

python3 "$here/tools/make_checkpoint.py" --family llama --out "$out/init" --seed 0 \
    --config hidden=128 heads=4 kv_heads=4 layers=4 ffn=352 vocab=256
# every byte a token, as llm.c's write_datafile writes them (magic 20240520, version 1, uint16)
python3 - "$text" "$out/text.bin" <<'EOF'
import os, sys
import numpy as np
src = sys.argv[1]
files = [src] if os.path.isfile(src) else [os.path.join(src, n) for n in sorted(os.listdir(src))
                                           if os.path.isfile(os.path.join(src, n)) and not os.path.islink(os.path.join(src, n))]
data = np.frombuffer(b"".join(open(f, "rb").read() for f in files), dtype=np.uint8).astype(np.uint16)
header = np.zeros(256, dtype=np.int32)
header[:3] = (20240520, 1, len(data))
with open(sys.argv[2], "wb") as f:
    f.write(header.tobytes())
    f.write(data.tobytes())
EOF

"$here/build/tpcc" "$here/plans/llama-sp.plan" --hf-config "$out/init/config.json" \
    -D seq=128 -D batch=4 -D tp=2 --train -o "$out/train.sched"
"$here/build/tprun" -n 2 "$out/train.sched" --weights "$out/init" --data "$out/text.bin" --steps "$steps" \
    --lr 3e-3 --warmup 20 --log-json "$out/log.json" --save "$out/trained"

python3 - "$out/log.json" "$here/docs/train_loss.svg" <<'EOF'
import json, sys
steps = json.load(open(sys.argv[1]))["steps"]
loss = [s["loss"] for s in steps]
n, top = len(loss), max(loss)
w, h, m = 640, 320, 48
def xy(i, v):
    return m + (w - 2 * m) * i / max(1, n - 1), h - m - (h - 2 * m) * v / top
path = " ".join(("M" if i == 0 else "L") + "%.1f,%.1f" % xy(i, v) for i, v in enumerate(loss))
ticks = "".join('<text x="%d" y="%.1f" text-anchor="end">%.1f</text>' % (m - 6, xy(0, v)[1] + 4, v)
                for v in (0, top / 2, top))
tps = sum(s["seconds"] for s in steps[1:]) / max(1, n - 1)
print("steps %d, loss %.3f -> %.3f, %.1f ms per step after the first" % (n, loss[0], loss[-1], tps * 1e3))
with open(sys.argv[2], "w") as f:
    f.write('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
            'font-size="12">\n<rect width="100%%" height="100%%" fill="white"/>\n' % (w, h))
    f.write('<path d="M%d,%d L%d,%d L%d,%d" fill="none" stroke="black"/>\n' % (m, m, m, h - m, w - m, h - m))
    f.write(ticks + "\n")
    f.write('<text x="%d" y="%d" text-anchor="middle">step (1 to %d)</text>\n' % (w // 2, h - 12, n))
    f.write('<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">loss</text>\n' % (h // 2, h // 2))
    f.write('<path d="%s" fill="none" stroke="#1f77b4" stroke-width="1.5"/>\n</svg>\n' % path)
EOF
ls "$out/trained"
