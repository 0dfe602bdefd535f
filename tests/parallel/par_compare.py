"""par_compare.py: compares a parallel run with the single-device run: the loss at every step and
every parameter tensor of the final model (usage: par_compare.py REF.jsonl REF.bin RUN.jsonl
RUN.bin V C L T TOL). Exit 1 with the worst figures when a bound is broken.

The key part of each attention bias (c_attn.b[C:2C]) is left out of the bound and reported on
its own: softmax is invariant to adding the same score to every key, so that bias's gradient is
exactly zero in exact arithmetic and what the run computes is rounding noise that AdamW scales to
full-size steps (m / sqrt(v)); no change of summation order can reproduce noise. It has no effect
on the loss, which the per-step loss bound checks."""
import json
import sys

import numpy as np


def tensors(V, C, L, T):
    """(name, numel) in the arena order of include/cohort/train.h."""
    out = [("wte", V * C), ("wpe", T * C)]
    per = [("ln_1.w", C), ("ln_1.b", C), ("c_attn.w", C * 3 * C), ("c_attn.b", 3 * C),
           ("attn.c_proj.w", C * C), ("attn.c_proj.b", C), ("ln_2.w", C), ("ln_2.b", C),
           ("c_fc.w", C * 4 * C), ("c_fc.b", 4 * C), ("mlp.c_proj.w", 4 * C * C),
           ("mlp.c_proj.b", C)]
    for l in range(L):
        out += [("h.%d.%s" % (l, n), k) for n, k in per]
    return out + [("ln_f.w", C), ("ln_f.b", C)]


def main():
    ref_m, ref_p, run_m, run_p = sys.argv[1:5]
    V, C, L, T = map(int, sys.argv[5:9])
    tol = float(sys.argv[9])
    a = [json.loads(x)["loss"] for x in open(ref_m)]
    b = [json.loads(x)["loss"] for x in open(run_m)]
    if len(a) != len(b) or not a:
        print("step count differs: %d vs %d" % (len(a), len(b)))
        return 1
    loss_rel = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    pa = np.fromfile(ref_p, dtype=np.float32).astype(np.float64)
    pb = np.fromfile(run_p, dtype=np.float32).astype(np.float64)
    names = tensors(V, C, L, T)
    if pa.size != pb.size or pa.size != sum(k for _, k in names):
        print("parameter count differs: %d vs %d" % (pa.size, pb.size))
        return 1
    worst, worst_name, off, kb = 0.0, "", 0, 0.0
    for name, k in names:
        x, y = pa[off:off + k].copy(), pb[off:off + k].copy()
        off += k
        if name.endswith("c_attn.b"):
            kb = max(kb, np.abs(x[C:2 * C] - y[C:2 * C]).max())
            x[C:2 * C] = y[C:2 * C] = 0.0
        r = np.linalg.norm(x - y) / max(np.linalg.norm(x), 1e-30)
        if r > worst:
            worst, worst_name = r, name
    print("steps %d, loss max rel err %.3g, param tensor max rel err %.3g (%s), max abs diff "
          "%.3g; key bias (excluded) max abs diff %.3g" % (len(a), loss_rel, worst, worst_name,
                                                  np.abs(pa - pb).max(), kb))
    return 0 if loss_rel <= tol and worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
