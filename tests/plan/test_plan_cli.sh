#!/usr/bin/env bash
# test_plan_cli.sh: `cohort estimate` from the outside: --json fields and their sums, the ZeRO
# paper's figures as printed (GB only with --si, GiB otherwise), the DeepSpeed and accelerate
# views, fit verdicts and remedies, inventory files, and every refusal's exit code and message.
set -u
: "${COHORT:?}" "${COHORT_SOURCE_DIR:?}" "${COHORT_PYTHON:=/usr/bin/python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
unset COHORT_INVENTORY # the default device when none is named: tested below

# expect CODE NEEDLE ARGS...: run cohort estimate ARGS, check exit code and that NEEDLE is in the
# combined output (runs of spaces count as one, so column widths do not matter).
expect() {
    local code=$1 needle=$2
    shift 2
    local out rc
    out=$("$COHORT" estimate "$@" 2>&1)
    rc=$?
    needle=$(tr -s ' ' <<<"$needle")
    if [ "$rc" -ne "$code" ] || ! tr -s ' ' <<<"$out" | grep -qF -- "$needle"; then
        echo "FAIL: cohort estimate $* -> exit $rc (want $code), output lacks '$needle':"
        echo "$out" | sed 's/^/    /'
        fail=1
    else
        echo "ok   $* -> $code: $needle"
    fi
}

# json_check ARGS... -- PYTHON-EXPRESSIONS: each expression (over `j`) must be true.
json_check() {
    local args=()
    while [ "$1" != "--" ]; do args+=("$1"); shift; done
    shift
    "$COHORT" estimate --json "${args[@]}" >"$tmp/out.json" || { echo "FAIL: ${args[*]}"; fail=1; return; }
    if ! "$COHORT_PYTHON" - "$tmp/out.json" "$@" <<'PY'; then
import json, sys
j = json.load(open(sys.argv[1]))
bad = [e for e in sys.argv[2:] if not eval(e)]
for e in bad:
    print("FAIL: json check", e)
sys.exit(1 if bad else 0)
PY
        echo "    (for ${args[*]})"
        fail=1
    else
        echo "ok   json ${args[*]}"
    fi
}

json_check --model gpt2 --precision bf16-mixed -- \
    'j["parameters"] == 124439808' 'j["largest_layer_parameters"] == 38597376' \
    'all(k in j["per_device"] for k in ("params_bytes","grads_bytes","optimizer_bytes","activations_bytes","total_bytes"))' \
    'sum(j["per_device"][k] for k in ("params_bytes","grads_bytes","optimizer_bytes","activations_bytes","temp_bytes")) == j["per_device"]["total_bytes"]' \
    'j["per_device"]["params_bytes"] == 2 * 124439808' 'j["fits"] is None'
json_check --model gpt2 --nodes 2 --gpus-per-node 4 --tp 2 -- 'j["strategy"]["dp"] == 4'
json_check --model gpt2-xl --dp 4 --device-memory 16GiB -- \
    'j["fits"] is False' 'j["remedies"][0]["change"] == "--zero 3"' \
    'all(r["total_bytes"] <= 16 * 2**30 for r in j["remedies"])'
json_check --params 2851e6 --largest-layer 32e6 --gpus-per-node 8 --view deepspeed -- \
    'len(j["deepspeed"]) == 8' 'j["deepspeed"][0]["gpu_bytes"] == 5702000000'

# The ZeRO paper's 7.5B / 64 GPUs example: 120 / 31.4 / 16.6 / 1.9 GB (10^9 bytes).
zero_si=("120.00 GB" "31.41 GB" "16.64 GB" "1.88 GB")
for z in 0 1 2 3; do
    expect 0 "total                ${zero_si[$z]}" --params 7.5e9 --dp 64 --zero "$z" --si \
        --precision bf16-mixed
done
expect 0 "total               111.76 GiB" --params 7.5e9 --dp 64
if "$COHORT" estimate --params 7.5e9 --dp 64 | grep -qE '[0-9] (GB|MB|kB)'; then
    echo "FAIL: decimal units printed without --si"; fail=1
fi

