"""bench_torch.py: the anchor for bench/train: the same GPT-2 model and AdamW step in PyTorch
eager mode (float32), timed like bench_train; prints one JSON line."""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.nh = NH
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = [z.view(B, T, self.nh, C // self.nh).transpose(1, 2) for z in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.nh))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, T):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, tgt):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.T  # tied LM head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 6), ("dim", 384), ("heads", 6), ("seq", 256), ("batch", 8),
                          ("vocab", 50257), ("steps", 10), ("threads", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--peak", type=float, required=True, help="sgemm FLOP/s measured by cohort")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = GPT(a.layers, a.dim, a.heads, a.vocab, a.seq)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    x, y = idx[:, :-1].contiguous(), idx[:, 1:].contiguous()
    total = 0.0
    for k in range(a.steps + 1):
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = m(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if k > 0:
            total += time.perf_counter() - t
    C, L, V, T = a.dim, a.layers, a.vocab, a.seq
    flops = 6.0 * (L * 12.0 * C * C + V * C) + 12.0 * L * T * C  # as coh_gpt_flops_per_token
    tps = a.batch * a.seq * a.steps / total
    print(json.dumps({"impl": "pytorch", "threads": torch.get_num_threads(),
                      "tokens_per_s": round(tps, 1), "mfu": round(tps * flops / a.peak, 4),
                      "step_s": round(total / a.steps, 4), "loss": round(loss.item(), 4)}))


if __name__ == "__main__":
    main()
