"""test_train_torch_ref.py: the C engine's loss, every gradient, and 20 AdamW steps against an
independent PyTorch GPT-2 (float64) written here, given the same weights and batch."""
import atexit
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_ref import gpt_loss  # noqa: E402

TOOL = os.path.join(os.environ["COHORT_BUILD_DIR"], "tests", "train", "train_ref_tool")
REL = 1e-4


def run_tool(mode, steps):
    d = tempfile.mkdtemp(prefix="cohort-ref-")
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    subprocess.run([TOOL, d, mode, str(steps)], check=True)
    lines = open(os.path.join(d, "manifest.txt")).read().split("\n")
    cfg = [int(v) for v in lines[0].split()[1:]]
    tensors = []
    for ln in lines[1:]:
        if ln:
            name, off, r, c, decay = ln.split()
            tensors.append((name, int(off), int(r), int(c), int(decay)))
    arr = lambda n: np.fromfile(os.path.join(d, n), dtype=np.float32)
    return d, cfg, tensors, arr


def load_params(tensors, flat):
    params = {}
    for name, off, r, c, _ in tensors:
        n = r * (c if c else 1)
        t = torch.tensor(flat[off:off + n].astype(np.float64))
        params[name] = (t.view(r, c) if c else t).clone().requires_grad_(True)
    return params


def batch(arr, B, T):
    idx = torch.tensor(arr("inputs.f32").astype(np.int64)).view(B, T)
    tgt = torch.tensor(arr("targets.f32").astype(np.int64)).view(B, T)
    return idx, tgt


def check_grads():
    d, (L, NH, C, V, S, B, T), tensors, arr = run_tool("grads", 1)
    P = load_params(tensors, arr("params.f32"))
    idx, tgt = batch(arr, B, T)
    loss = gpt_loss(P, L, NH, idx, tgt)
    loss.backward()
    ours = float(arr("loss.f32")[0])
    failures = 0
    if abs(ours - loss.item()) > REL * abs(loss.item()):
        print(f"loss: cohort {ours} torch {loss.item()}")
        failures += 1
    g = arr("grads.f32").astype(np.float64)
    worst = 0.0
    for name, off, r, c, _ in tensors:
        ref = P[name].grad.reshape(-1).numpy()
        got = g[off:off + ref.size]
        rel = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
        elem = np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30)
        worst = max(worst, rel, elem)
        if rel > REL or elem > REL:
            print(f"{name}: relative error {rel:.3g} (norm), {elem:.3g} (max element)")
            failures += 1
    print(f"loss {ours:.7f} vs torch {loss.item():.7f}; {len(tensors)} gradient tensors, "
          f"worst relative error {worst:.3g}")
    return failures


def lr_at(step, warmup, total, lr, min_frac):
    if step < warmup:
        return lr * (step + 1) / warmup
    r = (step - warmup) / (total - warmup)
    return lr * (min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * r)))


def check_adamw(steps=20):
    d, (L, NH, C, V, S, B, T), tensors, arr = run_tool("adamw", steps)
    P = load_params(tensors, arr("params.f32"))
    idx, tgt = batch(arr, B, T)
    decay = [P[n] for n, _, _, _, dk in tensors if dk]
    plain = [P[n] for n, _, _, _, dk in tensors if not dk]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": plain, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    ours = arr("losses.f32")
    failures = 0
    worst = 0.0
    for k in range(steps):
        opt.zero_grad()
        loss = gpt_loss(P, L, NH, idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        for grp in opt.param_groups:
            grp["lr"] = lr_at(k, 5, steps, 3e-3, 0.1)
        opt.step()
        ref = loss.item()
        worst = max(worst, abs(ours[k] - ref) / abs(ref))
        if abs(ours[k] - ref) > REL * abs(ref):
            print(f"adamw step {k}: cohort {ours[k]:.7f} torch {ref:.7f}")
            failures += 1
    print(f"adamw: {steps} steps, loss {ours[0]:.5f} -> {ours[-1]:.5f} "
          f"(torch {ref:.5f}), max relative difference {worst:.3g}")
    if not ours[-1] < ours[0] - 0.5:
        print("adamw: the loss did not fall")
        failures += 1
    return failures


if __name__ == "__main__":
    torch.manual_seed(0)
    bad = check_grads() + check_adamw()
    print("FAILED" if bad else "ok")
    sys.exit(1 if bad else 0)
