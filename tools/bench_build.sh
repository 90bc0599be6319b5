# Sourced by the benchmarks: bench_build NAME TARGET... builds the targets in
# build-bench/, a Release build of its own (timings must not depend on how
# build/ is configured; no GoogleTest, so a fresh configure is fast).
# Configured every time (a fraction of a second, and a build-bench/ made
# before a target existed learns of it); the build is incremental, so a
# benchmark never times a stale binary. Output goes to a log, shown on
# failure, so stdout stays the results. Sets build_dir.
bench_build() {
    local name="$1"
    shift
    build_dir=build-bench
    mkdir -p "$build_dir"
    local log="$build_dir/$name-build.log"
    if ! cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DTPCC_TESTS=OFF >"$log" 2>&1; then
        cat "$log" >&2
        echo "$name: cmake configure failed" >&2
        exit 1
    fi
    if ! cmake --build "$build_dir" -j2 --target "$@" >"$log" 2>&1; then
        cat "$log" >&2
        echo "$name: build failed" >&2
        exit 1
    fi
}
