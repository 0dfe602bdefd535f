#!/usr/bin/env bash
# test_comm_bench.sh: `cohort bench comm` on 2 and 3 ranks: one verified row per size for every
# op (#wrong 0, busbw = algbw x the nccl-tests factor), 32 MiB all-reduce and all-gather rows
# (the streaming copies), --json rows, and usage errors (exit 2, the bad value named).
. "$(dirname "$0")/comm_lib.sh"

check_rows() { # FILE N OP: every data row has #wrong 0 and busbw = algbw * factor
    check_rows_min "$1" "$2" "$3" 3
}
check_rows_min() { # FILE N OP MIN_ROWS
    awk -v n="$2" -v op="$3" -v min="$4" '
        /^#/ || NF == 0 { next }
        { rows++
          f = op == "allreduce" ? 2 * (n - 1) / n : (op ~ /allgather|reduce_scatter|alltoall/ ? (n - 1) / n : 1)
          if ($9 != 0 || $4 != op) bad++
          d = $8 - $7 * f  # both printed with 2 decimals
          if (d > 0.011 || d < -0.011) bad++ }
        END { exit !(rows >= min && bad == 0) }' "$1"
}

for n in 2 3; do
    for op in allreduce reduce broadcast allgather reduce_scatter alltoall; do
        for buffers in arena plain; do
            out="$comm_tmp/comm_bench.$n.$op.$buffers"
            if launch "$n" "$cohort" bench comm --op "$op" --buffers "$buffers" --min-bytes 4K \
                    --max-bytes 1M --step-factor 16 --iters 2 --warmup 1 --dtype bf16 >"$out" 2>"$out.err" &&
               check_rows "$out" "$n" "$op"; then
                echo "ok   bench $op $buffers on $n ranks"
            else
                echo "FAIL bench $op $buffers on $n ranks"
                cat "$out" "$out.err"
                fails=$((fails + 1))
            fi
            check_no_shm "bench $op on $n ranks"
        done
    done
done

# Results beyond 16 MiB take the streaming copies (arena all-reduce, plain all-gather).
for op in allreduce allgather; do
    for buffers in arena plain; do
        out="$comm_tmp/comm_bench.big.$op.$buffers"
        if launch 2 "$cohort" bench comm --op "$op" --buffers "$buffers" --min-bytes 32M \
                --max-bytes 32M --iters 1 --warmup 0 >"$out" 2>"$out.err" &&
           check_rows_min "$out" 2 "$op" 1; then
            echo "ok   bench $op $buffers on 2 ranks, 32 MiB"
        else
            echo "FAIL bench $op $buffers on 2 ranks, 32 MiB"
            cat "$out" "$out.err"
            fails=$((fails + 1))
        fi
    done
done

# Buffers the machine cannot hold fail at once, naming the size, on 1 and 2 ranks alike: the
# shared arena is sparse, so 2 ranks used to map 4 TiB and write into it until killed.
for n in 1 2; do
    out="$comm_tmp/comm_bench.huge.$n"
    new_job # launch's, under a timeout: the old behaviour ran until killed
    timeout 10 "$cohort" run --standalone --nproc-per-node "$n" --run-id "$job" --prefix '' -- \
        "$cohort" bench comm --min-bytes 1T --max-bytes 1T --iters 1 --warmup 0 >"$out" 2>&1
    rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] &&
        grep -q "cannot allocate 1099511627776-byte buffers in the arena" "$out"; then
        echo "ok   bench of 1 TiB on $n rank(s) refused"
    else
        echo "FAIL bench of 1 TiB on $n rank(s): exit $rc, not refused"; cat "$out"
        fails=$((fails + 1))
    fi
    check_no_shm "bench of 1 TiB on $n rank(s)"
done

json="$comm_tmp/comm_bench.json"
launch 2 "$cohort" bench comm --json --min-bytes 64K --max-bytes 64K --iters 2 >"$json" 2>"$json.err"
if [ "$(wc -l <"$json")" -eq 1 ] && grep -q '"op":"allreduce"' "$json" && grep -q '"wrong":0' "$json"; then
    echo "ok   bench --json"
else
    echo "FAIL bench --json"; cat "$json" "$json.err"; fails=$((fails + 1))
fi

