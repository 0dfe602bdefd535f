"""torch_gpt.py: the PyTorch GPT-2 the benchmark anchors run (bench/train/bench_torch.py and
bench/ddp/bench_torch_ddp.py): the model, cohort's initialisation and learning-rate schedule,
the shape options, and the timed training loop, so both anchors train what cohort trains."""
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
        init_gpt2(self, L)

    def forward(self, idx, tgt):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.T  # tied LM head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))


def init_gpt2(m, L):
    """cohort's initialisation (coh_gpt_init_weights): embeddings and matrices N(0, 0.02), the two
    residual projections N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm gains 1. PyTorch's defaults
    (N(0, 1) embeddings, uniform biases) make the tied head's logits huge: loss 80 at start."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 2:
                scaled = name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight")
                p.normal_(0.0, 0.02 / math.sqrt(2 * L) if scaled else 0.02)
            elif name.startswith("ln") or ".ln_" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                p.zero_()


def lr_at(step, total, lr=3e-4, warmup=0, min_frac=0.1):
    """cohort's schedule (coh_lr_schedule): linear warmup, then cosine to lr * min_frac."""
    if step < warmup:
        return lr * (step + 1) / warmup
    r = (step - warmup) / max(total - warmup, 1)
    return lr * (min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * r)))


def shape_args(parser, threads):
    """The benchmark model's shape options, as bench_train and bench_dp take them."""
    for name, default in [("layers", 6), ("dim", 384), ("heads", 6), ("seq", 256), ("batch", 8),
                          ("vocab", 50257), ("steps", 10), ("threads", threads)]:
        parser.add_argument("--" + name, type=int, default=default)


def adamw(m):
    """cohort's AdamW: betas (0.9, 0.95), decay 0.1 on matrices and embeddings only."""
    decay = [p for p in m.parameters() if p.dim() == 2]
    plain = [p for p in m.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": plain, "weight_decay": 0.0}], lr=3e-4,
                             betas=(0.9, 0.95), eps=1e-8)


def train(m, a, batches, bf16=False):
    """a.steps + 1 optimizer steps on batches(k) -> (x, y), the first untimed as cohort's
    benchmarks do; clipping at 1 and cohort's schedule over the a.steps + 1 steps. bf16: the
    forward pass and loss under torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's mixed
    precision (fp32 weights and optimizer). Returns the timed seconds and the losses of every
    step."""
    opt, total, losses = adamw(m), 0.0, []
    for k in range(a.steps + 1):
        x, y = batches(k)
        t = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(k, a.steps + 1)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = m(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if k > 0:
            total += time.perf_counter() - t
        losses.append(loss.detach())
    return total, losses
