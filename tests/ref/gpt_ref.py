"""gpt_ref.py: an independent GPT-2 in PyTorch over a dict of HF-named tensors, for the tests."""
import math

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
