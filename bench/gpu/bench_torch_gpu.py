"""bench_torch_gpu.py: the PyTorch anchor of bench/gpu: GPT-2 124M (or the shape given) trained
on the GPU the way a user would set it up (bf16 autocast, torch.compile, scaled_dot_product_attention,
fused AdamW), on the same llm.c-format token shards; prints one line `torch: ... tok/s`."""
import argparse
import array
import glob
import statistics
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
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, C, L, NH):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def tokens(pattern):
    """The shards' tokens (llm.c format: a 256-int32 header, then uint16 tokens)."""
    out = array.array("H")
    for f in sorted(glob.glob(pattern)):
        with open(f, "rb") as fh:
            head = array.array("i")
            head.frombytes(fh.read(1024))
            out.frombytes(fh.read(2 * head[2]))
    return torch.tensor(out, dtype=torch.int64)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup-steps", type=int, default=5)
    a = p.parse_args()
    torch.manual_seed(0)
    data = tokens(a.data)
    n = a.batch * a.seq
    model = GPT(a.vocab, a.seq, a.dim, a.layers, a.heads).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    step_fn = torch.compile(model)
    times, loss = [], None
    for s in range(a.warmup_steps + a.steps):
        o = (s * n) % (len(data) - n - 1)
        x = data[o:o + n].view(a.batch, a.seq).cuda(non_blocking=True)
        y = data[o + 1:o + n + 1].view(a.batch, a.seq).cuda(non_blocking=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if s >= a.warmup_steps:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(f"torch: {torch.__version__} on {torch.cuda.get_device_name()}: loss {loss.item():.4f}, "
          f"median step {med * 1e3:.1f} ms, {n / med:.0f} tok/s")


if __name__ == "__main__":
    main()
