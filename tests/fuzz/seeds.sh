#!/usr/bin/env bash
# seeds.sh TPCC OUT: the real files each fuzz target starts from, in
# OUT/<target>/ (fuzz_<target>'s seed corpus, beside the committed one):
#   plan         the shipped plans and models, the bad plans, the test plans
#   schedule,run the shipped plans compiled by TPCC at tp 1, 2, 4 (forward, -O0,
#                --train, bf16), the families' plans on their transformers fixtures
#   safetensors  the fixtures' checkpoints, and one split into a sharded bundle
#   npy          the fixtures' tokens.npy and logits.npy, an llm.c token file
set -euo pipefail
tpcc=$1 out=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$out"
mkdir -p "$out"/{plan,schedule,run,safetensors,npy}

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
