#!/bin/sh
# Install the build into a temporary prefix and use the installed tools as
# a user would, from another directory: every shipped plan checks, a plan
# of one's own finds the installed models by file name (or through
# TPCC_MODEL_PATH), a schedule compiles and runs, the man pages and docs
# are there and no test is, and a CUDA build's backend module loads.
# Usage: test_install.sh BUILD_DIR
set -eu
build=$1
tmp=$(mktemp -d /tmp/tpcc-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_install: $*" >&2; exit 1; }

P=$tmp/prefix
cmake --install "$build" --prefix "$P" >"$tmp/install.log" || { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }
for f in bin/tpcc bin/tprun share/tpcc/models/llama.model share/tpcc/plans/llama-sp.plan \
         share/man/man1/tpcc.1 share/man/man1/tprun.1 share/doc/tpcc/README.md \
         share/doc/tpcc/docs/architecture.md share/doc/tpcc/docs/schedule.md \
         share/doc/tpcc/docs/checks.md share/doc/tpcc/docs/cli.md; do
    test -s "$P/$f" || fail "$f is not installed"
done
test -x "$P/bin/tpcc" && test -x "$P/bin/tprun" || fail "the binaries are not executable"
head -1 "$P/share/man/man1/tpcc.1" | grep -q '^\.TH TPCC 1' || fail "tpcc.1 is no man page"
head -1 "$P/share/man/man1/tprun.1" | grep -q '^\.TH TPRUN 1' || fail "tprun.1 is no man page"
if find "$P" -name '*test*' | grep -q .; then fail "tests were installed: $(find "$P" -name '*test*')"; fi
nplans=$(ls "$P"/share/tpcc/plans/*.plan | wc -l)
test "$nplans" -ge 10 || fail "only $nplans plans installed"

mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
"$P/bin/tpcc" --version | grep -q '^tpcc ' || fail "tpcc --version"
"$P/bin/tpcc" --check "$P/share/tpcc/plans/llama-sp.plan" || fail "the installed llama-sp.plan does not check"
for plan in "$P"/share/tpcc/plans/*.plan "$P"/share/tpcc/plans/hf/*.plan; do
    "$P/bin/tpcc" --check "$plan" 2>"$tmp/check.log" || { cat "$tmp/check.log" >&2; fail "$plan does not check"; }
done

# --tp-plan auto reads the installed plans/hf/, not the source tree's
src=$(cd "$(dirname "$0")/../.." && pwd)
"$P/bin/tpcc" --check --tp-plan auto --hf-config "$src/tests/fixtures/hf/llama2-gqa/config.json" \
    --diagnostics-format=json >auto.json || fail "--tp-plan auto with the installed plans"
grep -q "$P/share/tpcc/plans/hf/llama.plan" auto.json || { cat auto.json >&2; fail "--tp-plan auto did not read the installed plan"; }

# a plan of one's own naming a shipped model by its file name
sed 's|"../models/llama.model"|"llama.model"|' "$P/share/tpcc/plans/llama-tiny.plan" >mine.plan
grep -q '^model "llama.model"' mine.plan || fail "could not write mine.plan"
"$P/bin/tpcc" --check mine.plan || fail "mine.plan does not find the installed llama.model"
# ... or a model of one's own through TPCC_MODEL_PATH
mkdir models-of-mine
cp "$P/share/tpcc/models/llama.model" models-of-mine/my-llama.model
sed 's|"../models/llama.model"|"my-llama.model"|' "$P/share/tpcc/plans/llama-tiny.plan" >custom.plan
if "$P/bin/tpcc" --check custom.plan 2>/dev/null; then fail "custom.plan found a model it should not"; fi
TPCC_MODEL_PATH="/nonexistent:$PWD/models-of-mine" "$P/bin/tpcc" --check custom.plan ||
    fail "TPCC_MODEL_PATH is not searched"

# compile and run with the installed tools
"$P/bin/tpcc" "$P/share/tpcc/plans/llama-tiny.plan" -D tp=1 -o tiny.sched || fail "compiling llama-tiny"
"$P/bin/tprun" --backend cpu --labels tokens tiny.sched >run.log 2>&1 || { cat run.log >&2; fail "tprun tiny.sched"; }
grep -q 'loss' run.log || { cat run.log >&2; fail "tprun printed no loss"; }
# a CUDA build installs its backend module where the installed tprun finds
# it: --backend cuda gets as far as the CUDA runtime (no GPU here, or none
# visible), not "missing" or "cannot load"
if [ -f "$build/tprun_cuda.so" ]; then
    test -n "$(find "$P" -name tprun_cuda.so)" || fail "tprun_cuda.so is not installed"
    if CUDA_VISIBLE_DEVICES= "$P/bin/tprun" --backend cuda --labels tokens tiny.sched >cuda.log 2>&1; then
        fail "--backend cuda ran with no GPU visible"
    fi
    grep -q 'no CUDA device: ' cuda.log && ! grep -q 'tprun_cuda.so' cuda.log ||
        { cat cuda.log >&2; fail "the installed tprun does not load its CUDA backend"; }
fi
# -o never writes over an installed plan
cp "$P/share/tpcc/plans/llama-tiny.plan" before.plan
if "$P/bin/tpcc" "$P/share/tpcc/plans/llama-tiny.plan" -o "$P/share/tpcc/plans/llama-tiny.plan" 2>/dev/null; then
    fail "-o wrote over the plan"
fi
cmp -s before.plan "$P/share/tpcc/plans/llama-tiny.plan" || fail "the installed plan changed"
echo "test_install: ok ($nplans plans)"
