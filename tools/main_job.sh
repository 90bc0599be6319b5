#!/usr/bin/env bash
# The main job: compile the shipped tiny Llama plan (sequence parallel,
# vocab-parallel loss) for 2 ranks and for 1, run both with tprun on the
# same seeded weights and tokens, and check that the 2 ranks' logits are the
# one rank's. Prints what was compiled, the losses and the agreement; the
# schedules and logits stay in BUILD/main-job/.
#
#   tools/main_job.sh [BUILD]      # BUILD defaults to build (tools/setup.sh's)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
plan=plans/llama-tiny.plan
out=$build/main-job
mkdir -p "$out"

"$build/tpcc" "$plan" -D tp=1 -o "$out/llama-tiny-tp1.sched"
"$build/tpcc" "$plan" -o "$out/llama-tiny-tp2.sched"

# tprun's report of a run; on a failure, all of it
run() {
    local report
    if ! report=$("$build/tprun" "$@" 2>&1); then
        printf '%s\n' "$report" >&2
        echo "main job: failed: tprun $*" >&2
        exit 1
    fi
    printf '%s\n' "$report"
}
one=$(run "$out/llama-tiny-tp1.sched" --out "$out/logits-tp1.npy")
two=$(run -n 2 "$out/llama-tiny-tp2.sched" --out "$out/logits-tp2.npy" \
          --compare "$out/logits-tp1.npy")

# a value of the schedule's configuration (its "config" object is one line)
config() { sed -n "s/^ *\"config\": {.*\"$1\": \([^,}]*\).*/\1/p" "$out/llama-tiny-tp2.sched"; }
# a field of tprun's report: the line's words after its label
field() { sed -n "s/^  $1  *//p"; }
agreement=$(field agreement <<<"$two")
difference=$(sed -n 's/.*| = \([^ ]*\) at .*/\1/p' <<<"$agreement")
tolerance=$(sed -n 's/.*(tolerance \([^)]*\)).*/\1/p' <<<"$agreement")
verdict=${agreement##*: }

echo "compiled  $plan (sequence parallel, vocab-parallel loss) for 2 ranks (tp $(config tp), dp 1) and for 1:"
echo "          a Llama of $(config layers) layers, hidden $(config hidden), $(config heads) heads" \
     "($(config kv_heads) kv), ffn $(config ffn), vocab $(config vocab); batch $(config batch) x seq $(config seq)"
echo "ran       tprun -n 2 and tprun on the same seeded weights and tokens:" \
     "$(sed -n 's/^tprun: .*(2 ranks, \(.*\))$/\1/p' <<<"$two")"
# the loss's value: its note (the labels are the input ids) said once below
loss() { field loss <<<"$1" | sed 's/ .*//'; }
echo "loss      $(loss "$two") on 2 ranks, $(loss "$one") on 1 rank (next-token loss on the input ids)"
echo "logits    $(field logits <<<"$two"): max |2 ranks - 1 rank| = $difference, tolerance $tolerance: $verdict"
