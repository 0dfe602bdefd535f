"""bench_launch.py: time to start and finish N ranks of /bin/true with cohort run, Open MPI's
mpirun, Debian's torchrun, and a hand-rolled Python launcher that imports torch (the floor of
any torch-based launcher), side by side in one run; prints medians and ratios to cohort.

usage: /usr/bin/python3 bench/launch/bench_launch.py [--cohort build/cohort] [--ranks 2,8]
"""
import argparse
import os
import shutil
import statistics
import sys
import time

HAND_ROLLED = r'''
import os, subprocess, sys
import torch.distributed  # what any torch-based launcher pays before its first worker
n = int(sys.argv[1])
procs = []
for r in range(n):
    env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n),
               MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    procs.append(subprocess.Popen(["/bin/true"], env=env))
sys.exit(max(p.wait() for p in procs))
'''


def run_once(argv, env):
    """Wall time (s) and exit code of one run, output discarded."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    actions = [(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)]
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    _, status = os.waitpid(pid, 0)
    t1 = time.perf_counter()
    os.close(devnull)
    return t1 - t0, os.waitstatus_to_exitcode(status)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cohort", default="build/cohort")
    ap.add_argument("--ranks", default="2,8")
    ap.add_argument("--reps", type=int, default=30, help="runs of cohort and of the baseline")
    args = ap.parse_args()
    cohort = os.path.abspath(args.cohort)
    env = dict(os.environ, COHORT_LOG="warn", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    mpirun, torchrun = shutil.which("mpirun"), shutil.which("torchrun")
    true = "/bin/true"
    rows = []
    for n in [int(x) for x in args.ranks.split(",")]:
        cmds = [("spawn /bin/true once (floor)", [true], args.reps),
                ("cohort run", [cohort, "run", "-n", str(n), true], args.reps)]
        if mpirun:
            cmds.append(("mpirun", [mpirun, "--allow-run-as-root", "--oversubscribe", "-n", str(n), true], 10))
        if torchrun:
            cmds.append(("torchrun (Debian)", [torchrun, "--nproc_per_node", str(n), "--no_python", true], 5))
        cmds.append(("python+torch launcher (hand-rolled)", ["/usr/bin/python3", "-c", HAND_ROLLED, str(n)], 5))
        times = {name: [] for name, _, _ in cmds}
        codes = {name: set() for name, _, _ in cmds}
        for r in range(max(k for _, _, k in cmds)):  # interleaved rounds: noise hits all alike
            for name, argv, k in cmds:
                if r < k:
                    t, code = run_once(argv, env)
                    times[name].append(t)
                    codes[name].add(code)
        base = statistics.median(times["cohort run"])
        for name, _, _ in cmds:
            med = statistics.median(times[name])
            rows.append((n, name, len(times[name]), med, min(times[name]), med / base,
                         ",".join(str(c) for c in sorted(codes[name]))))
        if codes["cohort run"] != {0}:
            print("cohort run failed: exit codes %s" % codes["cohort run"], file=sys.stderr)
            return 1
    print("| ranks | launcher | runs | median ms | min ms | x cohort | exit code |")
    print("|---|---|---|---|---|---|---|")
    for n, name, k, med, mn, ratio, codes_s in rows:
        print("| %d | %s | %d | %.1f | %.1f | %.2f | %s |" % (n, name, k, med * 1e3, mn * 1e3, ratio, codes_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
