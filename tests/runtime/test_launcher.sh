#!/usr/bin/env bash
# tprun -n and a job's end, as processes: the launcher passes every
# argument through untouched; a stopped rank ends the job within
# TPRUN_TIMEOUT with a message naming the rank and the collective; killing
# the launcher (SIGKILL) leaves no rank behind; SIGINT and SIGTERM give a
# non-zero exit and write no output.
#
#   test_launcher.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
set -m            # background jobs in their own process groups, SIGINT not ignored
build=$1 src=$2
tpcc=$build/tpcc tprun=$build/tprun
d=$(mktemp -d)
cleanup() { pkill -KILL -f "$d/" 2>/dev/null; rm -rf "$d"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$d/err" ] && sed 's/^/  stderr: /' "$d/err" >&2; exit 1; }
command -v mpiexec >/dev/null || fail "mpiexec not found: install MPICH (Debian: mpich; tools/setup.sh does)"

fixture=$src/tests/fixtures/train/llama
"$tpcc" "$src/plans/llama-sp.plan" --hf-config "$fixture/config.json" -D tp=2 -D seq=16 -D batch=2 \
    -D vocab_multiple=1 --train -o "$d/train.sched" || fail "tpcc --train"
"$tpcc" "$src/plans/llama-tiny.plan" -D tp=2 -o "$d/forward.sched" || fail "tpcc"
# an llm.c token file long enough for minutes of steps
python3 - "$d/tokens.bin" <<'PY' || fail "python3"
import struct, sys
n = 400000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *[0] * 253))
    f.write(struct.pack("<%dH" % n, *[(i * 37 + i // 16) % 128 for i in range(n)]))
PY

# the pids of the job's ranks (processes under MPI whose command line names $d)
ranks() {
    for e in /proc/[0-9]*/environ; do
        p=${e#/proc/}; p=${p%/environ}
        { tr '\0' '\n' <"$e"; } 2>/dev/null | grep -q '^PMI_RANK=' || continue
        { tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | grep -q "$d/train.sched" && echo "$p"
    done
}
rank_of() { { tr '\0' '\n' <"/proc/$1/environ"; } 2>/dev/null | sed -n 's/^PMI_RANK=//p'; }
wait_for_ranks() {
    for _ in $(seq 100); do [ "$(ranks | wc -l)" -ge 2 ] && return 0; sleep 0.1; done
    fail "the ranks did not start"
}
no_rank_left() {
    for _ in $(seq 50); do [ -z "$(ranks)" ] && return 0; sleep 0.2; done
    fail "$1: ranks left behind: $(ranks)"
}
train() {
    "$tprun" -n 2 "$d/train.sched" --backend cpu --weights "$fixture" --data "$d/tokens.bin" --steps 10000 -q \
        --log-json "$d/log.json" "$@" 2>"$d/err" &
    job=$!
    wait_for_ranks
}

# every argument reaches the ranks as given, those beginning with -n too
(cd "$d" && "$tprun" -n 2 forward.sched --labels tokens -q --out -nlogits.npy 2>"$d/err") || fail "tprun -n 2 --out -nlogits.npy"
[ -f "$d/-nlogits.npy" ] || fail "--out -nlogits.npy was dropped on the way to the ranks"

# a stopped rank: the others end the job within the timeout
TPRUN_TIMEOUT=2 train
for p in $(ranks); do [ "$(rank_of "$p")" = 1 ] && kill -STOP "$p"; done
start=$SECONDS
wait $job; rc=$?
[ $rc -ne 0 ] || fail "a stalled job exited 0"
(( SECONDS - start <= 30 )) || fail "a stalled job took $((SECONDS - start)) s to end with TPRUN_TIMEOUT=2"
grep -q "tprun: rank 0: collective [0-9]* (MPI_[A-Za-z_]* of [0-9]* elements) has not completed after [0-9]* s: another rank stalled or died (TPRUN_TIMEOUT=2); ending every rank" "$d/err" ||
    fail "no message naming the rank and the collective"
no_rank_left "after a stall"
[ ! -e "$d/log.json" ] || fail "a stalled job wrote --log-json"

# the launcher killed: its ranks follow it
train
kill -KILL $job
wait $job 2>/dev/null
no_rank_left "after SIGKILL of tprun -n"

# SIGINT and SIGTERM: a non-zero exit, nothing written
for sig in INT TERM; do
    train
    kill -$sig $job
    wait $job; rc=$?
    want=$(( 128 + $(kill -l $sig) ))
    [ $rc -eq $want ] || fail "SIG$sig: exit $rc, expected $want"
    grep -q "tprun: interrupted (SIG$sig): the job did not finish" "$d/err" || fail "SIG$sig: no message"
    no_rank_left "after SIG$sig"
    [ ! -e "$d/log.json" ] || fail "SIG$sig: --log-json was written"
done

# a timeout that is not a number of seconds
TPRUN_TIMEOUT=soon "$tprun" -n 2 "$d/forward.sched" -q 2>"$d/err"; rc=$?
[ $rc -ne 0 ] || fail "TPRUN_TIMEOUT=soon was accepted"
grep -q "TPRUN_TIMEOUT takes a positive number of seconds, not 'soon'" "$d/err" || fail "TPRUN_TIMEOUT=soon: no message"
# decimal, as every number tprun reads: strtod alone takes hex, strtoll a '+'
TPRUN_TIMEOUT=0x10 "$tprun" -n 2 "$d/forward.sched" -q 2>"$d/err" && fail "TPRUN_TIMEOUT=0x10 was accepted"
grep -q "TPRUN_TIMEOUT takes a positive number of seconds, not '0x10'" "$d/err" || fail "TPRUN_TIMEOUT=0x10: no message"
TPRUN_MPI_MAX_COUNT=+4 "$tprun" -n 2 "$d/forward.sched" -q 2>"$d/err" && fail "TPRUN_MPI_MAX_COUNT=+4 was accepted"
grep -q "TPRUN_MPI_MAX_COUNT takes a whole number of elements from 1 to 2147483647, not '+4'" "$d/err" ||
    fail "TPRUN_MPI_MAX_COUNT=+4: no message"
echo "ok"