# DeepSpeed's documented tables (t5-3b: 2851M params, 32M largest layer, 8 GPUs), in GiB.
ds=(--params 2851e6 --largest-layer 32e6 --gpus-per-node 8 --view deepspeed)
expect 0 "127.45 GiB |   5.31 GiB | offload_optimizer=cpu" "${ds[@]}"
expect 0 " 71.69 GiB |   0.12 GiB | offload_param=cpu , offload_optimizer=cpu , zero_init=1" "${ds[@]}"
expect 0 " 63.72 GiB |   0.78 GiB | offload_param=none, offload_optimizer=cpu , zero_init=1" "${ds[@]}"
expect 0 "  1.43 GiB |   6.09 GiB | offload_param=none, offload_optimizer=none, zero_init=1" "${ds[@]}"
expect 0 "SW: Model with 2851M total params, 32M largest layer params." "${ds[@]}"
expect 0 "ZeRO-3 needs the largest layer" --params 2851e6 --gpus-per-node 8 --view deepspeed

# accelerate's figures for a ViT-L (304,715,752 parameters, largest layer 4,198,400).
acc=(--params 304715752 --largest-layer 4198400 --view accelerate)
expect 0 "float32  |      16.02 MiB |       1.14 GiB |           4.54 GiB" "${acc[@]}"
expect 0 "float16  |       8.01 MiB |     581.20 MiB |           2.27 GiB" "${acc[@]}"
expect 0 "int4" "${acc[@]}"
# without --largest-layer the largest layer is not known: said so, not printed as 0 B
expect 0 "float32 | unknown | 1.14 GiB | 4.54 GiB" --params 304715752 --view accelerate
json_check --params 304715752 --view accelerate -- 'j["accelerate"][0]["largest_layer_bytes"] is None'

# The default precision is what cohort train runs, and the output says so.
expect 0 "ZeRO 0, fp32 (what cohort train runs; --precision bf16-mixed for mixed precision)" --model gpt2
json_check --model gpt2 -- 'j["strategy"]["precision"] == "fp32"' 'j["per_device"]["params_bytes"] == 4 * 124439808'
# Remedies say whether cohort train runs them today.
json_check --model gpt2-xl --dp 4 --device-memory 16GiB -- \
    'all("cohort_train_runs" in r for r in j["remedies"])' \
    'any(r["cohort_train_runs"] for r in j["remedies"])' \
    'all(r["cohort_train_runs"] or "not in cohort" in r["missing"] or "cohort" in r["missing"] for r in j["remedies"])' \
    'all(not r["cohort_train_runs"] for r in j["remedies"] if "--tp" in r["change"] or "--offload" in r["change"])'
expect 0 "cohort train: runs this today" --model gpt2-xl --dp 4 --device-memory 16GiB
# tp stays within a node (section 5, and the planner's search): pp and ZeRO do the rest
json_check --layers 128 --dim 25600 --heads 160 --vocab 51200 --seq 2048 --precision bf16-mixed \
    --nodes 128 --gpus-per-node 8 --dp 1024 --device-memory 80GiB -- 'j["remedies"]' \
    'all(int(t) <= 8 for r in j["remedies"] for t in __import__("re").findall(r"--tp (\d+)", r["change"]))'
expect 0 "cohort train: --offload optimizer+params: cohort's trainer does not offload" --model gpt2-xl --dp 4 --device-memory 16GiB

# Fit verdicts.
expect 0 "fits, " --model gpt2 --device-memory 80GiB
expect 0 "does not fit: 15.76 GiB short" --model gpt2-xl --dp 4 --device-memory 16GiB \
    --precision bf16-mixed --dropout
expect 0 "--zero 3" --model gpt2-xl --dp 4 --device-memory 16GiB
# inventories of the device schema (docs/inventory.md), the one every command reads
gpu() { # gpu N MIB: an entry with the required keys
    printf '{"vendor":"nvidia","name":"NVIDIA A100-SXM4-80GB","uuid":"GPU-%s","memory_total_mib":%s}' \
        "$1" "$2"
}
printf '{"gpus":[%s]}' "$(gpu 0 16384)" >"$tmp/inv.json"
expect 0 "device memory 16.00 GiB ($tmp/inv.json): does not fit" --model gpt2-xl --dp 4 --inventory "$tmp/inv.json"
printf '{"gpus":[]}' >"$tmp/none.json"
expect 2 "lists no GPUs" --model gpt2 --inventory "$tmp/none.json"
# GPUs of different memory: a configuration must fit on every one, so the smallest (not the
# first) is the limit, and a warning names both
printf '{"gpus":[%s,%s,%s]}' "$(gpu 0 81920)" "$(gpu 1 16384)" "$(gpu 2 81920)" >"$tmp/mixed.json"
expect 0 "device memory 16.00 GiB ($tmp/mixed.json): does not fit" --model gpt2-xl --dp 4 \
    --inventory "$tmp/mixed.json"
