/* mpi_comm_bench.c: the Open MPI anchor of `cohort bench comm`: the same size sweep, inputs,
 * verification and columns (size, count, type, op, time, algbw, busbw, #wrong) for
 * MPI_Allreduce, MPI_Reduce, MPI_Bcast, MPI_Allgather, MPI_Reduce_scatter_block and
 * MPI_Alltoall on f32, f64, i32, i64 and u8 (MPI has no bf16/f16), sum/min/max/prod.
 * usage: mpirun -np N mpi_comm_bench [--op NAME] [--dtype T] [--redop OP] [--min-bytes B]
 *        [--max-bytes B] [--step-factor F] [--iters N] [--warmup N] */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const ops[] = {"allreduce", "reduce", "broadcast", "allgather",
                                  "reduce_scatter", "alltoall"};
static const char *const types[] = {"f32", "f64", "i32", "i64", "u8"};
static const MPI_Datatype mpi_types[] = {MPI_FLOAT, MPI_DOUBLE, MPI_INT32_T, MPI_INT64_T,
                                         MPI_UINT8_T};
static const size_t sizes[] = {4, 8, 4, 8, 1};
static const char *const redops[] = {"sum", "min", "max", "prod"};

typedef struct cfg {
    int op, type, redop, iters, warmup, n, rank;
    double min_bytes, max_bytes, factor;
} cfg;

static double parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    double m = *end == 'K' || *end == 'k' ? 1024 : *end == 'M' ? 1048576 : *end == 'G' ? 1073741824 : 1;
    return v * m;
}

static int find(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s))
            return i;
    fprintf(stderr, "mpi_comm_bench: invalid value '%s'\n", s);
    MPI_Abort(MPI_COMM_WORLD, 2);
    return -1;
}

static double input(const cfg *c, int r, size_t i)
{
    return c->redop == 3 ? 1 + ((size_t)r + i) % 3 / 2 : (double)(((size_t)r + i) % 5);
}

static void set(void *p, size_t i, int t, double v)
{
    switch (t) {
    case 0: ((float *)p)[i] = (float)v; break;
    case 1: ((double *)p)[i] = v; break;
    case 2: ((int32_t *)p)[i] = (int32_t)v; break;
    case 3: ((int64_t *)p)[i] = (int64_t)v; break;
    default: ((uint8_t *)p)[i] = (uint8_t)v; break;
    }
}

