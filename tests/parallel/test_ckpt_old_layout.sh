#!/usr/bin/env bash
# test_ckpt_old_layout.sh: a checkpoint in the layout before sharded saves (ZeRO's and the
# pipeline's AdamW moments in .zero files named by the state's "zero_index") is refused by
# --resume with its message and exit status 2 (an invalid file named on the command line, as a
# corrupt one is), at zero1, pp 2 and ddp (which the engine's own pair loader would only have
# told that the state lacks moments), and even with --save naming the same path nothing of it
# is deleted or modified; its weights still load (eval).
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"

par_prepare
par_model 256 2 2 64 32
# a one-rank save gives the weights and the moments; the old layout is built from them by hand
"$cohort" train "${model[@]}" --batch 2 --steps 2 --strategy single --save "$work/x.ck" \
    >"$work/single.out" 2>&1 || fail "single save: $(tail -3 "$work/single.out")"
[ -s "$work/x.ck.state2" ] || { fail "no state file x.ck.state2 after a 2-step save"; par_done "-"; }

# The layout of a ZeRO save at dp 2 before sharded saves (par_ckpt.c then): the weights naming
# x.ck.state2 (as today); the state without tensors, naming the index; per rank x.ck.zero2-R-of-2
# (adamw.m, adamw.v and the arena ranges they cover); the index x.ck.zero2.index of
# (rank, begin, end) rows. Each file carries the checksum the writer gives it (crc32c.c: CRC-32C
# over every tensor's name, dtype, shape and data offsets, every metadata pair, then the data).
"$py" - "$work" <<'PYEOF' || fail "building the old layout"
import json, struct, sys
d = sys.argv[1]
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    return head.pop("__metadata__", {}), head, b[8 + n:]
TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    TABLE.append(c)
def crc32c(crc, b):
    crc ^= 0xFFFFFFFF
    for x in b:
        crc = (crc >> 8) ^ TABLE[(crc ^ x) & 0xFF]
    return crc ^ 0xFFFFFFFF
u64 = lambda v: struct.pack("<Q", v)
z = lambda s: s.encode() + b"\0"
def write(path, meta, tensors):  # tensors: [(name, dtype, shape, bytes)]
    head, data, crc = {}, b"", 0
    meta = {k: v for k, v in meta.items() if k != "cohort.checksum"}
    for name, dt, shape, raw in tensors:
        off = [len(data), len(data) + len(raw)]
        head[name] = {"dtype": dt, "shape": shape, "data_offsets": off}
        crc = crc32c(crc, z(name) + z(dt) + u64(len(shape)) + b"".join(map(u64, shape)) +
                     u64(off[0]) + u64(off[1]))
        data += raw
    for k, v in meta.items():
        crc = crc32c(crc, z(k) + z(v))
    meta["cohort.checksum"] = "crc32c:%08x" % crc32c(crc, data)
    head = dict({"__metadata__": meta}, **head)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
meta, head, data = read(d + "/x.ck.state2")
t = {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items()}
n = len(t["adamw.m"]) // 4
h = n // 2 // 64 * 64
meta.update({"zero_index": "x.ck.zero2.index", "zero_dp": "2"})
write(d + "/x.ck.state2", meta, [])
i64 = lambda *v: struct.pack("<%dq" % len(v), *v)
for r, (b, e) in enumerate(((0, h), (h, n))):
    write("%s/x.ck.zero2-%d-of-2" % (d, r), {"step": "2"},
          [("adamw.m", "F32", [e - b], t["adamw.m"][4 * b:4 * e]),
           ("adamw.v", "F32", [e - b], t["adamw.v"][4 * b:4 * e]),
           ("ranges", "I64", [1, 2], i64(b, e))])
write(d + "/x.ck.zero2.index", {"step": "2", "dp": "2"},
      [("ranges", "I64", [2, 3], i64(0, 0, h, 1, h, n))])
PYEOF

listing() { (cd "$work" && sha256sum x.ck*); }
listing >"$work/before"
[ "$(wc -l <"$work/before")" = 5 ] || fail "the old layout is not five files: $(cat "$work/before")"

for mesh in "zero1:--strategy zero1" "pp2:--pp 2" "ddp:--strategy ddp"; do
    name=${mesh%%:*}
    read -ra flags <<<"${mesh#*:}"
    "$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}" --batch 2 --steps 4 \
        "${flags[@]}" --resume "$work/x.ck" --save "$work/x.ck" --save-every 2 >"$work/$name.out" 2>&1
    rc=$?
    [ "$rc" = 2 ] || fail "$name: resuming the old layout exited $rc, expected 2"
    want="checkpoint '$work/x.ck' is in the layout before sharded saves (its optimizer state is in .zero files): it cannot be resumed"
    grep -qF "$want" "$work/$name.out" || fail "$name: no refusal naming the layout: $(tail -3 "$work/$name.out")"
    grep -q "step 1/" "$work/$name.out" && fail "$name: trained after the refusal"
    listing | cmp -s - "$work/before" ||
        fail "$name: the checkpoint's files changed: $(listing | diff "$work/before" - | tail -4)"
    echo "$name: exit $rc; $(grep -oF "is in the layout before sharded saves" "$work/$name.out" |
        head -1 || echo "no refusal")"
done

# what the message promises: the weights still load
"$cohort" eval --checkpoint "$work/x.ck" --data "$work/c_train_000000.bin" --batch 2 --seq 32 \
    --batches 2 --threads 1 >"$work/eval.out" 2>&1 || fail "eval of the old layout's weights: $(tail -3 "$work/eval.out")"
par_done "the layout before sharded saves is refused by --resume and left untouched"
