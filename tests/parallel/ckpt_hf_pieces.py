# ckpt_hf_pieces.py: reads a sharded checkpoint as any safetensors reader would (standard
# library only: struct and json, no torch), assembles every HF tensor from its pieces using only
# the commit file's index and the boxes, and compares each with a plain HF file (cohort
# export's) by name, dtype, shape and bytes; the moments (exp_avg, exp_avg_sq) must be covered
# exactly once, in F32, with the weights' shapes. Not a test itself: test_ckpt_hf_pieces.sh runs it.
#   python3 ckpt_hf_pieces.py CKPT EXPORTED
#   python3 ckpt_hf_pieces.py --swap CKPT.shardS-R-of-N   (plants an error: two pieces of one
#                                                         shape exchange their data)
import json
import os
import struct
import sys

SIZES = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8}


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    return header, raw[8 + n:], raw[:8 + n]


def parse_box(text):
    return [tuple(int(v) for v in d.split(":")) for d in text.split(",")]


def assemble(base, key, entries, files, fail):
    """key's pieces into one row-major buffer; returns (dtype, shape, bytes)."""
    boxes = [parse_box(e[2]) for e in entries]
    ndim = len(boxes[0])
    if ndim == 1:
        boxes = [[(0, 1), b[0]] for b in boxes]
    rows = max(b[0][1] for b in boxes)
    cols = max(b[1][1] for b in boxes)
    dtype = None
    out = bytearray()
    seen = bytearray(rows * cols)
    for (fname, piece, btext), ((r0, r1), (c0, c1)) in zip(entries, boxes):
        path = base + fname
        if path not in files:
            files[path] = read_st(path)
        header, data, _ = files[path]
        t = header.get(piece)
        if t is None:
            fail("%s: piece '%s' is not in '%s'" % (key, piece, fname))
            continue
        if header["__metadata__"].get(piece) != btext:
            fail("%s: '%s' metadata gives piece '%s' box %r, the index %r" %
                 (key, fname, piece, header["__metadata__"].get(piece), btext))
        want = [r1 - r0, c1 - c0] if ndim == 2 else [c1 - c0]
        if t["shape"] != want:
            fail("%s: piece '%s' has shape %s, its box %s" % (key, piece, t["shape"], want))
            continue
        if dtype is None:
            dtype = t["dtype"]
            out = bytearray(rows * cols * SIZES[dtype])
        if t["dtype"] != dtype:
            fail("%s: pieces of dtypes %s and %s" % (key, dtype, t["dtype"]))
            continue
        es = SIZES[dtype]
        b0, _ = t["data_offsets"]
        w = (c1 - c0) * es
        for r in range(r0, r1):
            at = (r * cols + c0) * es
            out[at:at + w] = data[b0 + (r - r0) * w:b0 + (r - r0 + 1) * w]
            for c in range(r * cols + c0, r * cols + c1):
                seen[c] += 1
    if any(v != 1 for v in seen):
        bad = next(i for i, v in enumerate(seen) if v != 1)
        fail("%s: element (%d, %d) is in %d pieces, expected exactly one" %
             (key, bad // cols, bad % cols, seen[bad]))
    return dtype, ([rows, cols] if ndim == 2 else [cols]), bytes(out)


def check(ckpt, exported):
    errors = []
    fail = errors.append
    header, _, _ = read_st(ckpt)
    meta = header["__metadata__"]
    index = json.loads(meta["index"])
    ref_header, ref_data, _ = read_st(exported)
    ref = {k: v for k, v in ref_header.items() if k != "__metadata__"}
    files = {}
    weights = [k for k in index if not k.endswith((".exp_avg", ".exp_avg_sq"))]
    if sorted(weights) != sorted(ref):
        fail("the index's weights %s are not the export's tensors %s" %
             (sorted(set(weights) ^ set(ref)), ""))
    for key in weights:
        dtype, shape, data = assemble(ckpt, key, index[key], files, fail)
        t = ref.get(key)
        if t is None:
            continue
        b0, b1 = t["data_offsets"]
        if (dtype, shape) != (t["dtype"], t["shape"]):
            fail("%s: assembled %s %s, exported %s %s" % (key, dtype, shape, t["dtype"],
                                                          t["shape"]))
        elif data != ref_data[b0:b1]:
            fail("%s: assembled bytes differ from the export's" % key)
        for state in (".exp_avg", ".exp_avg_sq"):
            if key + state not in index:
                fail("%s: the index has no '%s'" % (key, key + state))
                continue
            mdt, mshape, _ = assemble(ckpt, key + state, index[key + state], files, fail)
            if (mdt, mshape) != ("F32", t["shape"]):
                fail("%s%s: assembled %s %s, expected F32 %s" % (key, state, mdt, mshape,
                                                                   t["shape"]))
    pieces = sum(len(v) for v in index.values())
    for e in errors[:10]:
        print("FAIL:", e)
    if errors:
        return 1
    print("%d tensors (and their exp_avg, exp_avg_sq) assembled from %d pieces in %d files: "
          "equal to the export's" % (len(weights), pieces, len(files)))
    return 0


def swap(shard):
    """Plant: the first two pieces of the same shape and dtype exchange their data."""
    header, data, _ = read_st(shard)
    names = [k for k in header if k != "__metadata__"]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ta, tb = header[a], header[b]
            if (ta["shape"], ta["dtype"]) == (tb["shape"], tb["dtype"]):
                ta["data_offsets"], tb["data_offsets"] = tb["data_offsets"], ta["data_offsets"]
                text = json.dumps(header).encode()
                text += b" " * (-(8 + len(text)) % 8)
                with open(shard, "wb") as f:
                    f.write(struct.pack("<Q", len(text)) + text + data)
                print("planted: '%s' and '%s' exchanged their data" % (a, b))
                return 0
    print("no two pieces of one shape in", shard)
    return 2


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--swap":
        sys.exit(swap(sys.argv[2]))
    if len(sys.argv) != 3:
        sys.exit("usage: ckpt_hf_pieces.py CKPT EXPORTED | --swap SHARD_FILE")
    sys.exit(check(sys.argv[1], sys.argv[2]))