static double get(const void *p, size_t i, int t)
{
    switch (t) {
    case 0: return ((const float *)p)[i];
    case 1: return ((const double *)p)[i];
    case 2: return ((const int32_t *)p)[i];
    case 3: return (double)((const int64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

static double fold(const cfg *c, size_t i)
{
    double acc = input(c, 0, i);
    for (int r = 1; r < c->n; r++) {
        double x = input(c, r, i);
        acc = c->redop == 1 ? fmin(acc, x) : c->redop == 2 ? fmax(acc, x)
              : c->redop == 3 ? acc * x : acc + x;
    }
    return acc;
}

static void run(const cfg *c, const void *s, void *r, size_t per)
{
    MPI_Datatype t = mpi_types[c->type];
    MPI_Op op = c->redop == 1 ? MPI_MIN : c->redop == 2 ? MPI_MAX : c->redop == 3 ? MPI_PROD : MPI_SUM;
    int k = (int)per;
    switch (c->op) {
    case 0: MPI_Allreduce(s, r, k, t, op, MPI_COMM_WORLD); break;
    case 1: MPI_Reduce(s, r, k, t, op, 0, MPI_COMM_WORLD); break;
    case 2: MPI_Bcast(r, k, t, 0, MPI_COMM_WORLD); break;
    case 3: MPI_Allgather(s, k, t, r, k, t, MPI_COMM_WORLD); break;
    case 4: MPI_Reduce_scatter_block(s, r, k, t, op, MPI_COMM_WORLD); break;
    default: MPI_Alltoall(s, k, t, r, k, t, MPI_COMM_WORLD); break;
    }
}

static long wrong_of(const cfg *c, const void *r, size_t nr, size_t per)
{
    long wrong = 0;
    for (size_t i = 0; i < nr; i++) {
        size_t blk = per ? i / per : 0, j = per ? i % per : i;
        double want = c->op <= 1 ? fold(c, i) : c->op == 2 ? input(c, 0, i)
                      : c->op == 3 ? input(c, (int)blk, j)
                      : c->op == 4 ? fold(c, (size_t)c->rank * nr + i)
                                   : input(c, (int)blk, (size_t)c->rank * per + j);
        double tol = c->type == 0 ? 1e-6 : c->type == 1 ? 1e-12 : 0;
        wrong += !(fabs(get(r, i, c->type) - want) <= tol * fmax(1, fabs(want)));
    }
    return wrong;
}

static void one_size(const cfg *c, size_t bytes)
{
    size_t esz = sizes[c->type], all = bytes / esz, n = (size_t)c->n;
    int blocked = c->op >= 3;
    size_t per = blocked ? all / n : all;
    size_t ns = c->op == 3 ? per : blocked ? per * n : per, nr = c->op == 4 ? per : blocked ? per * n : per;
    void *s = malloc(ns * esz + 64), *r = malloc(nr * esz + 64);
    for (size_t i = 0; i < ns; i++)
        set(s, i, c->type, input(c, c->rank, i));
    memset(r, 0, nr * esz);
    for (int i = 0; i < c->warmup; i++)
        run(c, s, r, per);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < c->iters; i++)
        run(c, s, r, per);
    double us = (MPI_Wtime() - t0) / c->iters * 1e6, us_max;
    for (size_t i = 0; i < nr; i++)
        set(r, i, c->type, c->op == 2 && c->rank == 0 ? input(c, 0, i) : 0);
    run(c, s, r, per);
    long wrong = c->op == 1 && c->rank ? 0 : wrong_of(c, r, nr, c->op == 4 ? 0 : blocked ? per : 0);
    long wrong_all;
    MPI_Reduce(&us, &us_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    free(s);
    free(r);
    if (c->rank)
        return;
    double algbw = (double)bytes / (us_max * 1e-6) / 1e9;
    double f = c->op == 0 ? 2.0 * (c->n - 1) / c->n : c->op >= 3 ? (double)(c->n - 1) / c->n : 1;
    printf("%12zu %12zu %6s %14s %6s %10.1f %8.2f %8.2f %8ld\n", bytes, per, types[c->type],
           ops[c->op], redops[c->redop], us_max, algbw, algbw * f, wrong_all);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    cfg c = {0, 0, 0, 20, 5, 0, 0, 4096, 256.0 * 1048576, 2};
    MPI_Comm_size(MPI_COMM_WORLD, &c.n);
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--op")) c.op = find(ops, 6, v);
        else if (!strcmp(k, "--dtype")) c.type = find(types, 5, v);
        else if (!strcmp(k, "--redop")) c.redop = find(redops, 4, v);
        else if (!strcmp(k, "--min-bytes")) c.min_bytes = parse_size(v);
        else if (!strcmp(k, "--max-bytes")) c.max_bytes = parse_size(v);
        else if (!strcmp(k, "--step-factor")) c.factor = atof(v);
        else if (!strcmp(k, "--iters")) c.iters = atoi(v);
        else if (!strcmp(k, "--warmup")) c.warmup = atoi(v);
        else if (!c.rank) fprintf(stderr, "mpi_comm_bench: unknown option '%s'\n", k);
    }
    if (!c.rank)
        printf("# mpi_comm_bench: %d ranks, Open MPI, %d iters\n", c.n, c.iters);
    for (double sz = c.min_bytes; sz <= c.max_bytes * 1.0000001; sz *= c.factor)
        one_size(&c, (size_t)sz / sizes[c.type] * sizes[c.type]);
    MPI_Finalize();
    return 0;
}
