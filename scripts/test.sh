#!/usr/bin/env bash
# test.sh: builds cohort three ways and runs every test: a release build with -Werror, an
# ASan+UBSan build of the whole suite, and a short libFuzzer run of every fuzz target.
# COHORT_FUZZ_SECONDS (default 15) sets the time per fuzzer; 0 skips the fuzz runs. Each target also
# replays its corpus as a test in both suites, so a short run here adds coverage, not regression checks.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc 2>/dev/null || echo 2)
fuzz_seconds=${COHORT_FUZZ_SECONDS:-15}

scripts/setup.sh || exit 1

passed=0
failed=0
status=0
elapsed() { printf '%dm%02ds' $((SECONDS / 60)) $((SECONDS % 60)); } # since the script started

# run_suite NAME BUILD_DIR [CMAKE ARGS...]: configure, build and ctest one configuration.
run_suite() {
    local name=$1 dir=$2
    shift 2
    echo "=== $name: configure and build in $dir (at $(elapsed))"
    if ! cmake -S "$root" -B "$dir" -DCOHORT_WERROR=ON "$@" >"$dir.configure.log" 2>&1; then
        cat "$dir.configure.log"
        echo "=== $name: configure failed"
        status=1
        return
    fi
    if ! cmake --build "$dir" -j"$jobs" >"$dir.build.log" 2>&1; then
        grep -E "error|warning" "$dir.build.log" | head -50
        echo "=== $name: build failed"
        status=1
        return
    fi
    echo "=== $name: tests (at $(elapsed))"
    (cd "$dir" && ctest --output-on-failure -j"$jobs") | tee "$dir.ctest.log"
    local line
    line=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$dir.ctest.log" | tail -1)
    if [ -z "$line" ]; then
        echo "=== $name: ctest did not finish"
        status=1
        return
    fi
    local total nfail
    total=$(echo "$line" | sed -E 's/.*out of ([0-9]+).*/\1/')
    nfail=$(echo "$line" | sed -E 's/.* ([0-9]+) tests failed.*/\1/')
    passed=$((passed + total - nfail))
    failed=$((failed + nfail))
    [ "$nfail" -eq 0 ] || status=1
    # A skipped test is neither passed nor failed: it is named, never counted as passing.
    local skipped
    skipped=$(grep -cE "\*\*\*Skipped|Not Run" "$dir.ctest.log" || true)
    if [ "$skipped" -gt 0 ]; then
        passed=$((passed - skipped))
        echo "=== $name: $skipped test(s) skipped"
    fi
}

mkdir -p build
run_suite release build/test-release -DCMAKE_BUILD_TYPE=Release
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_suite sanitizers build/test-asan -DCMAKE_BUILD_TYPE=Debug -DCOHORT_SANITIZE=ON

# ---- comm: ThreadSanitizer run of the shared-memory transport, ranks as threads, and of the
# thread transport (strategy dp's devices) (~20 s) ----
echo "=== tsan: comm shared-memory and thread transports (test_comm_threads," \
     "test_comm_thread_group) (at $(elapsed))"
if cmake -S "$root" -B build/test-tsan -DCOHORT_TSAN=ON -DCOHORT_WERROR=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >build/test-tsan.configure.log 2>&1 &&
   cmake --build build/test-tsan -j"$jobs" --target test_comm_threads test_comm_thread_group \
       >build/test-tsan.build.log 2>&1 &&
   build/test-tsan/test_comm_threads >build/test-tsan.log 2>&1 &&
   build/test-tsan/test_comm_thread_group >>build/test-tsan.log 2>&1; then
    passed=$((passed + 1))
    tail -1 build/test-tsan.log
else
    failed=$((failed + 1))
    status=1
    tail -40 build/test-tsan.configure.log build/test-tsan.build.log build/test-tsan.log 2>/dev/null
    echo "=== tsan: test_comm_threads or test_comm_thread_group FAILED"
fi
# ---- end comm ----

if [ "$fuzz_seconds" -gt 0 ]; then
    echo "=== fuzz: build with clang and libFuzzer (at $(elapsed))"
    # only the fuzzers: the suites above built and ran the rest
    fuzz_targets=$(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//')
    if CC=clang cmake -S "$root" -B build/test-fuzz -DCOHORT_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug \
            >build/test-fuzz.configure.log 2>&1 &&
       cmake --build build/test-fuzz -j"$jobs" --target $fuzz_targets \
           >build/test-fuzz.build.log 2>&1; then
        # One fuzzer per core at a time; each writes its verdict to build/test-fuzz/<name>.result.
        run_fuzzer() {
            local f=$1 name=${1##*/fuzz_} work
            work=$(mktemp -d)
            cp -r "tests/fuzz/corpus/$name/." "$work/"
            if "$f" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 \
                    -artifact_prefix="build/test-fuzz/$name-" "$work" >"build/test-fuzz/$name.log" 2>&1; then
                echo ok >"build/test-fuzz/$name.result"
            else
                echo failed >"build/test-fuzz/$name.result"
            fi
            rm -rf "$work"
        }
        export -f run_fuzzer
        export fuzz_seconds
        rm -f build/test-fuzz/*.result
        fuzzers=$(find build/test-fuzz -maxdepth 1 -name 'fuzz_*' -type f -executable | sort)
        echo "=== fuzz: $(echo "$fuzzers" | wc -w) targets, ${fuzz_seconds}s each, $jobs at a time"
        echo "$fuzzers" | xargs -P "$jobs" -I{} bash -c 'run_fuzzer {}'
        for f in $fuzzers; do
            name=${f##*/fuzz_}
            if [ "$(cat "build/test-fuzz/$name.result" 2>/dev/null)" = ok ]; then
                passed=$((passed + 1))
                echo "=== fuzz: $name: $(tail -1 "build/test-fuzz/$name.log")"
            else
                failed=$((failed + 1))
                status=1
                tail -40 "build/test-fuzz/$name.log"
                echo "=== fuzz: $name FAILED (reproducer in build/test-fuzz/$name-*)"
            fi
        done
    else
        tail -30 build/test-fuzz.configure.log build/test-fuzz.build.log
        echo "=== fuzz: build failed"
        failed=$((failed + 1))
        status=1
    fi
fi

echo "$passed passed, $failed failed (in $(elapsed))"
exit $status
