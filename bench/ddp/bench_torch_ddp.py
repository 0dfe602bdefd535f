"""bench_torch_ddp.py: the anchor for bench/ddp: PyTorch DistributedDataParallel (gloo) on the
bench/train GPT model, one process per rank started by `cohort run` (which sets torchrun's
environment); rank 0 prints one JSON line with the global tokens/s."""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from bench_torch import GPT  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 6), ("dim", 384), ("heads", 6), ("seq", 256), ("batch", 8),
                          ("vocab", 50257), ("steps", 10), ("threads", 1)]:
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    m = torch.nn.parallel.DistributedDataParallel(
        GPT(a.layers, a.dim, a.heads, a.vocab, a.seq))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(1 + rank)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)
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
    tps = world * a.batch * a.seq * a.steps / total
    if rank == 0:
        print(json.dumps({"impl": "pytorch-ddp", "ranks": world,
                          "threads": torch.get_num_threads(), "tokens_per_s": round(tps, 1),
                          "step_s": round(total / a.steps, 4), "loss": round(loss.item(), 4)}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
