#!/usr/bin/env bash
# Every GPU measurement the docs record, in one call (not a test; needs an
# NVIDIA GPU, with torch and transformers for the peers): the sizes of
# docs/performance.md's tables, so that one run on a lent GPU refreshes
# them all.
#
#   tools/bench_gpu_all.sh
#
#   1. the forward of Llama-3-8B shapes with 8 layers (hidden 4096, 32
#      heads, 8 kv heads, ffn 14336, vocab 128256), seq 2048, bf16, tp 1,
#      against PyTorch eager and torch.compile (tools/bench_gpu.sh);
#   2. a training step of a 0.9B Llama (hidden 2048, 16 layers, 16 heads,
#      8 kv heads, ffn 5632, vocab 32000), seq 2048 x batch 4, bf16,
#      against PyTorch eager and torch.compile, with attention's forward
#      and backward against SDPA's flash backend and the optimizer against
#      the copy bandwidth (tools/bench_train_gpu.sh).
#
# TPCC and TPRUN: the binaries (default: tpcc and tprun on PATH, where a
# bundle for a GPU machine puts them, else build/'s).
set -euo pipefail
cd "$(dirname "$0")/.."
TPCC=${TPCC:-$(command -v tpcc || echo build/tpcc)}
TPRUN=${TPRUN:-$(command -v tprun || echo build/tprun)}
export TPCC TPRUN
echo "== forward: Llama-3-8B shapes, 8 layers, seq 2048, bf16, tp 1"
PLAN=plans/llama-megatron.plan TPS=1 DTYPES=bf16 \
    SIZES="-D vocab=128256 -D hidden=4096 -D layers=8 -D heads=32 -D kv_heads=8 -D ffn=14336 -D seq=2048 -D batch=1" \
    tools/bench_gpu.sh 10
echo
echo "== training: a 0.9B Llama, seq 2048 x batch 4, bf16"
CONFIG="hidden=2048 heads=16 kv_heads=8 layers=16 ffn=5632 vocab=32000" SEQ=2048 BATCH=4 DTYPE=bf16 \
    tools/bench_train_gpu.sh 12
