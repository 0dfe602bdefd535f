"""test_train_save_bf16.py: `cohort train --save-dtype bf16` writes the weights as a bf16
safetensors file: the fp32 file's names, shapes, order and metadata with dtype "BF16", every
value PyTorch's own fp32 -> bf16 conversion (round to nearest even) of the fp32 master weights
the same run saves with the default --save-dtype fp32; the file loads by its Hugging Face names
into the PyTorch reference model and gives the loss `cohort eval` prints for it. A resume from
it is refused (the master weights are not in it) and --init-from starts from it; bad uses of
the option are usage errors naming the value."""
import atexit
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_ref import shard_loss  # noqa: E402

COHORT = os.environ["COHORT"]
SRC = os.environ["COHORT_SOURCE_DIR"]
failures = 0


def check(ok, what):
    global failures
    if not ok:
        print("FAIL:", what)
        failures += 1


def read_safetensors(path):
    """(header entries in file order, metadata, raw data bytes)."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])  # keeps the file's order
    meta = header.pop("__metadata__", {})
    return list(header.items()), meta, raw[8 + n:]


def main():
    d = tempfile.mkdtemp(prefix="cohort-bf16-")
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    corpus = os.path.join(d, "corpus.txt")
    with open(corpus, "w") as f:
        for p in sorted(glob.glob(os.path.join(SRC, "include", "cohort", "*.h"))):
            f.write(open(p).read())

    def run(*a, ok=True):
        r = subprocess.run([COHORT, *a], capture_output=True, text=True)
        if ok and r.returncode != 0:
            raise SystemExit("cohort %s failed: %s" % (" ".join(a[:2]), r.stderr[-800:]))
        return r

    run("prepare", "--tokenizer", "byte", "--documents", "paragraph", "--val-fraction", "0.1",
        "--out", os.path.join(d, "c"), corpus)
    train = ["train", "--data", os.path.join(d, "c_train_*.bin"), "--vocab", "256", "--layers",
             "2", "--heads", "4", "--dim", "32", "--seq", "24", "--batch", "4", "--steps", "6",
             "--lr", "3e-3", "--threads", "2", "--deterministic"]
    f32, b16 = os.path.join(d, "f32.safetensors"), os.path.join(d, "b16.safetensors")
    run(*train, "--save", f32)
    run(*train, "--save", b16, "--save-dtype", "bf16")

    ef, mf, df = read_safetensors(f32)
    eb, mb, db = read_safetensors(b16)
    check([k for k, _ in ef] == [k for k, _ in eb], "tensor names or order differ")
    mf.pop("cohort.checksum", None), mb.pop("cohort.checksum", None)
    check(mf == mb and mb.get("format") == "pt", "metadata %s vs %s" % (mb, mf))
    off, total, ups = 0, 0, 0
    for (name, a), (_, b) in zip(ef, eb):
        check(a["dtype"] == "F32" and b["dtype"] == "BF16", f"{name}: dtypes {a['dtype']}, "
              f"{b['dtype']}")
        check(a["shape"] == b["shape"], f"{name}: shape {b['shape']} vs {a['shape']}")
        n = int(np.prod(a["shape"]))
        check(b["data_offsets"] == [off, off + 2 * n], f"{name}: offsets {b['data_offsets']}, "
              f"expected contiguous [{off}, {off + 2 * n}]")
        off += 2 * n
        x = np.frombuffer(df[a["data_offsets"][0]:a["data_offsets"][1]], dtype="<f4").copy()
        got = np.frombuffer(db[b["data_offsets"][0]:b["data_offsets"][1]], dtype="<u2")
        want = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view("<u2")
        bad = np.nonzero(got != want)[0]
        check(bad.size == 0, f"{name}: {bad.size} of {n} values are not torch's bf16 of the "
              f"fp32 weights (first at {bad[:1]})")
        # rounding, not truncation: a truncating writer would differ from torch somewhere
        ups += int(np.count_nonzero((x.view("<u4") >> 16).astype("<u2") != want))
        total += n
    check(len(db) == off, f"data {len(db)} bytes, tensors {off}")
    check(ups > total // 4, f"only {ups} of {total} values round up: truncation would pass")
    print(f"{len(eb)} tensors, {total} values: bit-equal to torch's fp32 -> bf16 "
          f"({ups} rounded up)")

    # the bf16 file in the PyTorch reference model by its HF names, against cohort eval of it
    B, T, N = 2, 16, 3
    P = {}
    for name, e in eb:
        u = np.frombuffer(db[e["data_offsets"][0]:e["data_offsets"][1]], dtype="<i2").copy()
        P[name] = torch.from_numpy(u).view(torch.bfloat16).reshape(e["shape"]).double()
    val = sorted(glob.glob(os.path.join(d, "c_val_*.bin")))[0]
    ev = json.loads(run("eval", "--checkpoint", b16, "--data", val, "--batch", str(B), "--seq",
                        str(T), "--batches", str(N), "--json").stdout)
    ref = shard_loss(P, 2, 4, val, B, T, N)
    rel = abs(ev["loss"] - ref) / ref
    print(f"cohort eval of the bf16 file {ev['loss']:.7f}, torch on it {ref:.7f}, rel {rel:.2g}")
    check(rel <= 1e-4, "eval of the bf16 file disagrees with torch")

    # resume refused (with the reason), --init-from accepted
    r = run(*train, "--resume", b16, "--steps", "8", ok=False)
    check(r.returncode != 0 and "holds its weights in BF16" in r.stderr and
          "--init-from" in r.stderr, "resume from bf16: rc %d, %s" % (r.returncode,
                                                                       r.stderr[-400:]))
    r = run(*train, "--init-from", b16, "--steps", "2", ok=False)
    check(r.returncode == 0, "--init-from the bf16 file: %s" % r.stderr[-400:])
    for args, msg in [(["--save", f32, "--save-dtype", "fp16"],
                       "invalid --save-dtype 'fp16': valid are fp32, bf16"),
                      (["--save-dtype", "bf16"], "--save-dtype bf16 needs --save FILE"),
                      (["--save", b16, "--save-dtype", "bf16", "--save-every", "2"],
                       "--save-dtype bf16 with --save-every")]:
        r = run(*train, *args, ok=False)
        check(r.returncode == 2 and msg in r.stderr, "%s: rc %d, %s" % (args, r.returncode,
                                                                         r.stderr[-300:]))
    print("FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
