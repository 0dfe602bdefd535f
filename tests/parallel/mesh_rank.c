/* mesh_rank.c: one rank of test_parallel_mesh.sh, started by `cohort run`: builds each mesh
 * shape named on the command line over the world and checks it against the layout of
 * include/cohort/parallel.h, worked out here from the sizes alone.
 * usage: mesh_rank DPxPPxTP... [--refuse DPxPPxTP...]
 *   a shape: every rank's coordinates, each axis communicator's size, rank and members (the
 *            world ranks an all-gather over it returns, in order), and a sum of 1 << world rank
 *            over each axis that only the axis' members can have contributed to
 *   --refuse: the shapes after it must fail with COH_ERR_INVALID naming the shape and the
 *            world size, leaving *out NULL
 * Prints one line per shape on rank 0; exits 1 when any check on this rank failed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/parallel.h"
#include "rank_expect.h"

static int rank, bad;

enum { DP, PP, TP, AXES };
static const char *const AXIS[AXES] = {"dp", "pp", "tp"};

/* The world rank at coordinates x[DP], x[PP], x[TP] of sizes n[]: Megatron's order, tp
 * fastest, then dp, then pp. */
static int rank_at(const int *n, const int *x)
{
    return (x[PP] * n[DP] + x[DP]) * n[TP] + x[TP];
}

/* This rank's coordinates, found by walking the whole grid (not by inverting the formula the
 * way the mesh does); 0 when no coordinates give this rank. */
static int coords_of(const int *n, int r, int *x)
{
    int y[AXES], found = 0;
    for (y[DP] = 0; y[DP] < n[DP]; y[DP]++)
        for (y[PP] = 0; y[PP] < n[PP]; y[PP]++)
            for (y[TP] = 0; y[TP] < n[TP]; y[TP]++)
                if (rank_at(n, y) == r) {
                    memcpy(x, y, sizeof y);
                    found++;
                }
    return found == 1;
}

static int parse_shape(const char *s, int *n)
{
    char end;
    return sscanf(s, "%dx%dx%d%c", &n[DP], &n[PP], &n[TP], &end) == 3;
}

/* Members of this rank's group along axis a: its coordinates with x[a] running 0..n[a]-1. */
static void members(const int *n, const int *x, int a, int *out)
{
    int y[AXES];
    memcpy(y, x, sizeof y);
    for (y[a] = 0; y[a] < n[a]; y[a]++)
        out[y[a]] = rank_at(n, y);
}

static void check_axis(const char *shape, const int *n, const int *x, int a, coh_comm *c,
                       int world)
{
    EXPECT(c != NULL, "mesh %s: no %s communicator", shape, AXIS[a]);
    if (!c)
        return;
    EXPECT(coh_comm_size(c) == n[a], "mesh %s: %s communicator of %d ranks, want %d", shape,
           AXIS[a], coh_comm_size(c), n[a]);
    EXPECT(coh_comm_rank(c) == x[a], "mesh %s: rank %d in the %s communicator, want %d", shape,
           coh_comm_rank(c), AXIS[a], x[a]);
    if (coh_comm_size(c) != n[a])
        return; /* the collectives below would disagree on their sizes */
    int want[64], got[64];
    members(n, x, a, want);
    int32_t me = world;
    int32_t *all = calloc((size_t)n[a], sizeof *all);
    coh_status st = coh_allgather(c, &me, all, 1, COH_I32);
    EXPECT(st == COH_OK, "mesh %s: all-gather over %s: %s", shape, AXIS[a], coh_last_error());
    int same = 1;
    for (int i = 0; i < n[a]; i++) {
        got[i] = all[i];
        same &= got[i] == want[i];
    }
    if (!st && !same) {
        char gs[256] = "", ws[256] = "";
        for (int i = 0; i < n[a]; i++) {
            snprintf(gs + strlen(gs), sizeof gs - strlen(gs), " %d", got[i]);
            snprintf(ws + strlen(ws), sizeof ws - strlen(ws), " %d", want[i]);
        }
        EXPECT(same, "mesh %s: %s group is world ranks%s, want%s", shape, AXIS[a], gs, ws);
    }
    free(all);
    /* distinct bits: a sum from any rank outside the group shows in the result */
    int64_t bit = (int64_t)1 << world, sum = 0, expect = 0;
    for (int i = 0; i < n[a]; i++)
        expect += (int64_t)1 << want[i];
    st = coh_allreduce(c, &bit, &sum, 1, COH_I64, COH_SUM);
    EXPECT(st == COH_OK && sum == expect, "mesh %s: sum over %s is 0x%llx, want 0x%llx (%s)",
           shape, AXIS[a], (unsigned long long)sum, (unsigned long long)expect,
           st ? coh_last_error() : "ok");
}

