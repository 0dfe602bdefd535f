"""bench_comm.py: what the collective benchmarks' tables share (bench/comm/hier.sh and
bench/cluster/run.sh import it through bench_lib.sh's bench_comm_py): the rows of `cohort bench
comm` and mpi_comm_bench tables over the rounds of a run, and the median time per size of the
three compared side by side (cohort's hierarchical transport, its flat MPI transport, Open MPI's
own collective)."""
import statistics


def rows(out, name, rounds):
    """size -> [(fields, time_us, wrong)], one entry per round, from OUT/NAME.1 .. NAME.ROUNDS
    (nccl-tests' columns: size count type op redop time algbw busbw #wrong)."""
    by = {}
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{name}.{r}"):
            if line.startswith("#") or not line.strip():
                continue
            f = line.split()
            by.setdefault(int(f[0]), []).append((f, float(f[5]), int(f[8])))
    return by


def trio(out, rounds):
    """The rows of the runs named hier, flat and ompi, and the fields of hier's first row."""
    h, f, m = (rows(out, kind, rounds) for kind in ("hier", "flat", "ompi"))
    return h, f, m, next(iter(h.values()))[0][0]


def medians(size, *runs):
    """Per run, the median time (us) at size over the rounds; and #wrong summed over all."""
    return ([statistics.median(x[1] for x in d[size]) for d in runs],
            sum(x[2] for d in runs for x in d[size]))
