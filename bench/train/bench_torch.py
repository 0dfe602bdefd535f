"""bench_torch.py: the anchor for bench/train: the same GPT-2 model and AdamW step in PyTorch
eager mode (float32, or with --precision bf16-mixed under torch.autocast("cpu",
dtype=torch.bfloat16)), timed like bench_train; prints one JSON line."""
import argparse
import json

import torch

from torch_gpt import GPT, shape_args, train


def main():
    p = argparse.ArgumentParser()
    shape_args(p, threads=2)
    p.add_argument("--peak", type=float, required=True,
                   help="GEMM FLOP/s of the precision measured by cohort")
    p.add_argument("--precision", choices=["fp32", "bf16-mixed"], default="fp32")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = GPT(a.layers, a.dim, a.heads, a.vocab, a.seq)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    x, y = idx[:, :-1].contiguous(), idx[:, 1:].contiguous()
    total, losses = train(m, a, lambda k: (x, y), bf16=a.precision == "bf16-mixed")
    C, L, V, T = a.dim, a.layers, a.vocab, a.seq
    flops = 6.0 * (L * 12.0 * C * C + V * C) + 12.0 * L * T * C  # as coh_gpt_flops_per_token
    tps = a.batch * a.seq * a.steps / total
    print(json.dumps({"impl": "pytorch", "precision": a.precision,
                      "threads": torch.get_num_threads(),
                      "tokens_per_s": round(tps, 1), "mfu": round(tps * flops / a.peak, 4),
                      "step_s": round(total / a.steps, 4), "loss": round(losses[-1].item(), 4)}))


if __name__ == "__main__":
    main()
