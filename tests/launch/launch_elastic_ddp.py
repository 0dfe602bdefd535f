"""launch_elastic_ddp.py: a PyTorch DDP training script (gloo) that checkpoints every step and resumes from its checkpoint at whatever world size it is restarted with; for test_launch_elastic.sh. DDP averages the gradients of equal shards of the full batch, so the result after N steps equals one process on the full batch, whatever the world size of each round. With FAIL_FILE set, rank 1 of attempt 1 fails once that file exists (a restart on demand)."""
import json, os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
ckpt, steps = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
g = torch.Generator().manual_seed(1)
X = torch.randn(12, 8, generator=g)
y = torch.randn(12, 1, generator=g)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
start = 0
if os.path.exists(ckpt):
    st = torch.load(ckpt)
    model.load_state_dict(st["model"]); opt.load_state_dict(st["opt"]); start = st["step"]
if "RANK" in os.environ:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    net = DDP(model)
else:
    rank, world, net = 0, 1, model
Xl, yl = X.chunk(world)[rank], y.chunk(world)[rank]
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
print(f"started attempt {attempt} world {world} rank {rank} step {start} pid {os.getpid()}", file=sys.stderr, flush=True)
fail_file = os.environ.get("FAIL_FILE")  # attempt 1's rank 1 fails after a step once it exists
for step in range(start, steps):
    if fail_file and attempt == 1 and rank == 1 and step > start:
        while not os.path.exists(fail_file):
            time.sleep(0.05)
        sys.exit(1)
    opt.zero_grad()
    torch.nn.functional.mse_loss(net(Xl), yl).backward()
    opt.step()
    if rank == 0:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    if world > 1:
        dist.barrier()
    time.sleep(float(os.environ.get("STEP_SLEEP", "0")))
with torch.no_grad():
    final = torch.nn.functional.mse_loss(model(X), y).item()
print(json.dumps({"rank": rank, "world": world, "start": start, "loss": final}), flush=True)
if world > 1:
    dist.destroy_process_group()
