/* comm_rank_cases.c: the correctness sweep of the comm tests: every op x type x size class
 * (0, 1, prime, large) x in-place/out-of-place x arena/plain buffers, each element checked
 * against a result computed here from the known inputs of every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_rank.h"

static const size_t sizes[] = {0, 1, 1009, 65537};

int64_t rank_input(int r, size_t i, coh_redop op, coh_dtype t, int n)
{
    int64_t k = (int64_t)((r * 7 + i * 13) % 17);
    if (op == COH_PROD) {
        int64_t v = 1 + ((r + i) % 3 == 0);
        return t != COH_U8 && (r * 3 + i) % 5 == 0 ? -v : v;
    }
    if (op == COH_AVG) /* a multiple of n, so the average is exact */
        return t == COH_U8 ? n * (k % 4) : n * (k - 8);
    return t == COH_U8 ? k % 9 : k - 8;
}

/* f16 and bf16 encodings of small integers, built from the definition of the formats. */
static uint16_t half_of_int(int64_t v, int bf16)
{
    if (!v)
        return 0;
    uint16_t sign = v < 0 ? 0x8000 : 0;
    uint64_t a = (uint64_t)(v < 0 ? -v : v);
    int e = 63 - __builtin_clzll(a);
    int mbits = bf16 ? 7 : 10, bias = bf16 ? 127 : 15;
    uint64_t man = (a << (mbits - e > 0 ? mbits - e : 0)) >> (e > mbits ? e - mbits : 0);
    return (uint16_t)(sign | (uint16_t)((e + bias) << mbits) | (uint16_t)(man & ((1u << mbits) - 1)));
}

void put_typed(void *p, size_t i, coh_dtype t, int64_t v)
{
    switch (t) {
    case COH_F32: ((float *)p)[i] = (float)v; break;
    case COH_F64: ((double *)p)[i] = (double)v; break;
    case COH_BF16: ((uint16_t *)p)[i] = half_of_int(v, 1); break;
    case COH_F16: ((uint16_t *)p)[i] = half_of_int(v, 0); break;
    case COH_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case COH_I64: ((int64_t *)p)[i] = v; break;
    default: ((uint8_t *)p)[i] = (uint8_t)v; break;
    }
}

int64_t expect_reduced(size_t i, coh_redop op, coh_dtype t, int n)
{
    int64_t acc = rank_input(0, i, op, t, n);
    for (int r = 1; r < n; r++) {
        int64_t x = rank_input(r, i, op, t, n);
        acc = op == COH_MIN ? (x < acc ? x : acc) : op == COH_MAX ? (x > acc ? x : acc)
              : op == COH_PROD ? acc * x : acc + x;
    }
    if (t == COH_U8)
        acc = (uint8_t)acc; /* u8 wraps */
    return op == COH_AVG ? acc / n : acc;
}

typedef struct tcase {
    coh_comm *c;
    int n, rank, inplace, arena, verbose;
    coh_dtype t;
    size_t count, esz;
    int wrong;
} tcase;

static void *buf_new(tcase *k, size_t elems)
{
    size_t bytes = elems * k->esz + 64;
    void *p = k->arena ? coh_comm_alloc(k->c, bytes) : malloc(bytes);
    if (p)
        memset(p, 0xA5, bytes);
    return p;
}

static void buf_free(tcase *k, void *p)
{
    if (k->arena)
        coh_comm_free(k->c, p);
    else
        free(p);
}

/* What element i of a buffer holds: rank `rank`'s input (rank_input) or, with `reduced`, the
 * reduction over every rank (expect_reduced), at index base + i. */
typedef struct want {
    int reduced, rank;
    coh_redop op;
    size_t base;
} want;

static int64_t value(const tcase *k, want w, size_t i)
{
    return w.reduced ? expect_reduced(w.base + i, w.op, k->t, k->n)
                     : rank_input(w.rank, w.base + i, w.op, k->t, k->n);
}

/* rank_input depends on i through i mod 17, 3 and 5 only: every buffer repeats every
 * PERIOD elements. */
#define PERIOD 255

/* count values of w in k's type into out: the first PERIOD computed, the rest copied from
 * them (in doubling blocks, each a whole number of periods). */
static void encode(const tcase *k, want w, size_t count, void *out)
{
    size_t n = count < PERIOD ? count : PERIOD;
    for (size_t i = 0; i < n; i++)
        put_typed(out, i, k->t, value(k, w, i));
    char *o = out;
    for (size_t done = n; done < count;) {
        size_t c = done < count - done ? done : count - done;
        memcpy(o + done * k->esz, o, c * k->esz);
        done += c;
    }
}