static void check_shape(coh_comm *world, const char *shape)
{
    int n[AXES], x[AXES] = {0}, size = coh_comm_size(world);
    if (!parse_shape(shape, n) || (long)n[DP] * n[PP] * n[TP] != size || size > 62) {
        EXPECT(0, "bad test shape '%s' for %d ranks", shape, size);
        return;
    }
    EXPECT(coords_of(n, rank, x), "mesh %s: rank %d has no coordinates", shape, rank);
    coh_mesh *m = NULL;
    coh_status st = coh_mesh_create(world, n[DP], n[PP], n[TP], &m);
    EXPECT(st == COH_OK && m, "mesh %s: create: %s", shape, coh_last_error());
    if (st || !m)
        return;
    EXPECT(m->dp == n[DP] && m->pp == n[PP] && m->tp == n[TP], "mesh %s: sizes %dx%dx%d", shape,
           m->dp, m->pp, m->tp);
    EXPECT(m->world == world, "mesh %s: world is not the one given", shape);
    EXPECT(m->dp_rank == x[DP] && m->pp_rank == x[PP] && m->tp_rank == x[TP],
           "mesh %s: coordinates (dp %d, pp %d, tp %d), want (%d, %d, %d)", shape, m->dp_rank,
           m->pp_rank, m->tp_rank, x[DP], x[PP], x[TP]);
    coh_comm *axis[AXES] = {m->dp_comm, m->pp_comm, m->tp_comm};
    for (int a = 0; a < AXES; a++)
        check_axis(shape, n, x, a, axis[a], rank);
    coh_mesh_destroy(m);
}

static void check_refused(coh_comm *world, const char *shape)
{
    int n[AXES], size = coh_comm_size(world);
    if (!parse_shape(shape, n)) {
        EXPECT(0, "bad test shape '%s'", shape);
        return;
    }
    static coh_mesh sentinel;
    coh_mesh *m = &sentinel; /* must come back NULL */
    coh_err_clear();
    coh_status st = coh_mesh_create(world, n[DP], n[PP], n[TP], &m);
    char want_shape[64], want_size[64];
    snprintf(want_shape, sizeof want_shape, "'%s'", shape);
    snprintf(want_size, sizeof want_size, "world size %d", size);
    const char *msg = coh_last_error();
    EXPECT(st == COH_ERR_INVALID, "mesh %s on %d ranks: %s, want COH_ERR_INVALID", shape, size,
           coh_status_name(st));
    EXPECT(strstr(msg, want_shape) && strstr(msg, want_size),
           "mesh %s: message '%s' lacks %s or '%s'", shape, msg, want_shape, want_size);
    EXPECT(m == NULL, "mesh %s: *out not cleared on failure", shape);
    if (st == COH_OK && m != &sentinel)
        coh_mesh_destroy(m);
}

int main(int argc, char **argv)
{
    coh_comm *world;
    if (coh_comm_create(COH_COMM_AUTO, &world)) {
        fprintf(stderr, "mesh_rank: %s\n", coh_last_error());
        return 1;
    }
    rank = coh_comm_rank(world);
    int refuse = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--refuse")) {
            refuse = 1;
            continue;
        }
        int before = bad;
        if (refuse)
            check_refused(world, argv[i]);
        else
            check_shape(world, argv[i]);
        /* every rank learns whether any failed, so rank 0's line speaks for the job */
        int64_t failed = bad > before, any = 0;
        if (coh_allreduce(world, &failed, &any, 1, COH_I64, COH_SUM))
            EXPECT(0, "mesh %s: world all-reduce: %s", argv[i], coh_last_error());
        if (rank == 0)
            printf("%s mesh %s%s on %d ranks\n", any ? "FAIL" : "ok  ", argv[i],
                   refuse ? " refused" : "", coh_comm_size(world));
    }
    coh_comm_destroy(world);
    return bad ? 1 : 0;
}
