#!/usr/bin/env bash
# test_backend_boundary.sh: the model and the optimizer reach the device only through the backend
# table (src/train/backend/backend.h): their objects reference no symbol the CPU backend or its
# libraries define (link level), their sources hold no CPU kernel code (grep level), and
# gpt_step.c no tensor copy and no host loop outside a short list of control loops; the
# trainer's clipper, tensor-parallel and copy-check files neither.
set -u
src=${COHORT_SOURCE_DIR:?}
obj=${COHORT_BUILD_DIR:?}/CMakeFiles/cohort_objects.dir
fail=0
bad() { echo "FAIL $*"; fail=1; }

model_srcs=("$src"/src/train/model/*.c "$src"/src/train/model/*.h "$src"/src/train/optim/*.c)
[ ${#model_srcs[@]} -ge 5 ] || { echo "FAIL: model sources not found under $src"; exit 1; }

# ---- link level: undefined symbols of the model's and optimizer's objects ----
command -v nm >/dev/null || { echo "SKIP link: no nm"; exit 77; }
# objects of the sources as they are now (a build folder may still hold objects of moved files)
objs_of() { for c in "$@"; do echo "$obj/${c#"$src"/}.o"; done; }
mapfile -t cpu_objs < <(objs_of "$src"/src/train/backend/cpu/*.c)
for o in "${cpu_objs[@]}"; do [ -e "$o" ] || { echo "FAIL: no object $o for a CPU backend source"; exit 1; }; done
# every global the CPU backend defines, except the one entry point that hands out its table
cpu_defs=$(nm -g --defined-only "${cpu_objs[@]}" | awk 'NF==3 {print $3}' |
           grep -vx 'coh_backend_cpu' | sort -u)
[ -n "$cpu_defs" ] || { echo "FAIL: the CPU backend defines nothing?"; exit 1; }
echo "$cpu_defs" | grep -qx 'op_matmul_forward' || bad "op_matmul_forward not in the CPU backend"
checked=0
for o in $(objs_of "$src"/src/train/model/*.c "$src"/src/train/optim/*.c); do
    name=${o#"$obj"/}
    [ -e "$o" ] || { bad "no object $name: the test reads objects where CMake puts them"; continue; }
    und=$(nm -u "$o" | awk '{print $NF}' | sort -u)
    checked=$((checked + 1))
    hits=$(comm -12 <(echo "$und") <(echo "$cpu_defs"))
    [ -z "$hits" ] || bad "$name calls CPU backend functions directly:" $hits
    # BLAS, oneDNN, the OpenMP runtime (a parallel host loop), intrinsics that did not inline
    kern=$(echo "$und" | grep -E '^(cblas_|dnnl_|GOMP_|omp_|__kmpc_|_mm|__svml)' || true)
    [ -z "$kern" ] || bad "$name calls CPU kernels:" $kern
    # tensor copies go through the backend's copy/set. gpt_config.c is the one exception: it
    # copies tensor shards between host buffers for checkpoints (coh_gpt_tensor_shard) and
    # clears the host struct of a memory estimate (a call only without optimisation)
    mem=$(echo "$und" | grep -E '^(memcpy|memmove|memset|__memcpy_chk|__memset_chk|__memmove_chk)$' |
          tr '\n' ' ' || true)
    allowed=""
    [ "$name" = src/train/model/gpt_config.c.o ] && allowed="memcpy memset"
    for m in $mem; do
        case " $allowed " in *" $m "*) ;; *) bad "$name copies or sets memory itself: $m" ;; esac
    done
done
[ "$checked" -ge 5 ] || bad "only $checked model/optimizer objects found under $obj"

# ---- grep level: what the link cannot see (inlined intrinsics, headers, pragmas) ----
for f in "${model_srcs[@]}"; do
    n=${f#"$src"/}
    grep -nE '_mm(256|512)?_[a-z]|immintrin|<cblas\.h>|oneapi/dnnl|cblas_|dnnl_|#pragma omp|GPT_CLONES|train/backend/cpu/|\bop_[a-z_0-9]+\(' "$f" |
        grep -v '^\s*[0-9]*:\s*/\?\*' | sed "s|^|FAIL $n:|" | grep . && fail=1
done

# ---- gpt_step.c: no tensor copy, and loops only over layers and head shards, or over host
# token ids (validation) and the head op's per-chunk row statistics (its reduce step) ----
step=$src/src/train/model/gpt_step.c
grep -nE '\bmem(cpy|move|set)\b|__builtin_mem' "$step" | sed 's|^|FAIL gpt_step.c:|' | grep . && fail=1
allowed_loops=(
    'for (int l = lo; l < hi; l++) {'
    'for (int l = hi - 1; l >= lo; l--) {'
    'for (int l = 0; l < L; l++) {'
    'for (int k = hlo; !st && k < hhi; k++)'
    'for (int k = (last ? n - 1 : hhi) - 1; !st && k >= hlo; k--)'
    'for (size_t i = 0; i < n; i++)'
    'for (size_t i = 0; i < n; i++) {'
    'for (size_t i = 0; i < n / 2; i++) {'
)
while IFS= read -r line; do
    text=$(echo "${line#*:}" | sed 's/^[[:space:]]*//')
    ok=0
    for a in "${allowed_loops[@]}"; do [ "$text" = "$a" ] && ok=1; done
    [ $ok = 1 ] || bad "gpt_step.c:${line%%:*}: a loop not in the allowed list: $text"
done < <(grep -nE '\b(for|while) \(' "$step")
[ "$(grep -cE '\b(for|while) \(' "$step")" -le 10 ] || bad "gpt_step.c grew loops: review them"

# ---- strategy dp's devices: tensors move through the transport or the backend, never by the
# strategy's own copies or loops (its objects: no CPU backend symbol, kernel or mem* call; its
# sources: no loop over elements, which index with size_t), and each device's micro-steps run
# in the one executor (its objects call no forward or backward of the engine) ----
dp_srcs=("$src"/src/train/parallel/dp.c "$src"/src/train/parallel/par_dp.c)
for o in $(objs_of "${dp_srcs[@]}"); do
    name=${o#"$obj"/}
    [ -e "$o" ] || { bad "no object $name"; continue; }
    und=$(nm -u "$o" | awk '{print $NF}' | sort -u)
    checked=$((checked + 1))
    hits=$(comm -12 <(echo "$und") <(echo "$cpu_defs"))
    [ -z "$hits" ] || bad "$name calls CPU backend functions directly:" $hits
    kern=$(echo "$und" | grep -E '^(cblas_|dnnl_|GOMP_|omp_|__kmpc_|_mm|__svml|mem(cpy|move|set)$|__mem(cpy|move|set)_chk)' || true)
    [ -z "$kern" ] || bad "$name copies tensors or calls kernels itself:" $kern
    # the devices' forward and backward are the step's executor's (pipe_exec.c), not a loop here
    eng=$(echo "$und" | grep -E '^coh_gpt_(step|(shards|stage|chunk)_(forward|backward))$' || true)
    [ -z "$eng" ] || bad "$name runs the engine's forward or backward itself:" $eng
done
for f in "${dp_srcs[@]}"; do
    grep -nE '\bfor \(size_t|\bmem(cpy|move|set)\b' "$f" | sed "s|^|FAIL ${f#"$src"/}:|" | grep . && fail=1
done

# ---- the trainer's tensor arithmetic outside the model (the clipper is optim/adamw.c, above):
# tensor parallelism and the copy check go through the table too: no CPU backend symbol, no
# tensor copy (memset only of a host buffer the caller reads), no host loop over the arenas ----
par_srcs=(tensor_parallel.c replicas.c)
for c in "${par_srcs[@]}"; do
    f=$src/src/train/parallel/$c
    o=$(objs_of "$f")
    [ -e "$o" ] || { bad "no object for src/train/parallel/$c"; continue; }
    und=$(nm -u "$o" | awk '{print $NF}' | sort -u)
    hits=$(comm -12 <(echo "$und") <(echo "$cpu_defs"))
    [ -z "$hits" ] || bad "$c calls CPU backend functions directly:" $hits
    cp=$(echo "$und" | grep -E '^(memcpy|memmove|__memcpy_chk|__memmove_chk)$' || true)
    [ -z "$cp" ] || bad "$c copies tensors itself:" $cp
    grep -nE '(params|grads|gacc)\[[a-z_]' "$f" | sed "s|^|FAIL $c: a host loop over an arena: |" |
        grep . && fail=1
    checked=$((checked + 1))
done

# ---- the table is the CPU backend's: every op the header names is set ----
tbl=$src/src/train/backend/cpu/cpu_backend.c
for op in $(sed -n '/^struct coh_backend {/,/^};/p' "$src/src/train/backend/backend.h" |
            grep -oE '\(\*[a-z_0-9]+\)' | tr -d '(*)'); do
    grep -qE "^\s*\.$op = " "$tbl" || bad "the CPU backend leaves '$op' unset"
done

[ $fail = 0 ] && echo "backend boundary: $checked objects and ${#model_srcs[@]} sources clean"
exit $fail
