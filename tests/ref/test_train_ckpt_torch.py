"""test_train_ckpt_torch.py: a checkpoint written by `cohort train` loads by its Hugging Face
GPT-2 names into the PyTorch reference model and gives the loss `cohort eval` prints."""
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


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        assert e["dtype"] == "F32", name
        a, b = e["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(e["shape"])
    return out, meta


def main():
    d = tempfile.mkdtemp(prefix="cohort-ckpt-")
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    corpus = os.path.join(d, "corpus.txt")
    with open(corpus, "w") as f:
        for p in sorted(glob.glob(os.path.join(SRC, "include", "cohort", "*.h"))):
            f.write(open(p).read())
    run = lambda *a: subprocess.run([COHORT, *a], check=True, capture_output=True, text=True)
    run("prepare", "--tokenizer", "byte", "--documents", "paragraph", "--val-fraction", "0.1",
        "--out", os.path.join(d, "c"), corpus)
    ck = os.path.join(d, "model.safetensors")
    run("train", "--data", os.path.join(d, "c_train_*.bin"), "--vocab", "256", "--layers", "2",
        "--heads", "4", "--dim", "32", "--seq", "24", "--batch", "4", "--steps", "6", "--lr",
        "3e-3", "--save", ck, "--threads", "2")
    B, T, N = 2, 16, 3
    val = sorted(glob.glob(os.path.join(d, "c_val_*.bin")))[0]
    ev = json.loads(run("eval", "--checkpoint", ck, "--data", val, "--batch", str(B), "--seq",
                        str(T), "--batches", str(N), "--json").stdout)
    tensors, meta = read_safetensors(ck)
    failures = 0
    expect = {"transformer.h.0.attn.c_attn.weight": [32, 96], "transformer.h.1.mlp.c_fc.weight":
              [32, 128], "transformer.h.1.mlp.c_proj.weight": [128, 32],
              "transformer.wte.weight": [256, 32], "transformer.wpe.weight": [24, 32]}
    for name, shape in expect.items():
        if list(tensors[name].shape) != shape:
            print(f"{name}: shape {tensors[name].shape}, expected {shape} (HF Conv1D [in, out])")
            failures += 1
    if meta.get("format") != "pt" or len(tensors) != 2 + 12 * 2 + 2:
        print(f"metadata {meta}, {len(tensors)} tensors")
        failures += 1
    P = {k: torch.tensor(v.astype(np.float64)) for k, v in tensors.items()}
    ref = shard_loss(P, 2, 4, val, B, T, N)
    rel = abs(ev["loss"] - ref) / ref
    print(f"cohort eval {ev['loss']:.7f}, torch on the checkpoint {ref:.7f}, relative {rel:.2g}")
    if rel > 1e-4:
        failures += 1
    print("FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
