#!/usr/bin/env bash
# The libFuzzer harnesses (fuzz/fuzz_*.c, docs/fuzzing.md), built with clang
# into a build folder of their own and run against the committed corpora.
#
#   scripts/fuzz.sh build [BUILD]               configure and build every harness
#   scripts/fuzz.sh run HARNESS SECONDS [BUILD] one bounded run (CTest: fuzz_run_*)
#   scripts/fuzz.sh all SECONDS [BUILD]         build, then run each harness (make fuzz)
#
# BUILD defaults to build-fuzz/ in the source root. New inputs go to
# BUILD/corpus/HARNESS (fuzz/corpus/HARNESS is read, never written); a crash
# leaves its input in BUILD/artifacts/ and fails the run. Without clang and
# libFuzzer (Debian: clang-14 libclang-rt-14-dev) it exits 77: skipped.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}
jobs=${JOBS:-2}

# 77 unless clang links a libFuzzer program with ASan and UBSan.
need_toolchain() {
    local t
    t=$(mktemp -d)
    printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$t/f.c"
    if ! command -v clang >/dev/null 2>&1 || ! clang -fsanitize=fuzzer,address,undefined "$t/f.c" -o "$t/f" >/dev/null 2>&1; then
        rm -rf "$t"
        echo "fuzz: clang with libFuzzer not found (apt-get install clang-14 libclang-rt-14-dev); skipped"
        exit 77
    fi
    rm -rf "$t"
}

harnesses() {
    for f in "$root"/fuzz/fuzz_*.c; do basename "$f" .c; done
}

build() {
    local dir=$1
    need_toolchain
    mkdir -p "$dir"
    # one build at a time per folder (CTest runs tests in parallel)
    exec 9>"$dir/fuzz.lock"
    flock 9
    cmake -S "$root" -B "$dir" -DCMAKE_C_COMPILER=clang -DOAR_FUZZ=ON -DOAR_BUILD_TESTS=OFF -DOAR_BUILD_BENCH=OFF \
        -DCMAKE_BUILD_TYPE=Release >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
    # shellcheck disable=SC2046
    cmake --build "$dir" -j "$jobs" --target $(harnesses) 2>&1 | grep -E "error|Error|Built target fuzz_" || true
    for h in $(harnesses); do
        [ -x "$dir/$h" ] || { echo "fuzz: $dir/$h was not built"; exit 1; }
    done
    flock -u 9
}

run() {
    local h=$1 secs=$2 dir=$3
    need_toolchain
    [ -x "$dir/$h" ] || { echo "fuzz: $dir/$h is not built (scripts/fuzz.sh build $dir)"; exit 1; }
    mkdir -p "$dir/corpus/$h" "$dir/artifacts"
    local log="$dir/$h.log"
    # -rss_limit_mb (and the malloc limit it sets): a loader that allocates
    # what a header claims fails here; UBSan findings are crashes too
    if OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "$dir/$h" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$dir/artifacts/$h-" "$dir/corpus/$h" "$root/fuzz/corpus/$h" >"$log" 2>&1; then
        local execs
        execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
        echo "$h: $execs execs in ${secs}s, no crash (corpus $(ls "$dir/corpus/$h" | wc -l) new + $(ls "$root/fuzz/corpus/$h" | wc -l) seeds)"
    else
        tail -60 "$log"
        echo "$h: CRASH; input in $dir/artifacts/ (log: $log)"
        exit 1
    fi
}

case "$cmd" in
build) build "${2:-$root/build-fuzz}" ;;
run)
    [ $# -ge 3 ] || { echo "usage: $0 run HARNESS SECONDS [BUILD]"; exit 2; }
    run "$2" "$3" "${4:-$root/build-fuzz}"
    ;;
all)
    secs=${2:-30}
    dir=${3:-$root/build-fuzz}
    build "$dir"
    failed=0
    for h in $(harnesses); do (run "$h" "$secs" "$dir") || failed=1; done
    exit $failed
    ;;
*)
    echo "usage: $0 build [BUILD] | run HARNESS SECONDS [BUILD] | all SECONDS [BUILD]"
    exit 2
    ;;
esac
