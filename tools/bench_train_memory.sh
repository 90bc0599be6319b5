#!/usr/bin/env bash
# Benchmark (not a test): per-rank memory of a bf16 training step, from
# tpcc --report --train (which the emulated CUDA runs of
# EmulatedRun.*HoldsWhatTheReportSays match to the byte), for Llama-3-8B
# and Llama-3-70B shapes at tp 8 and dp 1, 2, 4, 8, without activation
# recomputation and with full recomputation, with the data-parallel
# state replicated (shard none) and sharded (ZeRO-1, shard optimizer;
# ZeRO-2, shard gradients; FSDP, shard parameters).
#
#   tools/bench_train_memory.sh [BUILD_DIR]      # BUILD_DIR defaults to build
#
# Prints one row per (model, shard, dp) in GiB: parameters, gradients,
# AdamW's moments, fp32 masters, activations (seq 8192, batch 1 per
# replica), workspace and total, beside ZeRO's model of the model state
# in mixed precision (Rajbhandari et al., Table 1: 2 + 2 + K/Nd bytes a
# parameter for ZeRO-1 with K = 12, 2 + (2 + K)/Nd for ZeRO-2,
# (4 + K)/Nd for ZeRO-3, 16 replicated). Takes seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
[ -x "$build/tpcc" ] || { echo "bench_train_memory: no $build/tpcc: build first" >&2; exit 2; }
work=$(mktemp -d /tmp/bench-train-memory-XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$root"

llama3_8b="vocab=128256 hidden=4096 layers=32 heads=32 kv_heads=8 ffn=14336"
llama3_70b="vocab=128256 hidden=8192 layers=80 heads=64 kv_heads=8 ffn=28672"

# plans/llama-2d.plan with the shard mode given
for shard in none optimizer gradients parameters; do
    sed "s/shard = \"optimizer\"/shard = \"$shard\"/; s|\"../models/|\"$root/models/|" plans/llama-2d.plan \
        > "$work/llama-2d-$shard.plan"
done

report() {   # model-sizes shard dp recompute: the JSON report
    local defs=()
    for kv in $1 seq=8192 batch=1 tp=8 dp=$3; do defs+=(-D "$kv"); done
    "$build/tpcc" "$work/llama-2d-$2.plan" "${defs[@]}" --train --recompute "$4" --dtype bf16 --report \
        --report-format=json 2>/dev/null
}

printf "per-rank training memory, bf16, tp 8, seq 8192 x batch 1 per replica (GiB)\n"
printf "%-11s %-9s %-9s %3s %8s %8s %8s %8s %8s %8s %8s %12s\n" model shard recompute dp params grads moments \
    masters activ work total "ZeRO model"
for model in 8b 70b; do
    sizes=$llama3_8b
    [ "$model" = 70b ] && sizes=$llama3_70b
    for shard in none optimizer gradients parameters; do
      for recompute in none full; do
        for dp in 1 2 4 8; do
            report "$sizes" "$shard" "$dp" "$recompute" | python3 -c '
import json, sys
r = json.load(sys.stdin)["training"]
model, shard, dp, recompute = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
G = float(1 << 30)
# the parameters of this rank (its tp slice), from the two fp32 moments: 1/dp of them when sharded
psi = r["optimizer_bytes"] / 8 * (dp if shard != "none" else 1)
k = 12 / (dp if shard != "none" else 1)         # fp32 masters and two moments
g = 2 / (dp if shard in ("gradients", "parameters") else 1)   # bf16 gradients
p = 2 / (dp if shard == "parameters" else 1)    # bf16 parameters
print("%-11s %-9s %-9s %3d %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %12.2f" % (
    "llama3-" + model, shard, recompute, dp, r["param_bytes"] / G, r["grad_bytes"] / G, r["optimizer_bytes"] / G,
    r.get("master_bytes", 0) / G, r["activation_bytes"] / G, r["workspace"]["bytes"] / G,
    r["total_bytes"] / G, (p + g + k) * psi / G))
' "$model" "$shard" "$dp" "$recompute"
        done
      done
    done
done