expect 0 "warning: inventory '$tmp/mixed.json': its GPUs differ in memory (gpus[0] 81920 MiB, gpus[1] 16384 MiB): a configuration must fit on every device, so memory is priced at the smallest, gpus[1]'s" \
    --model gpt2-xl --dp 4 --inventory "$tmp/mixed.json"
printf '{"gpus":[%s,%s]}' "$(gpu 0 81920)" "$(gpu 1 '"80GB"')" >"$tmp/badmem.json"
expect 2 "$tmp/badmem.json: gpus[1].memory_total_mib: '80GB' is not an integer from 1 to" \
    --model gpt2 --inventory "$tmp/badmem.json"

# Configs.
cat >"$tmp/llama.json" <<'J'
{"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
 "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
 "vocab_size": 32000, "max_position_embeddings": 4096, "tie_word_embeddings": false}
J
expect 0 "parameters   6,738,415,616" --config "$tmp/llama.json"
printf '{"hidden_size": 64, "vocab_size": 10}' >"$tmp/nolayers.json"
expect 2 "config has no layer count" --config "$tmp/nolayers.json"
printf '{"n_layer": 2, "n_embd": 64,\n "n_head": }' >"$tmp/bad.json"
expect 2 "malformed config" --config "$tmp/bad.json"
expect 2 "line 2" --config "$tmp/bad.json"
expect 2 "cannot read --config '$tmp/missing.json': No such file or directory" \
    --config "$tmp/missing.json"

# COHORT_INVENTORY is the device when none is named, as cohort devices reads it; --inventory
# and --device-memory win over it.
v100=$COHORT_SOURCE_DIR/tests/plan/inventories/v100x8_nvlink.json
COHORT_INVENTORY=$v100 expect 0 "device memory 32.00 GiB ($v100): fits" --model gpt2
COHORT_INVENTORY=$v100 expect 0 "device memory 16.00 GiB (--device-memory): fits" --model gpt2 \
    --device-memory 16GiB
COHORT_INVENTORY=$v100 expect 0 "device memory 80.00 GiB (" --model gpt2 \
    --inventory "$COHORT_SOURCE_DIR/tests/plan/inventories/a100x8_nvlink.json"
COHORT_INVENTORY=$tmp/missing.json expect 2 \
    "COHORT_INVENTORY: cannot open inventory file '$tmp/missing.json'" --model gpt2

# Refusals name the conflicting numbers.
expect 2 "tensor parallel size 5 does not divide the 12 attention heads" --model gpt2 --tp 5
expect 2 "pipeline parallel size 13 is larger than the 12 layers" --model gpt2 --pp 13
expect 2 "dp 2 x tp 1 x pp 1 = 2 devices does not match 2 node(s) x 8 GPUs per node = 16" \
    --model gpt2 --dp 2 --nodes 2 --gpus-per-node 8
# sizes past 64 bits are refused, not printed saturated at 16 EiB
expect 2 "model out of range: 1.2e+18 parameters (100000 layers, dim 1000000, vocabulary 10000000) are more than 2^50" \
    --layers 100000 --dim 1000000 --heads 1000 --vocab 10000000 --seq 1000000
expect 2 "estimate out of range: the activations per device are more than 2^64 bytes (--seq 16777216, --micro-batch 1000)" \
    --layers 2 --dim 64 --heads 64 --vocab 100 --seq 16777216 --micro-batch 1000 --json
expect 2 "no model" --dp 2
expect 2 "give only one model" --model gpt2 --params 1e9
expect 2 "invalid --zero '4'" --model gpt2 --zero 4
expect 2 "invalid --schedule 'zigzag': valid are 1f1b, gpipe, interleaved, naive" --model gpt2 --schedule zigzag
expect 2 "invalid size '10XB'" --model gpt2 --device-memory 10XB
expect 2 "invalid parameter count 'lots'" --params lots
expect 2 "a custom model needs --vocab" --layers 2 --dim 64 --heads 4 --seq 32
expect 2 "unknown or incomplete option '--frobnicate'" --model gpt2 --frobnicate
expect 2 "optimizer offload needs ZeRO" --model gpt2 --offload optimizer
expect 0 "usage: cohort estimate" --help