/* Elements at..at + count - 1 of got must hold w's values; the first wrong ones are named. */
static void verify(tcase *k, const char *what, const void *got, size_t at, want w, size_t count)
{
    if (!count)
        return;
    char *exp = malloc(count * k->esz);
    if (!exp) {
        k->wrong++;
        fprintf(stderr, "rank %d: no memory to check %s\n", k->rank, what);
        return;
    }
    encode(k, w, count, exp);
    const char *g = (const char *)got + at * k->esz;
    if (memcmp(g, exp, count * k->esz)) /* then element by element, to name them */
        for (size_t i = 0; i < count; i++) {
            if (!memcmp(g + i * k->esz, exp + i * k->esz, k->esz))
                continue;
            if (k->wrong++ < 5)
                fprintf(stderr, "rank %d: %s %s count %zu%s%s: element %zu wrong (want %lld)\n",
                        k->rank, what, coh_dtype_name(k->t), k->count,
                        k->inplace ? " in-place" : "", k->arena ? " arena" : "", at + i,
                        (long long)value(k, w, i));
        }
    free(exp);
}

static void fail(tcase *k, const char *what, coh_status st)
{
    k->wrong++;
    fprintf(stderr, "rank %d: %s %s count %zu failed: %s\n", k->rank, what,
            coh_dtype_name(k->t), k->count, coh_last_error());
    (void)st;
}

static void fill(tcase *k, void *p, size_t elems, size_t base, coh_redop op)
{
    encode(k, (want){0, k->rank, op, base}, elems, p);
}

static void case_allreduce(tcase *k, coh_redop op)
{
    void *s = buf_new(k, k->count), *r = k->inplace ? s : buf_new(k, k->count);
    fill(k, s, k->count, 0, op);
    coh_status st = coh_allreduce(k->c, s, r, k->count, k->t, op);
    if (st)
        fail(k, "allreduce", st);
    if (!st)
        verify(k, coh_redop_name(op), r, 0, (want){1, 0, op, 0}, k->count);
    if (r != s)
        buf_free(k, r);
    buf_free(k, s);
}

static void case_reduce(tcase *k, coh_redop op, int root)
{
    void *s = buf_new(k, k->count), *r = k->inplace ? s : buf_new(k, k->count);
    fill(k, s, k->count, 0, op);
    coh_status st = coh_reduce(k->c, s, k->rank == root ? r : NULL, k->count, k->t, op, root);
    if (st)
        fail(k, "reduce", st);
    if (!st && k->rank == root)
        verify(k, "reduce", r, 0, (want){1, 0, op, 0}, k->count);
    if (r != s)
        buf_free(k, r);
    buf_free(k, s);
}

static void case_broadcast(tcase *k, int root)
{
    void *b = buf_new(k, k->count);
    if (k->rank == root)
        fill(k, b, k->count, 0, COH_SUM);
    coh_status st = coh_broadcast(k->c, b, k->count, k->t, root);
    if (st)
        fail(k, "broadcast", st);
    if (!st)
        verify(k, "broadcast", b, 0, (want){0, root, COH_SUM, 0}, k->count);
    buf_free(k, b);
}

/* Rank r contributes block r; element j of it is input (r, j). */
static void case_allgather(tcase *k)
{
    size_t cnt = k->count, n = (size_t)k->n;
    void *r = buf_new(k, cnt * n);
    void *s = k->inplace ? (char *)r + (size_t)k->rank * cnt * k->esz : buf_new(k, cnt);
    fill(k, s, cnt, 0, COH_SUM);
    coh_status st = coh_allgather(k->c, s, r, cnt, k->t);
    if (st)
        fail(k, "allgather", st);
    for (size_t b = 0; !st && b < n; b++)
        verify(k, "allgather", r, b * cnt, (want){0, (int)b, COH_SUM, 0}, cnt);
    if (!k->inplace)
        buf_free(k, s);
    buf_free(k, r);
}

static void case_reduce_scatter(tcase *k, coh_redop op)
{
    size_t cnt = k->count, n = (size_t)k->n;
    void *s = buf_new(k, cnt * n);
    void *r = k->inplace ? (char *)s + (size_t)k->rank * cnt * k->esz : buf_new(k, cnt);
    fill(k, s, cnt * n, 0, op);
    coh_status st = coh_reduce_scatter(k->c, s, r, cnt, k->t, op);
    if (st)
        fail(k, "reduce_scatter", st);
    if (!st)
        verify(k, "reduce_scatter", r, 0, (want){1, 0, op, (size_t)k->rank * cnt}, cnt);
    if (!k->inplace)
        buf_free(k, r);
    buf_free(k, s);
}

