#!/usr/bin/env bash
# seeds.sh TPCC OUT: the real files each fuzz target starts from, in
# OUT/<target>/ (fuzz_<target>'s seed corpus, beside the committed one):
#   plan         the shipped plans and models, the bad plans, the test plans
#   schedule,run the shipped plans compiled by TPCC at tp 1, 2, 4 (forward, -O0,
#                --train, bf16), the families' plans on their transformers fixtures
#   safetensors  the fixtures' checkpoints, and one split into a sharded bundle
#   npy          the fixtures' tokens.npy and logits.npy, an llm.c token file
#   train        a two-step run's --save files, tprun_state.json and
#                optimizer.safetensors, after its token stream (.npy, .bin)
#   toml         the repository's pyproject.toml and the settings in docs/lint.md
set -euo pipefail
tpcc=$1 out=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$out"
mkdir -p "$out"/{plan,schedule,run,safetensors,npy,train,toml}

cp "$src/python/pyproject.toml" "$out/toml/python-pyproject.toml"
# the ```toml blocks of docs/lint.md
awk '/^```toml/ {n++; on = 1; next} /^```/ {on = 0} on {print > (out "/toml/lint-" n ".toml")}' out="$out" \
    "$src/docs/lint.md"

cp "$src"/plans/*.plan "$src"/plans/hf/*.plan "$src"/models/*.model "$src"/tests/bad/*.plan "$src"/tests/plans/*.plan \
    "$out/plan/"

# Small sizes: one layer, so an input runs in milliseconds.
compile() {    # NAME PLAN ARGS...
    local name=$1 plan=$2
    shift 2
    "$tpcc" "$src/$plan" -D layers=1 "$@" -o "$out/schedule/$name.sched" >/dev/null
}
for tp in 1 2; do
    compile llama-tiny-tp$tp plans/llama-tiny.plan -D tp=$tp
done
compile llama-tiny-tp4 plans/llama-tiny.plan -D tp=4 -D kv_heads=4
compile llama-tiny-O0 plans/llama-tiny.plan -O0
compile llama-tiny-train plans/llama-tiny.plan --train
compile llama-tiny-train-tp1 plans/llama-tiny.plan --train -D tp=1
compile llama-tiny-bf16 plans/llama-tiny.plan --dtype bf16
hf() {         # FIXTURE PLAN TP ARGS...
    local fixture=$1 plan=$2 tp=$3
    shift 3
    compile "$fixture-tp$tp${*//--/-}" "$plan" --hf-config "$src/tests/fixtures/hf/$fixture/config.json" -D tp="$tp" \
        -D seq=16 -D batch=2 -D vocab_multiple=1 "$@"
}
for tp in 1 2; do
    hf llama-yarn plans/llama-sp.plan $tp
    hf qwen2-gqa plans/qwen2-sp.plan $tp
    hf mistral-gqa plans/mistral-sp.plan $tp
    hf qwen3-bias-tied plans/qwen3-sp.plan $tp
    hf phi3-partial plans/phi3-sp.plan $tp
    hf gemma-gqa plans/gemma-sp.plan $tp
    hf gemma2-gqa plans/gemma2-sp.plan $tp
    hf gpt2-tied plans/gpt2-hf-sp.plan $tp
done
hf gpt2-untied plans/gpt2-hf-sp.plan 2 --train
cp "$out"/schedule/*.sched "$out/run/"

for f in mha gpt2-tied phi3-partial gemma2-gqa qwen3-bias-tied; do
    cp "$src/tests/fixtures/hf/$f/model.safetensors" "$out/safetensors/$f.safetensors"
done
python3 "$src/tests/fuzz/bundle.py" "$src/tests/fixtures/hf/mha/model.safetensors" "$out/safetensors/mha-sharded"

for f in mha gpt2-tied; do
    cp "$src/tests/fixtures/hf/$f/tokens.npy" "$out/npy/$f-tokens.npy"
    cp "$src/tests/fixtures/hf/$f/logits.npy" "$out/npy/$f-logits.npy"
done
cp "$src/tests/fixtures/train/llama/tokens.npy" "$out/npy/train-tokens.npy"
python3 - "$out/npy/gpt2.bin" <<'PY'
import struct, sys
header = [20240520, 1, 64] + [0] * 253     # llm.c's gpt-2 token file: magic, version, count
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *header) + struct.pack("<64H", *range(64)))
PY

# fuzz_train's schedule (ORDER fuzz_train.c); its weights' names and shapes
# from --grads-out, a checkpoint of them, two steps saved from it
tprun=$(dirname "$tpcc")/tprun t=$out/train-run
mkdir -p "$t/base"
"$tpcc" "$src/plans/llama-tiny.plan" -D tp=1 -D layers=1 -D hidden=8 -D heads=2 -D kv_heads=1 -D ffn=8 -D vocab=16 \
    -D seq=4 -D batch=1 --train -o "$t/train.sched" >/dev/null
python3 - "$t" <<'PY'
import struct, sys
ids = [(i * 5 + 3) % 16 for i in range(24)]
header = "{'descr': '<i4', 'fortran_order': False, 'shape': (24,), }"
header += " " * (-(len(header) + 11) % 64) + "\n"
with open(sys.argv[1] + "/tokens.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack("<24i", *ids))
with open(sys.argv[1] + "/tokens.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, 24, *[0] * 253) + struct.pack("<24H", *ids))
PY
"$tprun" "$t/train.sched" --data "$t/tokens.npy" --steps 1 -q --grads-out "$t/base/model.safetensors"
echo '{}' >"$t/base/config.json"
"$tprun" "$t/train.sched" --data "$t/tokens.npy" --weights "$t/base" --steps 2 -q --save "$t/ckpt"
for tokens in npy bin; do
    python3 - "$t/tokens.$tokens" "$t/ckpt/tprun_state.json" "$t/ckpt/optimizer.safetensors" \
        "$out/train/resume-$tokens" <<'PY'
import sys
parts = [open(p, "rb").read() for p in sys.argv[1:4]]
open(sys.argv[4], "wb").write(b"\n#tpcc-fuzz-file\n".join(parts))
PY
done
rm -rf "$t"
