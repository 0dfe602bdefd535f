#!/usr/bin/env bash
# test_plan_planner_cli.sh: `cohort plan` from the outside: the search's JSON (ranked, accounted
# for, the top pick's launch line), --explain of one configuration, --trace as Perfetto events,
# `cohort bench gemm` writing a calibration file that plan reads back, and every refusal (bad
# device counts, no link between nodes, nothing fits with the estimator's remedies, a bad
# calibration file) with its exit code and message.
. "$(dirname "$0")/plan_cli_lib.sh" # expect, cal, fail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
inv=$COHORT_SOURCE_DIR/tests/plan/inventories

small=(--layers 4 --dim 128 --heads 4 --vocab 256 --seq 64)

# the search on a stated calibration: JSON ranked by step time, every configuration accounted
if "$COHORT" plan "${small[@]}" --global-batch 8 --devices 2 --calibration "$cal/measured.json" \
    --json --top 4 >"$tmp/s.json"; then
    "$COHORT_PYTHON" - "$tmp/s.json" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1]))
c = j["configurations"]
s = j["search"]
assert 1 <= len(c) <= 4, c
assert [x["step_s"] for x in c] == sorted(x["step_s"] for x in c)
assert s["considered"] == s["invalid"] + s["too_big"] + s["simulated"] + s["pruned"], s
for x in c:
    st = x["strategy"]
    assert st["dp"] * st["tp"] * st["pp"] == 2
    assert st["dp"] * st["micro_batch"] * st["microbatches"] == 8
    assert x["tokens_per_s"] > 0 and 0 < x["mfu"] < 1 and x["memory_bytes"] > 0
    assert x["reasons"]
top = c[0]
if top["runnable"]:
    assert top["command"].startswith("cohort run --nproc-per-node 2 --standalone cohort train"), top
    assert "--micro-batch %d" % top["strategy"]["micro_batch"] in top["command"]
print("ok   search JSON:", top["command"])
PY
else
    echo "FAIL: search exited $?"
    fail=1
fi

# flags the search holds apply to every candidate, never silently dropped: --micro-batch,
# --dropout, --grad-sync, --bucket-mb (in each configuration's strategy and launch line)
if "$COHORT" plan --model gpt2-xl --seq 1024 --global-batch 64 --hw a100-80gb --nodes 2 \
    --link-inter 25:9.6 --json --top 5 --micro-batch 2 --dropout --grad-sync after-backward \
    --bucket-mb 50 >"$tmp/h.json"; then
    "$COHORT_PYTHON" - "$tmp/h.json" <<'PY' || fail=1
import json, sys
c = json.load(open(sys.argv[1]))["configurations"]
assert c
for x in c:
    st = x["strategy"]
    assert st["micro_batch"] == 2 and st["dropout"] and st["grad_sync"] == "after-backward", st
    assert st["bucket_bytes"] == 50 << 20 and st["zero"] <= 1, st
    assert "--dropout --grad-sync after-backward --bucket-mb 50" in x["command"], x["command"]
print("ok   held flags in all %d configurations: %s" % (len(c), c[0]["command"]))
PY
else
    echo "FAIL: search with held flags exited $?"
    fail=1
fi
# ... and those it chooses itself are refused, naming the flag and its value
for flag in "--schedule gpipe" "--dp 2" "--virtual-stages 2" "--grad-accum 4" "--offload optimizer" \
    "--threads 2"; do
    # shellcheck disable=SC2086
    expect 2 "${flag% *} '${flag#* }' fixes what the search chooses: give the whole configuration \
with --explain" "${small[@]}" --global-batch 8 --devices 2 $flag
done
expect 2 "--sequence-parallel fixes what the search chooses" "${small[@]}" --global-batch 8 \
    --devices 2 --sequence-parallel
# a held micro-batch no configuration can take is named, not reported as "nothing fits"
expect 2 "invalid micro-batch '3': no configuration of 2 devices divides the global batch 8" \
    "${small[@]}" --global-batch 8 --devices 2 --micro-batch 3 --calibration "$cal/measured.json"
# after-backward gradient sync: ZeRO-2/3 reduce-scatter every micro-batch, so never with them
expect 2 "gradient sync after backward with ZeRO stage 3" "${small[@]}" --explain --hw a100-80gb \
    --dp 2 --zero 3 --grad-sync after-backward