/* Block b of rank r's send holds input (r, b*cnt + j); rank r receives block r of every j. */
static void case_alltoall(tcase *k)
{
    size_t cnt = k->count, n = (size_t)k->n;
    void *s = buf_new(k, cnt * n), *r = k->inplace ? s : buf_new(k, cnt * n);
    fill(k, s, cnt * n, 0, COH_SUM);
    coh_status st = coh_alltoall(k->c, s, r, cnt, k->t);
    if (st)
        fail(k, "alltoall", st);
    for (size_t j = 0; !st && j < n; j++)
        verify(k, "alltoall", r, j * cnt, (want){0, (int)j, COH_SUM, (size_t)k->rank * cnt},
               cnt);
    if (r != s)
        buf_free(k, r);
    buf_free(k, s);
}

/* A ring: even ranks send first, odd ranks receive first, so chunked messages cannot
 * deadlock. */
static void case_p2p(tcase *k)
{
    if (k->n < 2)
        return;
    int to = (k->rank + 1) % k->n, from = (k->rank + k->n - 1) % k->n;
    void *s = buf_new(k, k->count), *r = buf_new(k, k->count);
    fill(k, s, k->count, 0, COH_SUM);
    coh_status st;
    if (k->rank % 2 == 0) {
        st = coh_send(k->c, s, k->count, k->t, to);
        if (!st)
            st = coh_recv(k->c, r, k->count, k->t, from);
    } else {
        st = coh_recv(k->c, r, k->count, k->t, from);
        if (!st)
            st = coh_send(k->c, s, k->count, k->t, to);
    }
    if (st)
        fail(k, "send/recv", st);
    if (!st)
        verify(k, "send/recv", r, 0, (want){0, from, COH_SUM, 0}, k->count);
    buf_free(k, r);
    buf_free(k, s);
}

/* encode's premise: every rank's inputs repeat every PERIOD elements. 0 when they do. */
static int inputs_not_periodic(const tcase *k)
{
    for (int t = 0; t < COH_DTYPE_COUNT; t++)
        for (int op = 0; op < COH_REDOP_COUNT; op++)
            for (int r = 0; r < k->n; r++)
                for (size_t i = 0; i < PERIOD; i++)
                    if (rank_input(r, i, (coh_redop)op, (coh_dtype)t, k->n) !=
                        rank_input(r, i + PERIOD, (coh_redop)op, (coh_dtype)t, k->n)) {
                        fprintf(stderr, "rank %d: the inputs do not repeat every %d elements "
                                "(rank %d, element %zu): the checks' PERIOD is wrong\n",
                                k->rank, PERIOD, r, i);
                        return 1;
                    }
    return 0;
}

int run_cases(coh_comm *c, int verbose)
{
    tcase k = {.c = c, .n = coh_comm_size(c), .rank = coh_comm_rank(c), .verbose = verbose};
    k.wrong = inputs_not_periodic(&k);
    int ops = 0;
    for (int t = 0; t < COH_DTYPE_COUNT; t++)
        for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
            for (int mode = 0; mode < 4; mode++) {
                /* large: out-of-place plain and in-place arena cover both paths of each op */
                if (sizes[z] > 10000 && (mode == 1 || mode == 2))
                    continue;
                k.t = (coh_dtype)t;
                k.esz = coh_dtype_size(k.t);
                k.count = sizes[z];
                k.inplace = mode & 1;
                k.arena = (mode >> 1) & 1;
                for (int op = 0; op < COH_REDOP_COUNT; op++) {
                    case_allreduce(&k, (coh_redop)op);
                    case_reduce(&k, (coh_redop)op, (op + mode) % k.n);
                    case_reduce_scatter(&k, (coh_redop)op);
                }
                case_broadcast(&k, (t + mode) % k.n);
                case_allgather(&k);
                case_alltoall(&k);
                case_p2p(&k);
                ops += 19;
            }
    if (verbose)
        printf("rank %d: %d ops checked, %d wrong\n", k.rank, ops, k.wrong);
    return k.wrong;
}

int run_allreduce_cases(coh_comm *c, const size_t *counts, int ncounts, int verbose)
{
    tcase k = {.c = c, .n = coh_comm_size(c), .rank = coh_comm_rank(c), .verbose = verbose};
    k.wrong = inputs_not_periodic(&k);
    int ops = 0;
    for (int t = 0; t < COH_DTYPE_COUNT; t++)
        for (int z = 0; z < ncounts; z++)
            for (int mode = 0; mode < 4; mode++) {
                k.t = (coh_dtype)t;
                k.esz = coh_dtype_size(k.t);
                k.count = counts[z];
                k.inplace = mode & 1;
                k.arena = (mode >> 1) & 1;
                for (int op = 0; op < COH_REDOP_COUNT; op++, ops++)
                    case_allreduce(&k, (coh_redop)op);
            }
    if (verbose)
        printf("rank %d: %d all-reduces checked, %d wrong\n", k.rank, ops, k.wrong);
    return k.wrong;
}
