"""test_plan_torch_activations.py: the activation model of `cohort estimate` against what
PyTorch's autograd actually keeps. A Megatron-style GPT (LayerNorm, fused-free attention, GELU
MLP, dropout as 1-byte masks) runs one forward pass; every tensor autograd saves for backward is
recorded through saved_tensors_hooks, parameters and the shared causal mask excluded, each storage
counted once. The sum must
match the estimate (Korthikanti et al. 2022's sbh(34 + 5as/h) per layer, sbh(10 + 24/t +
5as/(ht)) on one rank of a tensor-parallel group, plus the embedding and output terms) to within
the small tensors the paper neglects (LayerNorm statistics, indices)."""
import json
import math
import os
import subprocess
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch not importable: skipped")
    sys.exit(77)

COHORT = os.environ["COHORT"]
L, H, A, S, V, FF = 2, 256, 8, 128, 1000, 1024
P_DROP = 0.1


def dropout(x, on):
    if not on:
        return x
    keep = torch.rand(x.shape) >= P_DROP  # bool: autograd keeps 1 byte per element
    return x * keep * (1.0 / (1.0 - P_DROP))


def make_params(dtype, t):
    """One tensor-parallel rank's parameters (Megatron's split; t = 1 is the whole model)."""
    g = torch.Generator().manual_seed(0)

    def p(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(dtype).requires_grad_()

    params = dict(wte=p(V, H), head=p(V // t, H), wpe=p(S, H), lnf_w=p(H), lnf_b=p(H))
    for i in range(L):
        for name, shape in [("ln1_w", (H,)), ("ln1_b", (H,)), ("wq", (H // t, H)),
                            ("wk", (H // t, H)), ("wv", (H // t, H)), ("bq", (H // t,)),
                            ("bk", (H // t,)), ("bv", (H // t,)), ("wo", (H, H // t)),
                            ("bo", (H,)), ("ln2_w", (H,)), ("ln2_b", (H,)), ("w1", (FF // t, H)),
                            ("b1", (FF // t,)), ("w2", (H, FF // t)), ("b2", (H,))]:
            params[f"{i}.{name}"] = p(*shape)
    return params


# One causal mask shared by every layer, as Megatron's fused softmax uses it.
CAUSAL = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)


def block(x, P, i, drop, t):
    """One rank's share of a block: its A/t heads and FF/t MLP columns; the all-reduces after
    the row-parallel linears save nothing and are left out."""
    hd, a = H // A, A // t
    h1 = F.layer_norm(x, (H,), P[f"{i}.ln1_w"], P[f"{i}.ln1_b"])
    q = F.linear(h1, P[f"{i}.wq"], P[f"{i}.bq"]).view(S, a, hd).transpose(0, 1)  # (a/t, s, hd)
    k = F.linear(h1, P[f"{i}.wk"], P[f"{i}.bk"]).view(S, a, hd).transpose(0, 1)
    v = F.linear(h1, P[f"{i}.wv"], P[f"{i}.bv"]).view(S, a, hd).transpose(0, 1)
    scores = torch.bmm(q, k.transpose(1, 2)) * (1.0 / math.sqrt(hd))
    probs = torch.softmax(scores.masked_fill(CAUSAL, float("-inf")), dim=-1)
    ctx = torch.bmm(dropout(probs, drop), v).transpose(0, 1).reshape(S, H // t)
    x = x + dropout(F.linear(ctx, P[f"{i}.wo"], P[f"{i}.bo"]), drop)
    h2 = F.layer_norm(x, (H,), P[f"{i}.ln2_w"], P[f"{i}.ln2_b"])
    m = F.linear(F.gelu(F.linear(h2, P[f"{i}.w1"], P[f"{i}.b1"])), P[f"{i}.w2"], P[f"{i}.b2"])
    return x + dropout(m, drop)


def measure(dtype, drop, t):
    """Bytes of the distinct storages autograd saves in one forward pass (micro batch 1)."""
    P = make_params(dtype, t)
    param_ptrs = {t.data_ptr() for t in P.values()}
    seen = {}

    def pack(t):
        if t.data_ptr() not in param_ptrs and t.data_ptr() != CAUSAL.data_ptr():
            st = t.storage()
            seen[st.data_ptr()] = st.nbytes()
        return t

    tokens = torch.randint(0, V, (S,))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        x = dropout(F.embedding(tokens, P["wte"]) + P["wpe"], drop)
        for i in range(L):
            x = block(x, P, i, drop, t)
        x = F.layer_norm(x, (H,), P["lnf_w"], P["lnf_b"])
        logits = F.linear(x, P["head"]).float()  # this rank's vocabulary rows; loss in fp32
        loss = F.cross_entropy(logits, tokens % (V // t))
    loss.backward()  # the graph is complete and usable
    return sum(seen.values())


def estimate(*extra):
    args = [COHORT, "estimate", "--json", "--layers", str(L), "--dim", str(H), "--heads", str(A),
            "--vocab", str(V), "--seq", str(S), "--ffn", str(FF),
            "--precision", "bf16-mixed", "--dropout", *extra]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["per_device"]["activations_bytes"]


failures = 0
for label, dtype, drop, t, extra in [
        ("bf16, dropout", torch.bfloat16, True, 1, []),
        ("bf16, no dropout", torch.bfloat16, False, 1, ["--no-dropout"]),
        ("fp32, dropout", torch.float32, True, 1, ["--precision", "fp32"]),
        ("bf16, one rank of tp 2", torch.bfloat16, True, 2, ["--tp", "2"]),
        ("bf16, one rank of tp 4", torch.bfloat16, True, 4, ["--tp", "4"]),
]:
    measured = measure(dtype, drop, t)
    predicted = estimate(*extra)
    rel = (measured - predicted) / predicted
    # PyTorch also keeps LayerNorm mean and rstd (5 x 2 x s fp32), the token and target indices
    # (2 x s int64) and a few scalars of the loss
    ok = 0 <= measured - predicted <= 5 * 2 * S * 4 + 2 * S * 8 + 256
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {label}: autograd keeps {measured:,} B, "
          f"estimate {predicted:,} B ({100 * rel:+.3f}%)")
sys.exit(1 if failures else 0)