# the memory per device is the estimator's: `cohort estimate` with the top pick's flags agrees
if "$COHORT" plan --model gpt2-xl --seq 1024 --global-batch 64 --hw a100-80gb --json --top 1 \
    >"$tmp/g.json"; then
    args=$("$COHORT_PYTHON" -c '
import json, sys
s = json.load(open(sys.argv[1]))["configurations"][0]["strategy"]
a = ["--dp", s["dp"], "--tp", s["tp"], "--pp", s["pp"], "--zero", s["zero"], "--micro-batch",
     s["micro_batch"], "--grad-accum", s["microbatches"], "--recompute", s["recompute"],
     "--precision", s["precision"], "--schedule", s["schedule"]]
if s["virtual_stages"] > 1: a += ["--virtual-stages", s["virtual_stages"]]
if s["sequence_parallel"]: a += ["--sequence-parallel"]
print(" ".join(map(str, a)))' "$tmp/g.json")
    # shellcheck disable=SC2086
    "$COHORT" estimate --model gpt2-xl --seq 1024 $args --json >"$tmp/e.json" || fail=1
    "$COHORT_PYTHON" - "$tmp/g.json" "$tmp/e.json" <<'PY' || fail=1
import json, sys
p = json.load(open(sys.argv[1]))["configurations"][0]["memory_bytes"]
e = json.load(open(sys.argv[2]))["per_device"]["total_bytes"]
assert p == e, (p, e)
print("ok   plan's memory per device = estimate's:", p)
PY
else
    echo "FAIL: plan on a100-80gb"; fail=1
fi

# a config.json goes to cohort train as its own model flags (train has no --config): a GPT-2
# one's line parses as printed; a Llama one is not runnable by cohort train (no line, and
# --runnable-only keeps none of it)
printf '{"model_type":"gpt2","n_layer":12,"n_embd":768,"n_head":12,"n_positions":1024,"vocab_size":50257}' \
    >"$tmp/gpt2.json"
printf '{"model_type":"llama","hidden_size":4096,"intermediate_size":11008,"num_attention_heads":32,
 "num_hidden_layers":32,"vocab_size":32000,"max_position_embeddings":4096}' >"$tmp/llama.json"
printf 'A few words to train on.\n\nAnd a second paragraph of them.\n' >"$tmp/corpus.txt"
"$COHORT" prepare --tokenizer byte --documents paragraph --out "$tmp/c" "$tmp/corpus.txt" \
    >/dev/null || { echo "FAIL: prepare"; fail=1; }
