"""gpt_ref.py: an independent GPT-2 in PyTorch over a dict of HF-named tensors, for the tests, and
its mean loss over the first windows of a token shard (what `cohort eval` reports)."""
import math

import numpy as np
import torch
import torch.nn.functional as F


def gpt_loss(P, L, NH, idx, tgt):
    B, T = idx.shape
    x = P["transformer.wte.weight"][idx] + P["transformer.wpe.weight"][:T]
    C = x.shape[-1]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = lambda s: P[f"transformer.h.{l}.{s}"]
        h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), 1e-5)
        q, k, v = (h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")).split(C, dim=-1)
        q, k, v = [z.view(B, T, NH, C // NH).transpose(1, 2) for z in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), 1e-5)
        h = F.gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], 1e-5)
    logits = x @ P["transformer.wte.weight"].T
    return F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(-1))


def read_shard(path):
    """The tokens of an llm.c token shard (`cohort prepare`)."""
    raw = open(path, "rb").read()
    hdr = np.frombuffer(raw[:1024], dtype="<i4")
    assert hdr[0] == 20240520 and hdr[1] == 1
    return np.frombuffer(raw[1024:], dtype="<u2")[:hdr[2]].astype(np.int64)


def shard_loss(P, L, NH, path, B, T, N):
    """gpt_loss averaged over N batches of B windows of T + 1 tokens from the start of shard
    `path`, as `cohort eval --batch B --seq T --batches N` reads them."""
    toks = read_shard(path)
    losses = []
    for k in range(N):
        rows = [toks[w * T:w * T + T + 1] for w in range(k * B, (k + 1) * B)]
        x = torch.tensor(np.stack([r[:-1] for r in rows]))
        y = torch.tensor(np.stack([r[1:] for r in rows]))
        with torch.no_grad():
            losses.append(gpt_loss(P, L, NH, x, y).item())
    return sum(losses) / N
