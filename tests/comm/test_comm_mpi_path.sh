#!/usr/bin/env bash
# test_comm_mpi_path.sh: `mpirun ... cohort ...` with a bare `cohort` found on PATH, run from
# another directory, finds its MPI plug-in (in the build tree, through a symlink, and after
# `cmake --install` into a prefix, also for a program of the user's on the installed shared
# libcohort); a lone copy without plug-ins names the directories it tried, a broken plug-in the
# loader's reason.
. "$(dirname "$0")/comm_lib.sh"
command -v mpirun >/dev/null && [ -f "$build/libcohort_mpi.so" ] || {
    echo "SKIP mpi: mpirun or libcohort_mpi.so missing"
    exit 77
}
# waiting ranks yield the cpu (mpirun passes OMPI_MCA_* on): more ranks than cores, beside
# another test (ctest -j2), busy-polled a third more cpu time
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" COHORT_COMM_TIMEOUT=60
unset COHORT_MPI_PLUGIN COHORT_COMM
small=(bench comm --min-bytes 4K --max-bytes 8K --iters 2 --warmup 1)
elsewhere=$(mktemp -d)
trap 'rm -rf "$comm_tmp" "$elsewhere"' EXIT

# bench_on WHAT PATH-DIR: 2 ranks of a bare `cohort` found in PATH-DIR, started from elsewhere.
bench_on() {
    local out
    out=$(cd "$elsewhere" && PATH="$2:$PATH" timeout 120 mpirun --allow-run-as-root -np 2 \
        cohort "${small[@]}" 2>&1)
    if [ $? -eq 0 ] && grep -q "2 ranks, transport mpi" <<<"$out" && grep -q "^ *8192 " <<<"$out"; then
        echo "ok   $1"
    else
        echo "FAIL $1"
        head -5 <<<"$out"
        fails=$((fails + 1))
    fi
}

bench_on "bare cohort on PATH: the build tree" "$build"
mkdir -p "$elsewhere/link"
ln -s "$cohort" "$elsewhere/link/cohort"
bench_on "bare cohort on PATH: a symlink to the build's program" "$elsewhere/link"

# A copy without plug-ins beside it: refused, naming where it looked and what to set.
mkdir -p "$elsewhere/alone"
cp "$cohort" "$elsewhere/alone/cohort"
out=$(cd "$elsewhere" && PATH="$elsewhere/alone:$PATH" timeout 120 mpirun --allow-run-as-root \
    -np 1 cohort "${small[@]}" 2>&1)
if [ $? -ne 0 ] && grep -q "no 'libcohort_mpi.so' in '$elsewhere/alone'" <<<"$out" &&
    grep -q "set COHORT_MPI_PLUGIN" <<<"$out"; then
    echo "ok   a lone copy names the directories it tried and COHORT_MPI_PLUGIN"
else
    echo "FAIL a lone copy's error: $(head -3 <<<"$out")"
    fails=$((fails + 1))
fi

# A plug-in that is there but does not load: its path and the loader's reason.
echo "not a library" >"$elsewhere/alone/libcohort_mpi.so"
out=$(cd "$elsewhere" && PATH="$elsewhere/alone:$PATH" timeout 120 mpirun --allow-run-as-root \
    -np 1 cohort "${small[@]}" 2>&1)
if [ $? -ne 0 ] && grep -q "'$elsewhere/alone/libcohort_mpi.so' exists but did not load: .*" <<<"$out"; then
    echo "ok   a broken plug-in is named with the loader's reason"
else
    echo "FAIL a broken plug-in's error: $(head -3 <<<"$out")"
    fails=$((fails + 1))
fi

# The install layout: PREFIX/bin/cohort finds PREFIX/lib*/cohort/libcohort_mpi.so.
prefix="$elsewhere/prefix"
if cmake --install "$build" --prefix "$prefix" >"$comm_tmp/install.log" 2>&1; then
    for f in bin/cohort include/cohort/comm.h; do
        [ -e "$prefix/$f" ] || { echo "FAIL install: no $f"; fails=$((fails + 1)); }
    done
    for f in libcohort.so libcohort.a cohort/libcohort_mpi.so; do
        ls "$prefix"/lib*/$f >/dev/null 2>&1 || { echo "FAIL install: no lib/$f"; fails=$((fails + 1)); }
    done
    if [ -f "$build/libcohort_mpich.so" ] && ! ls "$prefix"/lib*/cohort/libcohort_mpich.so >/dev/null 2>&1; then
        echo "FAIL install: no lib/cohort/libcohort_mpich.so"
        fails=$((fails + 1))
    fi
    if (cd "$elsewhere" && PATH="$prefix/bin:$PATH" cohort --help >/dev/null 2>&1); then
        echo "ok   installed cohort --help"
    else
        echo "FAIL installed cohort --help"
        fails=$((fails + 1))
    fi
    bench_on "bare cohort on PATH: the install prefix" "$prefix/bin"
    # a program of the user's, built on the installed headers and shared libcohort, finds the
    # plug-ins from the library (PREFIX/lib/cohort), wherever the program lies
    libdir=$(dirname "$(ls "$prefix"/lib*/libcohort.so | head -1)")
    cat >"$elsewhere/user.c" <<'C'
#include <stdio.h>
#include "cohort/comm.h"
int main(void)
{
    coh_comm *c;
    if (coh_comm_create(COH_COMM_MPI, &c) != COH_OK) {
        fprintf(stderr, "user: %s\n", coh_last_error());
        return 1;
    }
    printf("user rank %d of %d (%s)\n", coh_comm_rank(c), coh_comm_size(c), coh_comm_transport(c));
    coh_comm_destroy(c);
    return 0;
}
C
    san=() # a sanitized libcohort needs its runtime linked into the program
    grep -qs '^COHORT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" && san=(-fsanitize=address,undefined)
    if ${CC:-cc} "${san[@]}" -I"$prefix/include" "$elsewhere/user.c" -L"$libdir" -lcohort \
        -Wl,-rpath,"$libdir" -o "$elsewhere/user" 2>"$comm_tmp/cc.log"; then
        out=$(cd / && timeout 120 mpirun --allow-run-as-root -np 2 "$elsewhere/user" 2>&1)
        if [ "$(grep -c "user rank [01] of 2 (mpi)" <<<"$out")" -eq 2 ]; then
            echo "ok   a program on the installed libcohort.so loads the installed plug-in"
        else
            echo "FAIL a program on the installed libcohort.so: $(head -3 <<<"$out")"
            fails=$((fails + 1))
        fi
    else
        echo "FAIL compiling against the installed headers: $(head -5 "$comm_tmp/cc.log")"
        fails=$((fails + 1))
    fi
else
    echo "FAIL cmake --install: $(tail -3 "$comm_tmp/install.log")"
    fails=$((fails + 1))
fi
finish
