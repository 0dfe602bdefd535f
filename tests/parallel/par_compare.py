"""par_compare.py: compares a parallel run with the single-device run: the loss at every step and
every element of the final parameters (usage: par_compare.py [--tensor-l2] [--noise N.jsonl
N.bin] [--update BEFORE.bin --terms K [--control]] REF.jsonl REF.bin RUN.jsonl RUN.bin V C L T).
Prints one line of figures, then one "broken: ..." line per bound the run breaks; exit
0 when every bound holds, 1 when one is broken, 2 when the two runs cannot be compared (a file
missing or unreadable, another step or parameter count), so that a run which crashed is never
taken for a run which differs.

Held to TOL (the issue's 1e-5), nothing left out: the loss of every step, every tensor's relative
L2 error ||a - b|| / ||a||, and every element's error relative to its tensor's scale,
|a - b| / s with s the largest magnitude in the tensor. A NaN or an infinity anywhere breaks the
bound (every comparison is written so that NaN fails it). The scale, not the element itself, is
the floor of the relative error because float32 AdamW cannot promise more to elements whose
gradient lies within a few eps (1e-8) of zero while v is still small: its step
m / (sqrt(v) + eps) turns their summation rounding into a different step. One device reordering
its own sums shows it (tests/parallel/test_dp_equiv.c: h.1.mlp.c_fc.weight[935], gradients
1.2e-7 then -5.5e-8, ends 2.1e-5 of its own value but 5.8e-6 of its tensor's scale apart).
"floor needed" is printed: the smallest F for which every element passes
|a - b| <= TOL max(|a|, |b|, F s); it says how far the run is from a bound relative to each
element itself. F <= 1 is the element bound itself (max(|a|, |b|) <= s), so it is asserted as
such: the count of elements beyond TOL s must be 0. The key third of c_attn.bias, whose exact
gradient is zero, needs no exception: the engine keeps it at its initial value.

--tensor-l2 holds a run to the loss and per-tensor L2 bounds only, and prints the element figure
without asserting it: for tensor parallelism, which changes the order of the sums inside every
split matrix product (each row-parallel product is a sum of per-rank partial products, the
vocabulary-parallel head sums its softmax over the ranks), so every gradient element carries a
different rounding, and AdamW turns that into whole steps for the few elements whose gradient is
within a few eps of zero. One device shows the same: splitting the same global batch as 4 x 2
instead of 2 x 4 micro-batches moves h.3.mlp.c_proj.weight[798] of the 257-token model by 2.4e-5
of its tensor's scale (docs/parallel.md, "Tensor parallelism").

--noise NOISE.jsonl NOISE.bin: a third run of one device with the reference's model, seed and
global batch that only reorders its own sums (other threads, another micro-batch split). How far
AdamW carries a reordering depends on the CPU's kernels (OpenBLAS picks other blockings, oneDNN
other bf16 kernels, on AVX2, AVX-512 and AMX machines): the same 30 steps of the 257-token model
reach 1.7e-6 on one machine and 9.3e-6 on an AVX2 one, one device against itself. A parallel run
reorders its sums once more than that control, so each bound becomes max(TOL, NOISE_FACTOR x the
control's own figure against the reference): the strategies are held to what the engine can
promise on the machine the test runs on, never to a figure measured on another one. Every bound
and the control's figures are printed. A real difference still breaks it by orders of magnitude:
a learning rate 0.1% off moves the same model's tensors by 1.2e-3 (test_tensor_equiv.sh checks
such a run fails).
--update BEFORE.bin --terms K [--control]: one step of each run from the same state (both resumed
from one checkpoint whose parameters BEFORE.bin holds), for bf16-mixed, where a 30-step trajectory
cannot tell a reordering from a change of precision (bf16 rounding turns any fp32 reordering into
steps of 2^-8 on the operands it moves across a rounding boundary, and those compound: one device
against its own other micro-batch split drifts as far in 30 steps as fp32 against bf16-mixed, 2 to
8x, on every CPU measured). Within one step from one state the two kinds of difference separate.
A path that only reorders fp32 sums changes each sum of at most K terms by at most K u (u = 2^-24,
Higham's gamma_K, relative to the sum of the terms' magnitudes); the few operands that this moves
across a bf16 rounding boundary move by 2^-8 and carry it downstream, but in one step they reach a
minority of the elements, so the median element's update error stays within K u. A change of
precision rounds every operand (2^-9 each): every element moves. The figure asserted is the median
over all parameters of |du_run - du_ref| / |du_ref| (du: the step's update; the denominator at
least 1e-3 of its tensor's largest update, so that an element whose update is near zero does not
divide by it): at most K u, or with --control at least 10 K u (a control run that changed
precision must lie 10x beyond the bound, or the bound says nothing)."""

