#!/bin/sh
# Build the Debian package of this build with CPack, check its contents
# and Depends with dpkg-deb, and run the tpcc it holds. Usage:
# test_deb.sh BUILD_DIR
set -eu
build=$1
tmp=$(mktemp -d /tmp/tpcc-deb-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_deb: $*" >&2; exit 1; }

cpack --config "$build/CPackConfig.cmake" -G DEB -B "$tmp/out" >"$tmp/cpack.log" 2>&1 ||
    { cat "$tmp/cpack.log" >&2; fail "cpack -G DEB failed"; }
deb=$(ls "$tmp"/out/*.deb)
test -n "$deb" || fail "no .deb made"
dpkg-deb -c "$deb" >"$tmp/contents"
for f in ./usr/bin/tpcc ./usr/bin/tprun ./usr/share/tpcc/models/llama.model ./usr/share/tpcc/plans/llama-sp.plan \
         ./usr/share/man/man1/tpcc.1 ./usr/share/man/man1/tprun.1 ./usr/share/doc/tpcc/README.md \
         ./usr/share/doc/tpcc/docs/checks.md; do
    grep -q " $f\$" "$tmp/contents" || { cat "$tmp/contents" >&2; fail "$f is not in the package"; }
done
depends=$(dpkg-deb -f "$deb" Depends)
for lib in libjansson4 libmpich12 libopenblas0 mpich; do
    echo "$depends" | grep -q "$lib" || fail "Depends lacks $lib: $depends"
done
test "$(dpkg-deb -f "$deb" Package)" = tpcc || fail "the package is not called tpcc"
# the packaged tpcc checks the packaged plan
dpkg-deb -x "$deb" "$tmp/root"
cd "$tmp"
"$tmp/root/usr/bin/tpcc" --check "$tmp/root/usr/share/tpcc/plans/llama-sp.plan" || fail "the packaged plan does not check"
echo "test_deb: ok ($(basename "$deb"))"
