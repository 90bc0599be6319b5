#!/usr/bin/env bash
# tools/main_job.sh against this build: it succeeds and prints its five
# lines, every value filled in (a value main_job.sh fails to read from a
# schedule or from tprun's report leaves a gap these patterns refuse).
#   test_main_job.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
report=$("$src/tools/main_job.sh" "$build")
printf '%s\n' "$report"
num='[0-9][0-9.e+-]*'
expected=(
    "^compiled  plans/llama-tiny\.plan \(sequence parallel, vocab-parallel loss\) for 2 ranks \(tp 2, dp 1\) and for 1:$"
    "^          a Llama of 2 layers, hidden 64, 4 heads \(2 kv\), ffn 128, vocab 256; batch 2 x seq 16$"
    "^ran       tprun -n 2 and tprun on the same seeded weights and tokens: (cpu|cuda) backend"
    "^loss      $num on 2 ranks, $num on 1 rank \(next-token loss on the input ids\)$"
    "^logits    \[2, 16, 256\]: max \|2 ranks - 1 rank\| = $num, tolerance 0\.0001: ok$"
)
[ "$(printf '%s\n' "$report" | wc -l)" = "${#expected[@]}" ] ||
    { echo "FAIL: main_job.sh printed $(printf '%s\n' "$report" | wc -l) lines, not ${#expected[@]}"; exit 1; }
for i in "${!expected[@]}"; do
    line=$(printf '%s\n' "$report" | sed -n "$((i + 1))p")
    grep -Eq "${expected[$i]}" <<<"$line" || { echo "FAIL: line $((i + 1)) is not ${expected[$i]}"; exit 1; }
done
# the loss is the same on 2 ranks as on 1, within the logits' tolerance
read -r two one < <(sed -n 's/^loss  *\([^ ]*\) on 2 ranks, \([^ ]*\) on 1 rank .*$/\1 \2/p' <<<"$report")
awk -v a="$two" -v b="$one" 'BEGIN { d = a - b; exit !(d <= 1e-4 && -d <= 1e-4) }' ||
    { echo "FAIL: loss $two on 2 ranks, $one on 1"; exit 1; }
echo "main job: ok"
