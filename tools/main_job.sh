#!/usr/bin/env bash
# The main job: compile the shipped tiny Llama plan (sequence parallel,
# loss parallel) for 2 ranks, run it with tprun on seeded weights, and check
# its logits against a one-rank run of the same model.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/main-job
mkdir -p "$out"

build/tpcc plans/llama-tiny.plan -o "$out/llama-tiny-tp1.sched" -D tp=1
build/tpcc plans/llama-tiny.plan -o "$out/llama-tiny-tp2.sched"

# the reference: the same seeded weights and tokens on one rank
build/tprun -q "$out/llama-tiny-tp1.sched" --labels tokens --out "$out/logits-tp1.npy"
build/tprun -n 2 "$out/llama-tiny-tp2.sched" --labels tokens --out "$out/logits-tp2.npy" \
    --compare "$out/logits-tp1.npy"
