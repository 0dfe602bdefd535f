"""test_data_st_python.py: safetensors interoperability with an independent reader and writer:
a file cohort writes is parsed by the format's rules alone (json + numpy.frombuffer) and loaded
into PyTorch with the expected values; a file written here (F32, F16, BF16, I64, I32, U8, a
scalar, tensors in another order than their data, no cohort checksum) reads back exactly in
cohort."""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

TOOL = os.path.join(os.environ["COHORT_BUILD_DIR"], "tests", "data", "data_st_tool")
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)


DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32,
          "U8": np.uint8, "F16": np.float16}


def parse(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    check((8 + n) % 8 == 0, "data does not start 8-byte aligned")
    check(raw[8:8 + n].rstrip(b" ").endswith(b"}"), "header padding is not spaces")
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    out, spans = {}, []
    for name, e in header.items():
        b, end = e["data_offsets"]
        spans.append((b, end))
        if e["dtype"] == "BF16":
            u16 = np.frombuffer(data[b:end], dtype="<u2").astype(np.uint32) << 16
            arr = u16.view(np.float32).reshape(e["shape"])
        else:
            arr = np.frombuffer(data[b:end], dtype=np.dtype(DTYPES[e["dtype"]]).newbyteorder("<"))
            arr = arr.reshape(e["shape"])
        out[name] = arr
    spans.sort()
    at = 0
    for b, end in spans:
        check(b == at, "gap or overlap at %d" % b)
        at = end
    check(at == len(data), "data section not fully covered")
    return meta, out


def test_cohort_file_in_numpy_and_torch(tmp):
    path = os.path.join(tmp, "cohort.safetensors")
    subprocess.run([TOOL, "write", path], check=True)
    meta, t = parse(path)
    check(meta.get("format") == "pt", "metadata format")
    check(meta.get("cohort.checksum", "").startswith("crc32c:"), "checksum entry")
    w = (np.arange(12, dtype=np.float32) * 0.25 - 1.0).reshape(3, 4)
    check(np.array_equal(t["transformer.h.0.attn.c_attn.weight"], w), "weight values")
    check(np.array_equal(t["transformer.h.0.attn.c_attn.bias"],
                         np.array([1 / (i + 1) for i in range(5)], dtype=np.float32)), "bias")
    check(t["indices"].tolist() == [[-1, 1], [2**63 - 1, -2**63]], "i64 values")
    check(t["half"].tolist() == [1.0, -0.5], "bf16 values")
    check(t["mask"].tolist() == [1, 0, 255], "u8 values")
    check(t["scalar"].shape == () and int(t["scalar"]) == 42, "scalar")
    check(t["empty"].shape == (0, 3), "empty shape")
    # Into a PyTorch module by name, as a state dict.
    lin = torch.nn.Linear(3, 4)
    sd = {"weight": torch.from_numpy(t["transformer.h.0.attn.c_attn.weight"].T.copy()),
          "bias": torch.from_numpy(t["transformer.h.0.attn.c_attn.bias"][:4].copy())}
    lin.load_state_dict(sd)
    y = lin(torch.ones(1, 3)).detach().numpy()
    check(np.allclose(y, np.ones((1, 3), np.float32) @ w + t["transformer.h.0.attn.c_attn.bias"][:4]),
          "torch forward with loaded weights")


def write_independent(path, tensors, meta):
    """A safetensors writer from the format description; data order reversed vs the header."""
    header, blobs, off = {}, [], 0
    for name, (dtype, shape, raw) in reversed(list(tensors.items())):
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header = {"__metadata__": meta, **dict(reversed(list(header.items())))}
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_independent_file_in_cohort(tmp):
    path = os.path.join(tmp, "numpy.safetensors")
    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((4, 5)).astype(np.float32)
    f16 = np.array([0.5, -2.0, 65504.0, 6e-8], dtype=np.float16)
    bf16 = torch.tensor([1.5, -3.25, 1e30], dtype=torch.bfloat16)
    bf16_raw = bf16.view(torch.int16).numpy().astype("<i2").tobytes()
    i64 = np.array([3, -9, 2**40], dtype=np.int64)
    tensors = {
        "wte": ("F32", [4, 5], f32.astype("<f4").tobytes()),
        "h16": ("F16", [4], f16.astype("<f2").tobytes()),
        "b16": ("BF16", [3], bf16_raw),
        "ids": ("I64", [3], i64.astype("<i8").tobytes()),
        "n": ("I32", [], np.array(7, dtype="<i4").tobytes()),
        "m": ("U8", [2], bytes([9, 200])),
    }
    write_independent(path, tensors, {"format": "pt"})
    out = subprocess.run([TOOL, "read", path], check=True, capture_output=True, text=True).stdout
    got = {d["name"]: d for d in map(json.loads, out.splitlines())}
    check(set(got) == set(tensors), "tensor names: %s" % sorted(got))
    check(got["wte"]["shape"] == [4, 5] and np.array_equal(np.array(got["wte"]["values"], np.float32),
                                                           f32.reshape(-1)), "f32 values")
    # %.9g text round-trips float32 exactly: compare as float32.
    check(np.array_equal(np.array(got["h16"]["values"], np.float32), f16.astype(np.float32)),
          "f16 -> f32")
    check(np.array_equal(np.array(got["b16"]["values"], np.float32), bf16.float().numpy()),
          "bf16 -> f32")
    check(got["ids"]["values"] == i64.tolist(), "i64 values")
    check(got["n"]["shape"] == [] and got["n"]["values"] == [7], "scalar")
    check(got["m"]["values"] == [9, 200], "u8")
    # Corrupt: data_offsets past the data; cohort refuses, naming the file and tensor.
    raw = bytearray(open(path, "rb").read())
    (n,) = struct.unpack("<Q", raw[:8])
    bad = os.path.join(tmp, "bad.safetensors")
    open(bad, "wb").write(raw[:len(raw) - 2])
    r = subprocess.run([TOOL, "read", bad], capture_output=True, text=True)
    check(r.returncode != 0 and "bad.safetensors" in r.stderr, "truncated file accepted: %r" % r.stderr)


def main():
    if not os.path.exists(TOOL):
        print("FAIL: %s not built" % TOOL)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        test_cohort_file_in_numpy_and_torch(tmp)
        test_independent_file_in_cohort(tmp)
    print("%d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
