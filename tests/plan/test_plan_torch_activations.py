"""test_plan_torch_activations.py: the activation model of `cohort estimate` against what
PyTorch's autograd actually keeps. A Megatron-style GPT (LayerNorm, fused-free attention, GELU
MLP, dropout as 1-byte masks) runs one forward pass; every tensor autograd saves for backward is
recorded through saved_tensors_hooks, parameters and the shared causal mask excluded, each storage
counted once. The sum must
match the estimate (Korthikanti et al. 2022's sbh(34 + 5as/h) per layer plus the embedding and
output terms) to within the small tensors the paper neglects (LayerNorm statistics, indices)."""
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


def make_params(dtype):
    g = torch.Generator().manual_seed(0)

    def p(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(dtype).requires_grad_()

    params = dict(wte=p(V, H), wpe=p(S, H), lnf_w=p(H), lnf_b=p(H))
    for i in range(L):
        for name, shape in [("ln1_w", (H,)), ("ln1_b", (H,)), ("wq", (H, H)), ("wk", (H, H)),
                            ("wv", (H, H)), ("bq", (H,)), ("bk", (H,)), ("bv", (H,)),
                            ("wo", (H, H)), ("bo", (H,)), ("ln2_w", (H,)), ("ln2_b", (H,)),
                            ("w1", (FF, H)), ("b1", (FF,)), ("w2", (H, FF)), ("b2", (H,))]:
            params[f"{i}.{name}"] = p(*shape)
    return params


# One causal mask shared by every layer, as Megatron's fused softmax uses it.
CAUSAL = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)


def block(x, P, i, drop):
    hd = H // A
    h1 = F.layer_norm(x, (H,), P[f"{i}.ln1_w"], P[f"{i}.ln1_b"])
    q = F.linear(h1, P[f"{i}.wq"], P[f"{i}.bq"]).view(S, A, hd).transpose(0, 1)  # (a, s, hd)
    k = F.linear(h1, P[f"{i}.wk"], P[f"{i}.bk"]).view(S, A, hd).transpose(0, 1)
    v = F.linear(h1, P[f"{i}.wv"], P[f"{i}.bv"]).view(S, A, hd).transpose(0, 1)
    scores = torch.bmm(q, k.transpose(1, 2)) * (1.0 / math.sqrt(hd))
    probs = torch.softmax(scores.masked_fill(CAUSAL, float("-inf")), dim=-1)
    ctx = torch.bmm(dropout(probs, drop), v).transpose(0, 1).reshape(S, H)
    x = x + dropout(F.linear(ctx, P[f"{i}.wo"], P[f"{i}.bo"]), drop)
    h2 = F.layer_norm(x, (H,), P[f"{i}.ln2_w"], P[f"{i}.ln2_b"])
    m = F.linear(F.gelu(F.linear(h2, P[f"{i}.w1"], P[f"{i}.b1"])), P[f"{i}.w2"], P[f"{i}.b2"])
    return x + dropout(m, drop)


def measure(dtype, drop):
    """Bytes of the distinct storages autograd saves in one forward pass (micro batch 1)."""
    P = make_params(dtype)
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
            x = block(x, P, i, drop)
        x = F.layer_norm(x, (H,), P["lnf_w"], P["lnf_b"])
        logits = F.linear(x, P["wte"]).float()  # tied head; the loss in fp32
        loss = F.cross_entropy(logits, tokens)
    loss.backward()  # the graph is complete and usable
    return sum(seen.values())


def estimate(*extra):
    args = [COHORT, "estimate", "--json", "--layers", str(L), "--dim", str(H), "--heads", str(A),
            "--vocab", str(V), "--seq", str(S), "--ffn", str(FF), *extra]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["per_device"]["activations_bytes"]


failures = 0
for label, dtype, drop, extra in [
        ("bf16, dropout", torch.bfloat16, True, []),
        ("bf16, no dropout", torch.bfloat16, False, ["--no-dropout"]),
        ("fp32, dropout", torch.float32, True, ["--precision", "fp32"]),
]:
    measured = measure(dtype, drop)
    predicted = estimate(*extra)
    rel = (measured - predicted) / predicted
    # PyTorch also keeps LayerNorm mean and rstd (5 x 2 x s fp32) and the token indices
    ok = 0 <= measured - predicted <= 5 * 2 * S * 4 + 2 * S * 8 + 64
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {label}: autograd keeps {measured:,} B, "
          f"estimate {predicted:,} B ({100 * rel:+.3f}%)")
sys.exit(1 if failures else 0)