# A count that does not divide by the ranks runs rounded down to whole blocks: the row gives the
# size that ran (nccl-tests' max of send and receive bytes), and algbw is of that size. 4 KiB of
# f32 on 3 ranks: 341 elements per rank, 4092 bytes for the blocked ops, 4096 for all-reduce.
for op in allreduce allgather reduce_scatter alltoall; do
    out="$comm_tmp/comm_bench.odd.$op"
    if launch 3 "$cohort" bench comm --json --op "$op" --min-bytes 4K --max-bytes 4K --iters 2 \
            --warmup 0 >"$out" 2>"$out.err" &&
       awk -v op="$op" '{
            match($0, /"size":[0-9]+/); size = substr($0, RSTART + 7, RLENGTH - 7) + 0
            match($0, /"count":[0-9]+/); count = substr($0, RSTART + 8, RLENGTH - 8) + 0
            match($0, /"time_us":[0-9.e+-]+/); us = substr($0, RSTART + 10, RLENGTH - 10) + 0
            match($0, /"algbw_gbs":[0-9.e+-]+/); bw = substr($0, RSTART + 12, RLENGTH - 12) + 0
            want = op == "allreduce" ? 4096 : 4092
            d = bw * us * 1e3 - want
            if (size != want || count != (op == "allreduce" ? 1024 : 341) ||
                d > want * 1e-9 || d < -want * 1e-9 || $0 !~ /"wrong":0/) exit 1
            rows++ }
            END { exit rows != 1 }' "$out"; then
        echo "ok   bench $op on 3 ranks prints the size that ran"
    else
        echo "FAIL bench $op on 3 ranks: not the size that ran (4092 bytes, 341 per rank)"
        cat "$out" "$out.err"
        fails=$((fails + 1))
    fi
done

usage() { # ARGS... : must exit 2 naming the bad value
    local want=$1
    shift
    local err rc
    if [ "$1" = disk ]; then err=$("$cohort" bench "$@" 2>&1 >/dev/null); else err=$("$cohort" bench comm "$@" 2>&1 >/dev/null); fi
    rc=$?
    if [ $rc -eq 2 ] && [[ $err == *"$want"* ]]; then
        echo "ok   usage error: $want"
    else
        echo "FAIL usage error $*: exit $rc, '$err'"
        fails=$((fails + 1))
    fi
}
usage "invalid --op 'gather'" --op gather
usage "invalid type 'f8'" --dtype f8
usage "invalid --buffers 'gpu'" --buffers gpu
# Numbers and sizes: one phrasing naming the option and the value; no trailing garbage, no
# empty value. usage_line LINE ARGS...: as usage, and stderr is exactly LINE.
usage_line() {
    local line=$1 err
    shift
    usage "$line" "$@"
    err=$("$cohort" bench comm "$@" 2>&1 >/dev/null)
    [ "$err" = "$line" ] || { echo "FAIL usage error $*: not exactly '$line': '$err'"; fails=$((fails + 1)); }
}
usage_line "cohort bench comm: error: invalid --iters '0': must be an integer from 1 to 1000000" --iters 0
usage_line "cohort bench comm: error: invalid --iters '3x': must be an integer from 1 to 1000000" --iters 3x
usage_line "cohort bench comm: error: invalid --iters '': must be an integer from 1 to 1000000" --iters ''
usage_line "cohort bench comm: error: invalid --warmup '-1': must be an integer from 0 to 1000000" --warmup -1
usage_line "cohort bench comm: error: invalid --warmup ' 1': must be an integer from 0 to 1000000" --warmup ' 1'
usage_line "cohort bench comm: error: invalid --step-factor '2x': must be a number above 1 and at most 1024" --step-factor 2x
usage_line "cohort bench comm: error: invalid --step-factor '2000': must be a number above 1 and at most 1024" --step-factor 2000
usage_line "cohort bench comm: error: invalid --step-factor '': must be a number above 1 and at most 1024" --step-factor ''
usage_line "cohort bench comm: error: invalid --step-factor '1': must be a number above 1 and at most 1024" --step-factor 1
usage_line "cohort bench comm: error: invalid --step-factor '0.5': must be a number above 1 and at most 1024" --step-factor 0.5
usage_line "cohort bench comm: error: unknown or incomplete option '--transport' (see --help)" --transport shm
usage_line "cohort bench comm: error: invalid --min-bytes '0': must be at least 1 byte" --min-bytes 0
usage "cohort bench comm: error: --max-bytes: invalid size '4XB': unknown unit" --max-bytes 4XB
usage "cohort bench comm: error: --min-bytes: invalid size '': no number" --min-bytes ''
usage "invalid sizes" --min-bytes 2M --max-bytes 1M
usage "unknown benchmark 'disk'" disk
finish