line=$("$COHORT" plan --config "$tmp/gpt2.json" --global-batch 64 --inventory \
    "$inv/a100x8_nvlink.json" --runnable-only --json | "$COHORT_PYTHON" -c 'import json, sys
print(json.load(sys.stdin)["configurations"][0]["command"])')
train=${line#*cohort train }
train=${train//SHARDS/$(echo "$tmp"/c_train_*.bin)}
train=${train//--steps N/--steps 1}
# shellcheck disable=SC2086 # the line's words, as a shell splits the pasted line
if [[ $line == *" --layers 12 --dim 768 --heads 12 --vocab 50257 --seq 1024 "* ]] &&
    "$COHORT" train $train --dry-run --world 8 >"$tmp/dry.out" 2>&1; then
    echo "ok   a GPT-2 config.json's line parses in cohort train: $line"
else
    echo "FAIL: a GPT-2 config.json's line: $line: $(cat "$tmp/dry.out")"
    fail=1
fi
expect 0 "top pick is not runnable by cohort train yet: 'llama (config.json)' is a Llama-family model: cohort train trains GPT-2 only" \
    --config "$tmp/llama.json" --global-batch 64 --inventory "$inv/a100x8_nvlink.json"
"$COHORT" plan --config "$tmp/llama.json" --global-batch 64 --inventory "$inv/a100x8_nvlink.json" \
    --json | "$COHORT_PYTHON" -c 'import json, sys
c = json.load(sys.stdin)["configurations"]
assert c and all(not x["runnable"] and x["command"] is None for x in c), c[0]
print("ok   a Llama config.json: %d configurations, none runnable, no launch line" % len(c))' ||
    fail=1
expect 2 "1746 of them: not run by cohort train (--runnable-only): 'llama (config.json)' is a Llama-family model" \
    --config "$tmp/llama.json" --global-batch 64 --inventory "$inv/a100x8_nvlink.json" --runnable-only
# nothing valid: the reasons are named and counted, not blamed on memory
expect 2 "no valid configuration of 3 devices (24 considered, all invalid; 24 of them: tensor parallel size 3 does not divide the 25 attention heads" \
    --model gpt2-xl --global-batch 8 --hw a100-80gb --devices 3 --tp 3
expect 2 "612 of them: not run by cohort train (--runnable-only): --precision fp16-mixed" \
    --model gpt2 --global-batch 8 --hw v100-32gb --devices 8 --runnable-only

# --explain prices what the flags say; --trace writes the simulated timeline
expect 0 "run it: cohort run --nproc-per-node 2 --standalone cohort train --threads 1 --pp 2 --schedule 1f1b" \
    "${small[@]}" --explain --pp 2 --nodes 1 --gpus-per-node 2 --grad-accum 4 --micro-batch 1 \
    --calibration "$cal/measured.json" --trace "$tmp/t.json"
"$COHORT_PYTHON" - "$tmp/t.json" <<'PY' || fail=1
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
assert {e["pid"] for e in x} == {0, 1}, "one pid per stage"
f = [e for e in x if e["name"].startswith("forward")]
b = [e for e in x if e["name"].startswith("backward")]
assert len(f) == 8 and len(b) == 8, (len(f), len(b))
for p in (0, 1):  # a stage never runs two computes at once
    c = sorted((e["ts"], e["ts"] + e["dur"]) for e in x if e["pid"] == p and e["tid"] == 0)
    assert all(a[1] <= b_[0] + 1e-6 for a, b_ in zip(c, c[1:])), c
print("ok   trace: 8 forwards and 8 backwards on 2 stages, no overlap on a stage")
PY

# the calibration bench writes a file plan reads
if "$COHORT" bench gemm --quick --threads-max 1 --out "$tmp/cal.json" >"$tmp/b.log" 2>&1; then
    expect 0 "calibration $tmp/cal.json" "${small[@]}" --global-batch 4 --devices 1 \
        --calibration "$tmp/cal.json"
else
    echo "FAIL: bench gemm"; cat "$tmp/b.log"; fail=1
fi

# what measures this machine does it with the OpenBLAS kernel train runs with: OpenBLAS forced
# to its weakest kernel, train restarts with the CPU's (the BLAS kernel check), and so must
# bench gemm and plan, or they price a product several times slower than training runs
want=$(OPENBLAS_CORETYPE=Prescott "$COHORT" train --blas-info 2>/dev/null)
for c in "bench gemm --quick --threads-max 1" \
         "plan ${small[*]} --global-batch 4 --devices 1"; do
    # shellcheck disable=SC2086 # the command's words
    got=$(OPENBLAS_CORETYPE=Prescott "$COHORT" $c 2>&1 | grep -o "OpenBLAS [A-Za-z0-9]*)" |
          head -1)
    [ -n "$want" ] && [ "$got" = "OpenBLAS $want)" ] &&
        echo "ok   $c measures with OpenBLAS $want, as train runs" ||
        { echo "FAIL: $c measured with '$got', train runs '$want'"; fail=1; }
done

# refusals
expect 2 "--global-batch N is required" "${small[@]}" --devices 2
expect 2 "invalid --devices '0'" "${small[@]}" --global-batch 8 --devices 0
expect 2 "invalid device count '12': the hardware has 8" --model gpt2-xl --global-batch 64 \
    --devices 12 --inventory "$inv/a100x8_nvlink.json"
expect 2 "invalid --devices '12': --nodes 2 x 8 per node is 16" --model gpt2-xl --global-batch 64 \
    --devices 12 --inventory "$inv/a100x8_nvlink.json" --nodes 2
expect 2 "has no \"links\"" --model gpt2-xl --global-batch 64 --inventory "$inv/a100x8_nolinks.json" --nodes 2
expect 2 "needs the link between nodes" --model gpt2-xl --global-batch 64 --hw a100-80gb --nodes 2
# a flag overrides the file: --link-inter gives the link the inventory lacks
expect 0 "inter-node 25.0 GB/s per device, 2 nodes" --model gpt2-xl --global-batch 64 \
    --inventory "$inv/a100x8_nolinks.json" --nodes 2 --link-inter 25
# a link's numbers are read whole, as every option value: blanks around them are refused
expect 2 "invalid --link-inter ' 25: 5': need GB/S[:LATENCY_US]" --model gpt2 --hw a100-80gb \
    --nodes 8 --link-inter ' 25: 5' --explain --tp 4
expect 2 "invalid --link-intra '25:5:1'" --model gpt2 --hw a100-80gb --link-intra 25:5:1 \
    --explain --tp 4
# one rule for --nodes with and without --explain: the node's devices come from the hardware
expect 0 "inter-node 25.0 GB/s per device, 8 nodes" --model gpt2 --global-batch 64 --hw a100-80gb \
    --nodes 8 --link-inter 25
expect 0 "64 devices" --model gpt2 --hw a100-80gb --nodes 8 --link-inter 25 --explain --tp 4
expect 1 "remedies" --layers 128 --dim 25600 --heads 160 --vocab 51200 --seq 2048 \
    --global-batch 64 --inventory "$inv/a100x8_nvlink.json"
expect 1 "no configuration of 1 device fits the memory per device" --layers 128 --dim 25600 \
    --heads 160 --vocab 51200 --seq 2048 --global-batch 64 --hw a100-80gb --devices 1
if "$COHORT" plan --model gpt2 --global-batch 8 --hw a100-80gb --devices 1 | grep -q "; 1 device$"; then
    echo "ok   one device, no plural"
else
    echo "FAIL: 'rates: ...; 1 device' not printed"; fail=1
fi
# the top pick not runnable and none listed either: said, and how to ask for runnable ones
expect 0 "none of the 5 listed is runnable by cohort train: --runnable-only searches only what it runs" \
    --model gpt2 --global-batch 8 --hw v100-32gb --devices 8
# ... whose tp stays within the node the search keeps it in (8 a100-80gb)
if "$COHORT" plan --layers 128 --dim 25600 --heads 160 --vocab 51200 --seq 2048 --global-batch 64 \
    --hw a100-80gb --devices 1 2>&1 | grep -E -- "--tp ([0-9]{2,}|9)"; then
    echo "FAIL: a remedy beyond the node's 8 devices"; fail=1
else
    echo "ok   remedies keep tp within the node"
fi
expect 2 "unknown hardware preset 'tpu'" --model gpt2 --global-batch 8 --hw tpu
# an input file named on the command line that cannot be read is a usage error naming the option
# and the path, as a missing --inventory is (a missing --calibration exited 1)
expect 2 "cannot read --calibration '$tmp/none.json': No such file or directory" --model gpt2 \
    --global-batch 8 --calibration "$tmp/none.json"
expect 2 "cannot read --calibration '$tmp': it is a folder, not a file" --model gpt2 \
    --global-batch 8 --calibration "$tmp"
expect 2 "cannot read --config '$tmp/none.json': No such file or directory" --global-batch 8 \
    --hw a100-80gb --config "$tmp/none.json"
expect 2 "cannot open inventory file '$tmp/none.json'" --model gpt2 --global-batch 8 \
    --inventory "$tmp/none.json"
expect 2 "cannot read inventory file '$tmp'" --model gpt2 --global-batch 8 --inventory "$tmp"
# COHORT_INVENTORY is the machine when none is named, as cohort devices reads it: --inventory
# wins over it, and --hw or --calibration name another machine instead of it
v100=$inv/v100x8_nvlink.json
COHORT_INVENTORY=$v100 expect 0 "hardware: v100-32gb, 32.00 GiB, 8 per node" --model gpt2 \
    --global-batch 8
COHORT_INVENTORY=$v100 expect 0 "hardware: a100-80gb, 80.00 GiB, 8 per node, intra-node 300" \
    --model gpt2 --global-batch 8 --inventory "$inv/a100x8_nvlink.json"
COHORT_INVENTORY=$v100 expect 0 "hardware: a100-80gb, 80.00 GiB, 8 per node, intra-node 300" \
    --model gpt2 --global-batch 8 --hw a100-80gb
COHORT_INVENTORY=$v100 expect 0 "rates: calibration $cal/measured.json" "${small[@]}" \
    --global-batch 8 --devices 2 --calibration "$cal/measured.json"
COHORT_INVENTORY=$tmp/none.json expect 2 \
    "COHORT_INVENTORY: cannot open inventory file '$tmp/none.json'" --model gpt2 --global-batch 8
# A100s of 80 and 40 GB: a configuration must fit on every device, so memory is the smallest's
# (not the first's), and the rates are the slowest's (a step waits for it); a warning names them
gpu() { # gpu N NAME MIB: an inventory entry of the device schema (docs/inventory.md)
    printf '{"vendor":"nvidia","name":"%s","uuid":"GPU-%s","memory_total_mib":%s}' "$2" "$1" "$3"
}
printf '{"gpus":[%s,%s]}' "$(gpu 0 "NVIDIA A100-SXM4-80GB" 81920)" \
    "$(gpu 1 "NVIDIA A100-SXM4-40GB" 40960)" >"$tmp/mixed.json"
expect 0 "hardware: a100-40gb, 40.00 GiB, 2 per node" --model gpt2 --global-batch 8 \
    --inventory "$tmp/mixed.json"
expect 0 "warning: inventory '$tmp/mixed.json': its GPUs differ in memory (gpus[0] 81920 MiB, gpus[1] 40960 MiB): a configuration must fit on every device, so memory is priced at the smallest, gpus[1]'s" \
    --model gpt2 --global-batch 8 --inventory "$tmp/mixed.json"
# one memory, two kinds, the faster first: priced as the slower
printf '{"gpus":[%s,%s]}' "$(gpu 0 "NVIDIA H100 80GB HBM3" 81920)" \
    "$(gpu 1 "NVIDIA A100-SXM4-80GB" 81920)" >"$tmp/kinds.json"
expect 0 "hardware: a100-80gb, 80.00 GiB, 2 per node" --model gpt2 --global-batch 8 \
    --inventory "$tmp/kinds.json"
expect 0 "warning: inventory '$tmp/kinds.json': its GPUs differ (gpus[0] 'NVIDIA H100 80GB HBM3', gpus[1] 'NVIDIA A100-SXM4-80GB'): a step waits for the slowest, so the rates are the slowest's" \
    --model gpt2 --global-batch 8 --inventory "$tmp/kinds.json"
# every GPU needs a preset, not only the first
printf '{"gpus":[%s,%s]}' "$(gpu 0 "NVIDIA A100-SXM4-80GB" 81920)" \
    "$(gpu 1 "NVIDIA GeForce RTX 4090" 24564)" >"$tmp/rtx2.json"
expect 2 "inventory '$tmp/rtx2.json': gpus[1]: no preset for the GPU 'NVIDIA GeForce RTX 4090'" \
    --model gpt2 --global-batch 8 --inventory "$tmp/rtx2.json"
printf '{"gpus":[%s]}' "$(gpu 0 "NVIDIA GeForce RTX 4090" 24564)" >"$tmp/rtx.json"
expect 2 "inventory '$tmp/rtx.json': gpus[0]: no preset for the GPU 'NVIDIA GeForce RTX 4090'" \
    --model gpt2 --global-batch 8 --inventory "$tmp/rtx.json"
expect 2 "rates[0].gemm[1]: work 100 not above" "${small[@]}" --global-batch 8 --calibration "$cal/unsorted.json"
expect 2 "unknown key 'colour'" "${small[@]}" --global-batch 8 --calibration "$cal/unknown_key.json"
# --measure times the engine on this machine: said so, and refused for GPU hardware by name
expect 0 "compute measured on the engine itself" "${small[@]}" --global-batch 4 --devices 2 \
    --measure --calibration "$cal/measured.json" --top 2
expect 2 "it cannot price 'a100-80gb'" --model gpt2 --global-batch 8 --hw a100-80gb --measure
expect 2 "invalid --link-inter 'fast'" --model gpt2 --global-batch 8 --hw a100-80gb --link-inter fast
# a pipeline split named as `cohort train --stage-layers` takes it, head shards included, priced
# and passed on to the command; only with --explain, only with a pipeline
split=0-1,2,3+head:0/2,head:1/2
expect 0 "--stage-layers $split --layers 4" "${small[@]}" --explain --calibration \
    "$cal/measured.json" --nodes 1 --gpus-per-node 2 --pp 2 --schedule interleaved \
    --virtual-stages 2 --micro-batch 2 --grad-accum 2 --stage-layers "$split"
expect 2 "invalid --stage-layers '0-1,2,3,head:0/2': " "${small[@]}" --explain --calibration \
    "$cal/measured.json" --nodes 1 --gpus-per-node 2 --pp 2 --schedule interleaved \
    --virtual-stages 2 --micro-batch 2 --grad-accum 2 --stage-layers 0-1,2,3,head:0/2
expect 2 "--stage-layers '0-1,2-3' fixes one configuration's split: use it with --explain" \
    "${small[@]}" --global-batch 8 --devices 2 --stage-layers 0-1,2-3
expect 2 "--stage-layers '0-3' needs a pipeline (--pp 2 or more)" "${small[@]}" --explain \
    --stage-layers 0-3

exit $fail
