"""bench_torch_ddp.py: the anchor for bench/ddp: PyTorch DistributedDataParallel (gloo) on the
bench/train GPT model (bench/train/torch_gpt.py: cohort's initialisation, AdamW and schedule),
one process per rank started by `cohort run` (which sets torchrun's environment), a new batch
of random tokens per rank and step as bench_dp draws them; rank 0 prints one JSON line with the
global tokens/s and the loss (mean over ranks) of the first and last step."""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from torch_gpt import GPT, shape_args, train  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    shape_args(p, threads=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same weights on every rank (DDP also broadcasts rank 0's)
    m = torch.nn.parallel.DistributedDataParallel(GPT(a.layers, a.dim, a.heads, a.vocab, a.seq))
    g = torch.Generator().manual_seed(1 + rank)

    def batch(k):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)
        return idx[:, :-1].contiguous(), idx[:, 1:].contiguous()

    total, losses = train(m, a, batch)
    first_last = torch.stack([losses[0], losses[-1]])
    dist.all_reduce(first_last)
    first_last /= world
    tps = world * a.batch * a.seq * a.steps / total
    if rank == 0:
        print(json.dumps({"impl": "pytorch-ddp", "ranks": world,
                          "threads": torch.get_num_threads(), "tokens_per_s": round(tps, 1),
                          "step_s": round(total / a.steps, 4),
                          "first_loss": round(first_last[0].item(), 4),
                          "loss": round(first_last[1].item(), 4)}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
