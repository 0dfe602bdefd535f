"""test_launch_ddp.py: an unmodified PyTorch DDP training script (gloo) runs under cohort run:
2 processes on one node, 2 nodes with one launcher each on loopback, and two jobs at once with
--master-port 0. Each rank reports its rank, world size and final loss; the losses must equal
a single-process run of the same model on the full batch (DDP averages the shard gradients)."""
import json
import os
import random
import socket
import subprocess
import sys
import tempfile

COHORT = os.environ["COHORT"]
PY = sys.executable

SCRIPT = r'''
import json, os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
g = torch.Generator().manual_seed(1)
X = torch.randn(16, 8, generator=g)
y = torch.randn(16, 1, generator=g)
if "RANK" in os.environ:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    net = DDP(model)
else:
    rank, world, net = 0, 1, model
with torch.no_grad():
    initial = torch.nn.functional.mse_loss(model(X), y).item()
Xl, yl = X.chunk(world)[rank], y.chunk(world)[rank]
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(20):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(net(Xl), yl)
    loss.backward()
    opt.step()
with torch.no_grad():
    final = torch.nn.functional.mse_loss(model(X), y).item()
print(json.dumps({"rank": rank, "world": world, "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
                  "loss": final, "initial": initial, "port": os.environ.get("MASTER_PORT"),
                  "job": os.environ.get("TORCHELASTIC_RUN_ID")}), flush=True)
if world > 1:
    dist.destroy_process_group()
'''

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def reports(text):
    """The JSON lines the ranks printed, behind cohort's '[rankN]: ' prefix."""
    out = []
    for line in text.splitlines():
        if line.startswith("[rank") and "]: {" in line:
            prefix, _, body = line.partition("]: ")
            rec = json.loads(body)
            rec["prefix_rank"] = int(prefix[5:])
            out.append(rec)
    return out


def free_port():
    """A port (and the next, cohort's control port) free now, below the kernel's ephemeral range,
    so that no other test's outgoing connection takes it before the launcher binds it."""
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    for _ in range(1000):
        p = random.randrange(20000, min(lo, 29000) - 1)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("", p))
                b.bind(("", p + 1))
            return p
        except OSError:
            pass
    raise RuntimeError("no free port pair below the ephemeral range")


def start(args):
    env = dict(os.environ, COHORT_LOG="warn")
    return subprocess.Popen([COHORT, "run"] + args + ["--", PY, script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def finish(p, name):
    out, err = p.communicate(timeout=240)
    check(p.returncode == 0, "%s: exit code %d, stderr: %s" % (name, p.returncode, err[-2000:]))
    return reports(out)


def check_job(recs, name, world, ref):
    check(sorted(r["rank"] for r in recs) == list(range(world)),
          "%s: ranks %s" % (name, [r["rank"] for r in recs]))
    for r in recs:
        check(r["world"] == world, "%s: rank %d saw world %d" % (name, r["rank"], r["world"]))
        check(r["prefix_rank"] == r["rank"], "%s: prefix [rank%d] on rank %d's line" % (name, r["prefix_rank"], r["rank"]))
        check(abs(r["loss"] - ref) <= 1e-5 * max(abs(ref), 1e-6),
              "%s: rank %d final loss %.9g differs from the single-process %.9g" % (name, r["rank"], r["loss"], ref))
    check(len({r["job"] for r in recs}) == 1, "%s: ranks disagree on the job id" % name)


with tempfile.TemporaryDirectory() as tmp:
    script = os.path.join(tmp, "train_ddp.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    single = subprocess.run([PY, script], capture_output=True, text=True, env=env, timeout=120)
    check(single.returncode == 0, "single-process run failed: " + single.stderr[-2000:])
    single_rec = json.loads(single.stdout.strip().splitlines()[-1])
    ref = single_rec["loss"]
    # The model must actually train, or equal losses would prove little.
    check(ref < 0.8 * single_rec["initial"], "the reference did not train: %s" % single_rec)

    # 1. One node, 2 processes.
    recs = finish(start(["--nproc-per-node", "2", "--master-port", str(free_port())]), "nproc 2")
    check_job(recs, "nproc 2", 2, ref)
    check(sorted(r["local_rank"] for r in recs) == [0, 1], "nproc 2: local ranks")

    # 2. Two nodes on loopback, one launcher each.
    port = free_port()
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port)]
    n0 = start(common + ["--node-rank", "0"])
    n1 = start(common + ["--node-rank", "1"])
    recs = finish(n0, "node 0") + finish(n1, "node 1")
    check_job(recs, "2 nodes", 2, ref)
    check(all(r["local_rank"] == 0 for r in recs), "2 nodes: local ranks")

    # 3. Two jobs at once, each with a free master port of its own.
    a = start(["--nproc-per-node", "2", "--master-port", "0"])
    b = start(["--nproc-per-node", "2", "--master-port", "0"])
    ra, rb = finish(a, "job a"), finish(b, "job b")
    check_job(ra, "job a", 2, ref)
    check_job(rb, "job b", 2, ref)
    pa, pb = {r["port"] for r in ra}, {r["port"] for r in rb}
    check(len(pa) == 1 and len(pb) == 1 and pa != pb and "29500" not in pa | pb,
          "concurrent jobs' master ports: %s and %s" % (pa, pb))
    check({r["job"] for r in ra} != {r["job"] for r in rb}, "concurrent jobs share a job id")

print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