# --engine cohort: the engine's own buffers (their measurement is test_plan_engine.c).
json_check --engine cohort --threads 2 --layers 4 --heads 8 --dim 512 --vocab 8192 --seq 256 --micro-batch 4 -- \
    'j["engine"]["threads"] == 2' 'j["parameters"] == 4 * (12 * 512**2 + 13 * 512) + 8192 * 512 + 256 * 512 + 2 * 512' \
    'j["engine"]["params"] == 4 * j["parameters"] == j["engine"]["adam_v"]' \
    'j["engine"]["total"] == sum(j["engine"][k] for k in ("params","grads","adam_m","adam_v","activations","act_grads","logits")) + 2 * j["engine"]["attention_per_thread"]' \
    'j["per_device"]["total_bytes"] == j["engine"]["total"] + 2 * 4 * 256 * 4' 'j["formula_total_bytes"] > 0' \
    'j["strategy"]["name"] == "single" and j["per_device"]["comm_bytes"] == 0' \
    'sum(j["per_device"][k] for k in ("params_bytes","grads_bytes","optimizer_bytes","activations_bytes","temp_bytes","comm_bytes")) == j["per_device"]["total_bytes"]'
# ZeRO-3 over 4 ranks holds 16 B x P / 4 = the full parameter arena, give or take the last
# rank's tails (up to 3 elements x 16 B in each of the 6 layer buckets); measured against runs in
# test_plan_engine_parallel.sh
json_check --engine cohort --threads 2 --layers 4 --heads 8 --dim 512 --vocab 8192 --seq 256 --micro-batch 4 --dp 4 --zero 3 -- \
    '{k: j["strategy"][k] for k in ("name", "dp", "zero")} == {"name": "zero3", "dp": 4, "zero": 3}' \
    'abs(j["per_device"]["model_state_bytes"] - j["engine"]["params"]) <= 16 * 3 * 6' \
    'j["per_device"]["gathered_params_bytes"] > 0 and j["per_device"]["grad_buckets_bytes"] > 0'
expect 0 "what rank 0 holds at its peak:" --model gpt2 --engine cohort --seq 128
expect 0 "zero2 over 2 ranks" --model gpt2 --engine cohort --dp 2 --zero 2 --seq 128
expect 0 "one tensor-parallel shard (1 of 2)" --model gpt2 --engine cohort --tp 2 --seq 128
expect 2 "--engine cohort prices what cohort train runs: --sequence-parallel: needs tensor parallelism" --model gpt2 --engine cohort --sequence-parallel
expect 2 "--recompute selective: cohort's trainer recomputes whole blocks" --model gpt2 --engine cohort --recompute selective
# full recomputation keeps one output a block and rebuilds one block at a time: less than all
json_check --engine cohort --layers 4 --heads 8 --dim 512 --vocab 8192 --seq 256 --micro-batch 4 --recompute full -- \
    'j["strategy"]["recompute"] == "full"' 'j["per_device"]["total_bytes"] < j["engine"]["total"]' 
expect 2 "invalid --bucket-mb 'x': must be a number from 0.001 to 1.04858e+06" --model gpt2 --engine cohort --bucket-mb x
expect 2 "--precision fp16-mixed: cohort's trainer runs fp32 or bf16-mixed" --model gpt2 --engine cohort --precision fp16-mixed
expect 2 "--engine cohort needs a GPT-2 model shape" --config "$tmp/llama.json" --engine cohort
# ... and the remedies' "cohort train runs this" is the same check: no for a Llama
expect 0 "cohort train: 'llama (config.json)' is a Llama-family model: cohort train trains GPT-2 only" \
    --config "$tmp/llama.json" --dp 2 --device-memory 24GiB --precision bf16-mixed
json_check --config "$tmp/llama.json" --dp 2 --device-memory 24GiB --precision bf16-mixed -- \
    'j["remedies"]' 'not any(r["cohort_train_runs"] for r in j["remedies"])'
expect 2 "invalid --engine 'deepspeed': valid are cohort" --model gpt2 --engine deepspeed
expect 2 "--save goes with --engine cohort" --model gpt2 --save

exit $fail