NOISE_FACTOR = 2.0
import json
import math
import sys

import numpy as np

# The bound, for every figure above. The engine alone, reordering its own sums, reaches 5.8e-6
# of a tensor's scale (floor needed 0.58, docs/parallel.md), so 1e-5 says something about the
# strategies; tests/parallel/test_dp_equiv.c holds dp to the same TOL.
TOL = 1e-5


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


def worse(x, y):
    """x is a worse figure than y: larger, or NaN (which then stays the worst)."""
    return math.isnan(x) and not math.isnan(y) or x > y


def read_run(metrics, params):
    """(the loss of every step, the final parameters as float64) of one run's files."""
    loss = [float(json.loads(x)["loss"]) for x in open(metrics)]
    return loss, np.fromfile(params, dtype=np.float32).astype(np.float64)


def loss_error(a, b, tol):
    """(the worst relative error of b's loss against a's over the steps, the count beyond tol)."""
    worst, over = 0.0, 0
    for x, y in zip(a, b):
        r = abs(x - y) / abs(x) if x else math.inf
        over += not r <= tol
        if worse(r, worst):
            worst = r
    return worst, over


def compare_params(pa, pb, names, tol=TOL):
    """(worst element: (error relative to its tensor's scale, tensor, index, a, b), worst tensor
    L2: (error, tensor), the smallest floor that keeps every element within TOL, the count of
    elements beyond TOL of their tensor's scale)."""
    worst, l2, need, over, off = (-1.0, "", 0, 0.0, 0.0), (-1.0, ""), 0.0, 0, 0
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for name, k in names:
            x, y = pa[off:off + k], pb[off:off + k]
            off += k
            scale = max(np.abs(x).max(), np.abs(y).max())  # NaN when either holds one
            mag = np.maximum(np.abs(x), np.abs(y))
            # an infinity is as far from any value as NaN: no bound may hold for it
            d = np.where(np.isfinite(x) & np.isfinite(y), np.abs(x - y), np.nan)
            rel = d / (scale if scale > 0 else 1.0)
            key = np.where(np.isnan(rel), np.inf, rel)
            i = int(np.argmax(key))
            if worse(float(rel[i]), worst[0]):
                worst = (float(rel[i]), name, i, x[i], y[i])
            r = float(np.linalg.norm(x - y) / max(np.linalg.norm(x), 1e-30))
            if worse(r, l2[0]):
                l2 = (r, name)
            over += int(np.count_nonzero(~(d <= tol * scale)))
            beyond = ~(d <= TOL * mag)
            if beyond.any():
                f = float(np.max(np.where(np.isnan(d), np.inf, d)[beyond]) / (TOL * scale))
                if worse(f, need):
                    need = f
    return worst, l2, need, over


def update_error(before, pa, pb, names):
    """(the median over every parameter of |du_b - du_a| / max(|du_a|, 1e-3 max |du_a| of its
    tensor), the worst tensor's relative L2 error of its update: (error, tensor))."""
    rel, l2, off = [], (-1.0, ""), 0
    for name, k in names:
        da, db = pa[off:off + k] - before[off:off + k], pb[off:off + k] - before[off:off + k]
        off += k
        top = np.abs(da).max()
        d = np.where(np.isfinite(db), np.abs(db - da), np.inf)
        rel.append(d / np.maximum(np.abs(da), 1e-3 * top) if top > 0
                   else np.where(d > 0, np.inf, 0.0))
        r = float(np.linalg.norm(d) / max(np.linalg.norm(da), 1e-30))
        if worse(r, l2[0]):
            l2 = (r, name)
    return float(np.median(np.concatenate(rel))), l2


def update_main(before_path, terms, control, args):
    """--update: one step of REF and RUN from the parameters in before_path (see the top)."""
    ref_m, ref_p, run_m, run_p = args[0:4]
    V, C, L, T = map(int, args[4:8])
    names = tensors(V, C, L, T)
    before = np.fromfile(before_path, dtype=np.float32).astype(np.float64)
    a, pa = read_run(ref_m, ref_p)
    b, pb = read_run(run_m, run_p)
    if not (pa.size == pb.size == before.size == sum(k for _, k in names)) or not a or not b:
        print("parameter or step counts differ: %d, %d, %d; %d and %d steps"
              % (before.size, pa.size, pb.size, len(a), len(b)))
        return 2
    med, (l2, l2_name) = update_error(before, pa, pb, names)
    bound = terms * 2.0 ** -24
    loss = abs(b[-1] - a[-1]) / abs(a[-1]) if a[-1] else math.inf
    print("one step from the same state: loss rel err %.3g; update: median element error %.3g "
          "of its own update (bound %d x 2^-24 = %.3g%s), worst tensor l2 %.3g (%s)"
          % (loss, med, terms, bound, ", the control must lie 10x beyond" if control else "", l2,
             l2_name))
    if control and not med >= 10 * bound:
        print("broken: the control's median %.3g is not 10x beyond the bound %.3g: the bound "
              "cannot tell a change of precision from a reordering" % (med, bound))
        return 1
    if not control and not med <= bound:
        print("broken: update median %.3g beyond %.3g" % (med, bound))
        return 1
    return 0


def main():
    args = sys.argv[1:]
    tensor_l2, noise, before, terms, control = False, None, None, 0, False
    while args[:1] in (["--tensor-l2"], ["--noise"], ["--update"], ["--terms"], ["--control"]):
        if args[0] == "--tensor-l2":
            tensor_l2, args = True, args[1:]
        elif args[0] == "--control":
            control, args = True, args[1:]
        elif args[0] == "--update":
            before, args = args[1], args[2:]
        elif args[0] == "--terms":
            terms, args = int(args[1]), args[2:]
        else:
            noise, args = (args[1], args[2]), args[3:]
    if before is not None:
        if terms < 1:
            print("--update needs --terms K (the longest sum of the step), got %d" % terms)
            return 2
        return update_main(before, terms, control, args)
    ref_m, ref_p, run_m, run_p = args[0:4]
    V, C, L, T = map(int, args[4:8])
    names = tensors(V, C, L, T)
    a, pa = read_run(ref_m, ref_p)
    b, pb = read_run(run_m, run_p)
    if len(a) != len(b) or not a:
        print("step count differs: %d vs %d" % (len(a), len(b)))
        return 2
    if pa.size != pb.size or pa.size != sum(k for _, k in names):
        print("parameter count differs: %d vs %d" % (pa.size, pb.size))
        return 2
    tol_loss = tol_l2 = tol_elem = TOL
    noise_line = ""
    if noise:
        c, pc = read_run(*noise)
        c = c[-len(a):]  # a resumed run's reference is the tail of the reference's steps
        if len(c) != len(a) or pc.size != pa.size:
            print("the noise control differs in steps or parameters: %d vs %d, %d vs %d"
                  % (len(c), len(a), pc.size, pa.size))
            return 2
        n_loss, _ = loss_error(a, c, TOL)
        (n_rel, _, _, _, _), (n_l2, _), _, _ = compare_params(pa, pc, names)
        if not (math.isfinite(n_loss) and math.isfinite(n_l2) and math.isfinite(n_rel)):
            print("the noise control is not finite")
            return 2
        tol_loss = max(TOL, NOISE_FACTOR * n_loss)
        tol_l2 = max(TOL, NOISE_FACTOR * n_l2)
        tol_elem = max(TOL, NOISE_FACTOR * n_rel)
        noise_line = ("; one device reordering its sums: loss %.3g, tensor l2 %.3g, element %.3g, "
                      "so bounds %.3g, %.3g, %.3g" % (n_loss, n_l2, n_rel, tol_loss, tol_l2,
                                                      tol_elem))
    loss_rel, loss_over = loss_error(a, b, tol_loss)
    (rel, name, i, x, y), (l2, l2_name), need, over = compare_params(pa, pb, names, tol_elem)
    nonfinite = int(np.count_nonzero(~np.isfinite(pa)) + np.count_nonzero(~np.isfinite(pb)))
    print("steps %d, loss max rel err %.3g; params: worst tensor l2 rel err %.3g (%s), worst "
          "element err %.3g of its tensor's scale (%s[%d]: %.9g vs %.9g), floor needed %.3g, "
          "max abs diff %.3g" % (len(a), loss_rel, l2, l2_name, rel, name, i, x, y, need,
                                 np.abs(pa - pb).max()) + noise_line)
    broken = []
    if loss_over:
        broken.append("loss: %d of %d steps beyond %.3g relative error (worst %.3g)"
                      % (loss_over, len(a), tol_loss, loss_rel))
    if not l2 <= tol_l2:
        broken.append("tensor: %s's l2 rel err %.3g is beyond %.3g" % (l2_name, l2, tol_l2))
    if not tensor_l2 and (over or not rel <= tol_elem):
        broken.append("element: %d element(s) beyond %.3g of their tensor's scale (worst %s[%d] "
                      "at %.3g, floor needed %.3g)" % (over, tol_elem, name, i, rel, need))
    if nonfinite:
        broken.append("non-finite: %d parameter(s) NaN or infinite" % nonfinite)
    for line in broken:
        print("broken: " + line)
    return 1 if broken else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # an unreadable file is not a difference between the runs
        print("cannot compare: %s: %s" % (type(e).__name__, e))
        sys.exit(2)
