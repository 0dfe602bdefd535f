/* pipe_layout.c: where a pipeline puts the model: the blocks of each virtual stage, chosen by
 * simulating the schedule's own action lists with each chunk's estimated compute (the LM head
 * and the embeddings included; the first virtual stage may hold the embeddings alone and the
 * last the head alone), and the arena ranges each stage holds. Pure, so the trainer, its memory
 * prediction, the planner and the start-up summary agree. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/parallel/pipeline_int.h"
#include "train/parallel/par_trainer_int.h"

/* ---- the balanced split: the search's starting point ---------------------------------------- */

/* The work of each stage for bounds of u virtual stages over p stages (virtual stage k on stage
 * k mod p): the largest, and the sum of squares to break ties toward balance. */
static void stage_costs(const int *b, int u, int p, double blk, double head, double *worst,
                        double *squares)
{
    double cost[COH_PIPE_MAX_STAGES] = {0};
    for (int k = 0; k < u; k++)
        cost[k % p] += (b[k + 1] - b[k]) * blk + (k == u - 1 ? head : 0.0);
    *worst = *squares = 0.0;
    for (int s = 0; s < p; s++) {
        *worst = cost[s] > *worst ? cost[s] : *worst;
        *squares += cost[s] * cost[s];
    }
}

/* Several chunks per stage (interleaved): the stage's work is the sum of its chunks', so move
 * the boundaries one block at a time from the even split while the heaviest stage (then the
 * spread) gets lighter. A local search: exact enough for a head of a few blocks' weight. */
static void split_chunks(int L, int u, int p, double blk, double head, int *b)
{
    for (int i = 0; i <= u; i++)
        b[i] = (int)((long)L * i / u);
    double w, q;
    stage_costs(b, u, p, blk, head, &w, &q);
    for (int improved = 1; improved;) {
        improved = 0;
        for (int i = 1; i < u; i++)
            for (int d = -1; d <= 1; d += 2) {
                if (b[i] + d <= b[i - 1] || b[i] + d >= b[i + 1])
                    continue;
                b[i] += d;
                double w2, q2;
                stage_costs(b, u, p, blk, head, &w2, &q2);
                if (w2 < w - 1e-9 * w || (w2 <= w + 1e-9 * w && q2 < q - 1e-9 * q)) {
                    w = w2;
                    q = q2;
                    improved = 1;
                } else {
                    b[i] -= d;
                }
            }
    }
}

/* Every virtual stage at least one block, each stage's summed compute balanced: exactly (the
 * smallest largest stage) for one chunk a stage, by local search for several. */
static void split_balanced(int L, int u, int p, double blk, double head, int *bounds)
{
    if (u > p && p <= COH_PIPE_MAX_STAGES) {
        split_chunks(L, u, p, blk, head, bounds);
        return;
    }
    double *best = malloc(sizeof(double) * (size_t)(u + 1) * (L + 1));
    int *cut = malloc(sizeof(int) * (size_t)(u + 1) * (L + 1));
    if (!best || !cut) { /* even parts when there is no memory for the search */
        free(best);
        free(cut);
        for (int i = 0; i <= u; i++)
            bounds[i] = (int)((long)L * i / u);
        return;
    }
    /* best[i][k]: the smallest largest part cost of blocks 0..k-1 in i parts; cut[i][k] where
     * the i-th part begins */
#define B_(i, k) best[(size_t)(i) * (L + 1) + (k)]
#define C_(i, k) cut[(size_t)(i) * (L + 1) + (k)]
    for (int i = 0; i <= u; i++)
        for (int k = 0; k <= L; k++)
            B_(i, k) = 1e300;
    B_(0, 0) = 0.0;
    for (int i = 1; i <= u; i++)
        for (int k = i; k <= L - (u - i); k++)
            for (int j = i - 1; j < k; j++) {
                double part = (k - j) * blk + (i == u ? head : 0.0);
                double worst = B_(i - 1, j) > part ? B_(i - 1, j) : part;
                if (worst < B_(i, k)) {
                    B_(i, k) = worst;
                    C_(i, k) = j;
                }
            }
    bounds[u] = L;
    for (int i = u; i > 0; i--)
        bounds[i - 1] = C_(i, bounds[i]);
#undef B_
#undef C_
    free(best);
    free(cut);
}

/* ---- the split the schedule runs fastest -------------------------------------------------- */

/* Simulated action visits one choice may spend (a few milliseconds), and the largest pipeline
 * (stages x microbatches x chunks) it simulates; beyond it the balanced split stands. */
#define CHOOSE_BUDGET 2000000L
#define CHOOSE_MAX_SIZE (1 << 16)

typedef struct chooser {
    pipe_sim_in in;
    int u, L, n;        /* virtual stages, blocks, head shards: the chain is L + n units */
    pipe_chunk_cost cost;
    double *fwd, *bwd;  /* [u] each virtual stage's, filled per candidate */
    long actions;       /* in all the lists: one simulation's work */
    long budget;        /* action visits left */
} chooser;

/* The simulated step of bounds b; INFINITY when the budget is spent. */
static double step_time(chooser *c, const int *b)
{
    if (c->budget < c->actions)
        return INFINITY;
    c->budget -= c->actions;
    pipe_chunk_costs(&c->cost, c->L, c->n, b, c->u, c->fwd, c->bwd);
    coh_pipe_sim sim;
    return pipe_simulate(&c->in, &sim, NULL) ? INFINITY : sim.makespan;
}

/* The fewest units (blocks, head shards) chunk k may hold: the first none (the embeddings
 * alone), every other one; the last always holds the last head shard. */
static int min_blocks(int u, int k)
{
    (void)u;
    return k == 0 ? 0 : 1;
}

/* Shift boundaries i..j (1 <= i <= j < u) by d: one block from chunk j to chunk i - 1 (d = 1)
 * or back (d = -1), the chunks between moving whole. 0 when a chunk would get too small. */
static int shift(int *b, int u, int i, int j, int d)
{
    if (b[i] + d - b[i - 1] < min_blocks(u, i - 1) || b[j + 1] - b[j] - d < min_blocks(u, j))
        return 0;
    for (int k = i; k <= j; k++)
        b[k] += d;
    return 1;
}

/* From b (step t), take any shift that shortens the simulated step, until none does. */
static double descend(chooser *c, int *b, double t)
{
    int u = c->u;
    for (int improved = 1; improved && c->budget >= c->actions;) {
        improved = 0;
        for (int w = 0; w < u - 1; w++) /* single boundaries first, then wider windows */
            for (int i = 1; i + w < u; i++)
                for (int d = -1; d <= 1; d += 2) {
                    if (!shift(b, u, i, i + w, d))
                        continue;
                    double t2 = step_time(c, b);
                    if (t2 < t * (1.0 - 1e-9)) {
                        t = t2;
                        improved = 1;
                    } else {
                        shift(b, u, i, i + w, -d);
                    }
                }
    }
    return t;
}

/* The share of the vocabulary head shard k of n holds: rows V k / n .. V (k + 1) / n. */
static double shard_share(int V, int k, int n)
{
    if (V <= 0)
        return 1.0 / n;
    return (double)(coh_pipe_head_shard_row(V, k + 1, n) - coh_pipe_head_shard_row(V, k, n)) / V;
}

void pipe_chunk_costs(const pipe_chunk_cost *c, int L, int n, const int *b, int u, double *fwd,
                      double *bwd)
{
    /* a head shard before the last computes its logits in forward (one of the fused head's three
     * products) and the two gradient products in backward (three with the logits recomputed);
     * the last runs the fused head on its rows; the final LayerNorm goes with shard 0 */
    double product = c->head_fwd / 3.0;
    for (int k = 0; k < u; k++) {
        int lo = b[k] < L ? b[k] : L, hi = b[k + 1] < L ? b[k + 1] : L;
        fwd[k] = (hi - lo) * c->block_fwd + (k == 0 ? c->embed_fwd : 0);
        bwd[k] = (hi - lo) * c->block_bwd + (k == 0 ? c->embed_bwd : 0);
        for (int x = b[k] > L ? b[k] : L; x < b[k + 1]; x++) {
            int s = x - L;
            double f = n > 1 ? shard_share(c->vocab, s, n) : 1.0;
            if (s == n - 1) {
                fwd[k] += c->head_fwd * f;
            } else {
                fwd[k] += product * f;
                bwd[k] += product * f * (c->head_recompute ? 3.0 : 2.0);
            }
            if (s == 0)
                bwd[k] += c->head_bwd;
        }
    }
}

void pipe_estimate_costs(const coh_gpt_config *c, int T, pipe_chunk_cost *out)
{
    double C = c->dim, V = c->vocab;
    /* per token: a block's forward 2 x 12 C^2 multiply-adds and attention's 4 T C, backward
     * twice that; the fused head computes its logits and both gradient products in forward
     * (2 V C each), its backward is the final LayerNorm's; the embeddings gather and scatter */
    out->block_fwd = 24.0 * C * C + 4.0 * T * C;
    out->block_bwd = 2.0 * out->block_fwd;
    out->head_fwd = 3.0 * 2.0 * V * C;
    out->head_bwd = 10.0 * C;
    out->embed_fwd = out->embed_bwd = 2.0 * C;
    out->vocab = c->vocab;
    out->head_recompute = 0;
}

/* The step more head shards must save to be chosen. */
#define PIPE_SHARD_GAIN 0.98

/* The best split of the chain of L blocks and n head shards (bounds[0..u], bounds[u] = L + n)
 * from the balanced split of the blocks (bal, bounds[u] = L) and the starts beside it; the
 * simulated step, INFINITY when none could be simulated. */
static double choose_for(chooser *c, const int *bal, int *b, int *best)
{
    int u = c->u, L = c->L, n = c->n;
    double t_best = INFINITY;
    /* starts: the balanced split, then it with the last chunk the head alone (all its shards),
     * the first the embeddings alone, and both; then with the last chunk the last shard alone;
     * the shortest step wins, ties to the earlier start */
    for (int start = 0; start < 5; start++) {
        memcpy(b, bal, sizeof(int) * (size_t)(u + 1));
        b[u] = L + n;
        if (start == 4) {
            if (n < 2 || b[u - 1] > L + n - 1)
                continue;
            b[u - 1] = L + n - 1;
            if (u > 1 && b[u - 1] - b[u - 2] < min_blocks(u, u - 2))
                continue;
        } else {
            if (start == 3 && u == 2)
                continue;
            if ((start & 1) && L - b[u - 2] < min_blocks(u, u - 2))
                continue;
            if (start & 1)
                b[u - 1] = L;
            if ((start & 2) && b[2] < min_blocks(u, 1))
                continue;
            if (start & 2)
                b[1] = 0;
            if (start && !memcmp(b, bal, sizeof(int) * (size_t)u))
                continue;
        }
        double t = descend(c, b, step_time(c, b));
        if (t < t_best * (1.0 - 1e-9)) {
            t_best = t;
            memcpy(best, b, sizeof(int) * (size_t)(u + 1));
        }
    }
    return t_best;
}

/* Every split of the chain (chunk 0 may be empty, every other holds a unit) from chunk i on,
 * b[0..i-1] set: the shortest into best/t_best when strictly shorter than *t_best. */
static void enumerate(chooser *c, int *b, int i, int *best, double *t_best)
{
    int u = c->u, N = c->L + c->n;
    if (i == u) {
        double t = step_time(c, b);
        if (t < *t_best * (1.0 - 1e-9)) {
            *t_best = t;
            memcpy(best, b, sizeof(int) * (size_t)(u + 1));
        }
        return;
    }
    for (int x = b[i - 1] + (i > 1); x <= N - (u - i); x++) {
        b[i] = x;
        enumerate(c, b, i + 1, best, t_best);
    }
}

/* The splits enumerate visits: C(N - 1 + 1, u - 1) (chunk 0 may be empty), capped at cap. */
static long split_count(int N, int u, long cap)
{
    double n = 1.0;
    for (int k = 1; k <= u - 1; k++) {
        n = n * (double)(N - u + 1 + k) / k;
        if (n > (double)cap)
            return cap + 1;
    }
    return (long)(n + 0.5);
}

coh_status pipe_choose_split(const pipe_chunk_cost *cost, int L, const coh_pipe_shape *shape,
                             int max_shards, int *bounds, int *shards, double *step,
                             double *balanced_step)
{
    int p = shape->stages, v = shape->virtual_stages, u = p * v;
    if (p < 1 || v < 1 || u > L)
        return coh_errf(COH_ERR_INVALID, "invalid pipeline of '%d' x %d virtual stages for %d "
                        "blocks: at most one virtual stage a block", p, v, L);
    if (max_shards < 1 || max_shards > COH_PIPE_MAX_HEAD_SHARDS)
        return coh_errf(COH_ERR_INVALID, "invalid head shard count '%d': 1..%d", max_shards,
                        COH_PIPE_MAX_HEAD_SHARDS);
    split_balanced(L, u, p, cost->block_fwd + cost->block_bwd, cost->head_fwd + cost->head_bwd,
                   bounds);
    bounds[u] = L + 1;
    *shards = 1;
    if (step)
        *step = NAN;
    if (balanced_step)
        *balanced_step = NAN;
    if ((long)p * shape->microbatches * v > CHOOSE_MAX_SIZE || u < 2)
        return COH_OK;
    pipe_lists l;
    coh_status st = pipe_lists_build(shape, &l);
    chooser c = {.u = u, .L = L, .n = 1, .cost = *cost,
                 .budget = CHOOSE_BUDGET * (long)max_shards};
    c.fwd = malloc(sizeof(double) * (size_t)u);
    c.bwd = malloc(sizeof(double) * (size_t)u);
    int *b = malloc(sizeof(int) * (size_t)(u + 1) * 3), *best = b ? b + u + 1 : NULL;
    int *bal = b ? b + 2 * (u + 1) : NULL;
    if (!st && (!c.fwd || !c.bwd || !b))
        st = coh_errf(COH_ERR_NOMEM, "out of memory choosing the pipeline's split");
    if (!st) {
        c.in = (pipe_sim_in){p, shape->microbatches, v, l.list, l.count, 0, 0, NULL, c.fwd,
                             c.bwd, NULL};
        for (int s = 0; s < p; s++)
            c.actions += l.count[s];
        memcpy(bal, bounds, sizeof(int) * (size_t)(u + 1));
        bal[u] = L;
        double t_best = step_time(&c, bounds);
        if (balanced_step)
            *balanced_step = t_best;
        /* the head whole, then in 2.. max_shards shards: more only when 2% shorter */
        for (int n = 1; n <= max_shards; n++) {
            c.n = n;
            double t = choose_for(&c, bal, b, best);
            /* small chains: every split, where the local search may stop short (a few
             * thousand simulations at most) */
            long room = c.actions > 0 ? (CHOOSE_BUDGET / 4) / c.actions : 0;
            if (split_count(L + n, u, room) <= room) {
                b[0] = 0;
                b[u] = L + n;
                enumerate(&c, b, 1, best, &t);
            }
            /* a shard more adds messages and passes the costs do not count: only for a step
             * PIPE_SHARD_GAIN shorter */
            if (n == 1 ? t <= t_best : t < t_best * PIPE_SHARD_GAIN) {
                t_best = t;
                memcpy(bounds, best, sizeof(int) * (size_t)(u + 1));
                *shards = n;
            }
        }
        if (step)
            *step = t_best;
    }
    free(c.fwd);
    free(c.bwd);
    free(b);
    pipe_lists_release(&l);
    return st;
}

/* The balanced split of the blocks with the head whole, bounds[u] = L (the fallback). */
static void split_fallback(const coh_gpt_config *c, const pipe_chunk_cost *cost,
                           const coh_pipe_shape *shape, int *bounds)
{
    int p = shape->stages, u = p * shape->virtual_stages, L = c->layers;
    coh_err_clear();
    if (u <= L && p >= 1 && p <= COH_PIPE_MAX_STAGES)
        split_balanced(L, u, p, cost->block_fwd + cost->block_bwd,
                       cost->head_fwd + cost->head_bwd, bounds);
    else /* callers check u <= L first; even parts rather than nothing */
        for (int i = 0; i <= u; i++)
            bounds[i] = (int)((long)L * i / (u > 0 ? u : 1));
}

void par_pipe_split(const coh_gpt_config *c, int T, const coh_pipe_shape *shape, int *bounds)
{
    pipe_chunk_cost cost;
    int n;
    pipe_estimate_costs(c, T, &cost);
    if (pipe_choose_split(&cost, c->layers, shape, 1, bounds, &n, NULL, NULL))
        split_fallback(c, &cost, shape, bounds);
    bounds[shape->stages * shape->virtual_stages] = c->layers;
}

void par_pipe_split_chain(const coh_gpt_config *c, int T, const coh_pipe_shape *shape,
                          int recompute, int *bounds, int *shards)
{
    pipe_chunk_cost cost;
    pipe_estimate_costs(c, T, &cost);
    cost.head_recompute = recompute;
    /* the head is split only where nothing else splits the vocabulary */
    int most = c->tp > 1 ? 1 : PIPE_AUTO_HEAD_SHARDS;
    if (pipe_choose_split(&cost, c->layers, shape, most, bounds, shards, NULL, NULL)) {
        split_fallback(c, &cost, shape, bounds);
        bounds[shape->stages * shape->virtual_stages] = c->layers + 1;
        *shards = 1;
    }
}

coh_status par_pipe_check_shards(const char *split, int shards, int tp, int vocab)
{
    if (shards > 1 && tp > 1)
        return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': head shards split the "
                        "vocabulary along the pipeline, which tensor parallelism (tp %d) already "
                        "splits; name the head whole", split, tp);
    if (shards > vocab)
        return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': %d head shards of a "
                        "%d-token vocabulary", split, shards, vocab);
    return COH_OK;
}

int coh_pipe_head_shard_row(int vocab, int k, int shards)
{
    return (int)((long long)vocab * k / shards);
}

/* "a-b" or "a" at *p, followed by `term`, ',' or the end: the block range [lo, hi]; advances
 * *p. 0 when it is not one. */
static int read_range_to(const char **p, long *lo, long *hi, char term)
{
    char *end;
    if (**p < '0' || **p > '9')
        return 0;
    *lo = *hi = strtol(*p, &end, 10);
    *p = end;
    if (**p == '-') {
        (*p)++;
        if (**p < '0' || **p > '9')
            return 0;
        *hi = strtol(*p, &end, 10);
        *p = end;
    }
    return **p == ',' || **p == '\0' || (term && **p == term);
}

static int read_range(const char **p, long *lo, long *hi) { return read_range_to(p, lo, hi, 0); }

/* Whether the entry at p (up to the next ',' or the end) is the word w. */
static int is_word(const char *p, const char *w)
{
    size_t n = strcspn(p, ",");
    return n == strlen(w) && !strncmp(p, w, n);
}

/* A number at *p (digits only, at most 9 of them); advances *p. 0 when there is none. */
static int read_number(const char **p, long *x)
{
    const char *q = *p;
    long v = 0;
    int n = 0;
    while (*q >= '0' && *q <= '9' && n < 9) {
        v = v * 10 + (*q++ - '0');
        n++;
    }
    if (!n || (*q >= '0' && *q <= '9'))
        return 0;
    *x = v;
    *p = q;
    return 1;
}

/* "head:K/N" or "head:K-J/N" at *p: head shards K..J of N; advances *p. 0 when it is not one. */
static int read_shards(const char **p, long *lo, long *hi, long *of)
{
    const char *q = *p;
    if (strncmp(q, "head:", 5))
        return 0;
    q += 5;
    if (!read_number(&q, lo))
        return 0;
    *hi = *lo;
    if (*q == '-') {
        q++;
        if (!read_number(&q, hi))
            return 0;
    }
    if (*q++ != '/' || !read_number(&q, of))
        return 0;
    *p = q;
    return **p == ',' || **p == '\0';
}

coh_status coh_pipe_parse_split(const char *text, int layers, int parts, int *bounds,
                                int *shards)
{
    const char *t = text ? text : "", *p = t;
    int n = 0;
    long next = 0, of = 0; /* the next chain unit; the head's shards, 0 until one is named */
    while (*p) {
        long lo, hi, slo, shi, sof;
        if (n == parts)
            return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': more than the %d "
                            "stages of the pipeline (pp x virtual stages)", t, parts);
        int sharded = 0;
        if (is_word(p, "embeddings")) { /* the first virtual stage, no block */
            if (n > 0)
                return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': 'embeddings' (a "
                                "stage of the embeddings alone) can only be the first entry, "
                                "not entry %d; a stage in between holds at least one block "
                                "or head shard", t, n + 1);
            bounds[n++] = 0;
            p += strlen("embeddings");
        } else if (is_word(p, "head")) { /* the last virtual stage, the whole head */
            if (p[strlen("head")] != '\0')
                return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': 'head' (a stage "
                                "of the final LayerNorm and LM head alone) can only be the last "
                                "entry, not entry %d; a stage in between holds at least one "
                                "block (or name head shards, head:0/2,head:1/2)", t, n + 1);
            if (next != layers || of)
                return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': 'head' ends the "
                                "stages, but blocks %ld..%d are in none", t, next, layers - 1);
            bounds[n++] = layers;
            p += strlen("head");
            next = layers + 1;
            of = 1;
        } else if ((sharded = read_shards(&p, &slo, &shi, &sof))) {
            bounds[n++] = (int)(next < layers ? next : layers + slo);
        } else if (*p >= '0' && *p <= '9') {
            const char *p0 = p;
            if (!read_range(&p, &lo, &hi)) { /* "a-b+head:K/N": blocks, then head shards */
                p = p0;
                if (!read_range_to(&p, &lo, &hi, '+') || *p++ != '+' ||
                    !read_shards(&p, &slo, &shi, &sof))
                    return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': entry %d: "
                                    "expected a block range like 0-2, or blocks then head "
                                    "shards like 10-11+head:0/2", t, n + 1);
                sharded = 1;
                if (slo != 0 || hi != layers - 1)
                    return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': entry %d: "
                                    "only the stage ending at block %d goes on to the head, "
                                    "from shard 0", t, n + 1, layers - 1);
            }
            if (lo != next || hi < lo || hi >= layers)
                return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': stage %d is "
                                "blocks %ld-%ld, but it must start at block %ld and end before "
                                "block %d (the stages cover blocks 0..%d in order, each once)",
                                t, n, lo, hi, next, layers, layers - 1);
            bounds[n++] = (int)lo;
            next = hi + 1;
        } else {
            return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': expected block ranges "
                            "like 0-2,3-7, with 'embeddings' first or 'head' last for a stage "
                            "holding no block, or head shards like 0-5,6-11,head:0/2,head:1/2",
                            t);
        }
        if (sharded) { /* shards slo..shi of sof, right after what came before */
            if (sof < 2 || sof > COH_PIPE_MAX_HEAD_SHARDS || (of && of != sof))
                return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': head shards of "
                                "'%ld': the head splits into 2..%d shards, the same count in "
                                "every entry", t, sof, COH_PIPE_MAX_HEAD_SHARDS);
            if (next < layers)
                return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': head shard %ld "
                                "comes before blocks %ld..%d", t, slo, next, layers - 1);
            if (slo != next - layers || shi < slo || shi >= sof)
                return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': entry %d holds "
                                "head shards %ld-%ld of %ld, but it must start at shard %ld and "
                                "end before shard %ld (the shards in order, each once)", t, n,
                                slo, shi, sof, next - layers, sof);
            of = sof;
            next = layers + shi + 1;
        }
        if (*p == ',' && !*++p)
            return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': empty last entry", t);
    }
    if (next == layers && !of) { /* the last stage holds the whole head after its blocks */
        of = 1;
        next = layers + 1;
    }
    if (n != parts || next != layers + of)
        return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': %d stage(s) covering "
                        "blocks 0..%ld%s, but the pipeline has %d stages (pp x virtual stages) "
                        "over blocks 0..%d and the head", t, n,
                        (next < layers ? next : layers) - 1,
                        of > 1 ? " and part of the head's shards" : "", parts, layers - 1);
    bounds[parts] = (int)(layers + of);
    *shards = (int)of;
    return COH_OK;
}

coh_status coh_pipe_parse_layers(const char *text, int layers, int parts, int *bounds)
{
    int shards;
    coh_status st = coh_pipe_parse_split(text, layers, parts, bounds, &shards);
    for (int i = 0; !st && i <= parts; i++)
        bounds[i] = bounds[i] < layers ? bounds[i] : layers;
    return st;
}

/* Head shards lo..hi-1 of n as --stage-layers spells them: "head:1/2", "head:0-1/3". */
static int print_shards(char *buf, size_t cap, int lo, int hi, int n)
{
    if (hi - lo == 1)
        return snprintf(buf, cap, "head:%d/%d", lo, n);
    return snprintf(buf, cap, "head:%d-%d/%d", lo, hi - 1, n);
}

char *coh_pipe_stage_blocks(const coh_pipe_stage *st, char *buf, size_t cap)
{
    size_t n = 0;
    if (cap)
        buf[0] = '\0';
    for (int k = 0; k < st->chunks && n < cap; k++) {
        const char *sep = k ? "," : "";
        int w, shards = st->head_shards > 1 && st->head_lo[k] < st->head_hi[k];
        if (st->lo[k] < st->hi[k])
            w = snprintf(buf + n, cap - n, "%s%d-%d%s", sep, st->lo[k], st->hi[k] - 1,
                         shards ? "+" : "");
        else if (shards)
            w = snprintf(buf + n, cap - n, "%s", sep);
        else
            w = snprintf(buf + n, cap - n, "%s%s", sep,
                         st->first && k == 0 ? "embeddings" : "head");
        n += w > 0 ? (size_t)w : 0;
        if (shards && n < cap) {
            w = print_shards(buf + n, cap - n, st->head_lo[k], st->head_hi[k], st->head_shards);
            n += w > 0 ? (size_t)w : 0;
        }
    }
    return buf;
}

/* Add arena range [begin, end) to the stage's, merged with the last when they touch. */
static void add_range(coh_pipe_stage *out, size_t begin, size_t end)
{
    int n = out->nranges;
    if (n && out->end[n - 1] == begin) {
        out->end[n - 1] = end;
    } else {
        out->begin[n] = begin;
        out->end[n] = end;
        out->nranges++;
    }
}

coh_status coh_par_pipe_stage(const coh_par_config *c, int stage, coh_pipe_stage *out)
{
    const coh_gpt_config *m = &c->train.model;
    int p = c->par.pp, v = c->par.schedule == COH_SCHED_INTERLEAVED ? c->par.virtual_stages : 1;
    int L = m->layers, u = p * v, n = 1;
    memset(out, 0, sizeof *out);
    if (p < 1 || v < 1 || v > COH_PIPE_MAX_VIRTUAL || stage < 0 || stage >= p)
        return coh_errf(COH_ERR_INVALID, "invalid pipeline stage '%d' of %d (%d chunks)", stage,
                        p, v);
    if (u > L && !c->par.stage_layers)
        return coh_errf(COH_ERR_INVALID, "pipeline of %d virtual stages for %d layers: at most "
                        "one stage per layer", u, L);
    int *bounds = malloc(sizeof *bounds * ((size_t)u + 1));
    if (!bounds)
        return coh_errf(COH_ERR_NOMEM, "out of memory laying out the pipeline");
    int T = c->par.seq ? (int)c->par.seq : m->seq;
    int mb = c->par.microbatches > 0 ? (int)c->par.microbatches
                                     : c->train.accum > 0 ? c->train.accum : 1;
    coh_pipe_shape shape = {c->par.schedule, p, mb, v};
    coh_status st = COH_OK;
    if (c->par.stage_layers)
        st = coh_pipe_parse_split(c->par.stage_layers, L, u, bounds, &n);
    else
        par_pipe_split_chain(m, T, &shape, c->par.recompute == COH_RECOMPUTE_FULL, bounds, &n);
    if (!st)
        st = par_pipe_check_shards(c->par.stage_layers, n, m->tp > 1 ? m->tp : c->par.tp,
                                   m->vocab);
    if (st) {
        free(bounds);
        return st;
    }
    out->chunks = v;
    out->head_shards = n;
    for (int k = 0; k < v; k++) {
        int b0 = bounds[k * p + stage], b1 = bounds[k * p + stage + 1];
        out->lo[k] = b0 < L ? b0 : L;
        out->hi[k] = b1 < L ? b1 : L;
        out->head_lo[k] = b0 > L ? b0 - L : 0;
        out->head_hi[k] = b1 > L ? b1 - L : 0;
        out->head |= out->head_hi[k] > out->head_lo[k];
    }
    free(bounds);
    /* by virtual stage, not by blocks: with the head alone in the last chunk, another chunk ends
     * at block L too */
    out->first = stage == 0;
    out->last = stage == p - 1;
    size_t b, e;
    out->tied_copy = out->head && !out->first;
    if (out->tied_copy) /* the LM head's copy of wte (all of it, whatever rows it runs) */
        add_range(out, 0, (size_t)coh_gpt_vocab_per_shard(m) * m->dim);
    for (int k = 0; k < v; k++) {
        int embeds = out->first && k == 0;
        int lnf = out->head_lo[k] == 0 && out->head_hi[k] > 0; /* the final LayerNorm: shard 0 */
        if (!embeds && out->lo[k] == out->hi[k] && !lnf)
            continue; /* head shards past the first: the wte copy only */
        /* an empty chunk is the embeddings' range (-1) or the final LayerNorm's (L) */
        coh_gpt_layer_range(m, embeds ? -1 : out->lo[k] < out->hi[k] ? out->lo[k] : L, &b, &e);
        size_t begin = b;
        coh_gpt_layer_range(m, lnf ? L : out->hi[k] - 1, &b, &e);
        add_range(out, begin, e);
    }
    for (int k = 0; k < out->nranges; k++)
        out->params += out->end[k] - out->begin[k];
    return COH_OK;
}

coh_status coh_par_stage_traffic(const coh_par_config *c, int stage, coh_par_traffic *out)
{
    memset(out, 0, sizeof *out);
    coh_pipe_stage lay;
    coh_status st = coh_par_pipe_stage(c, stage, &lay);
    if (st)
        return st;
    const coh_gpt_config *m = &c->train.model;
    const coh_parallel_config *p = &c->par;
    size_t bt = (size_t)c->train.batch * (size_t)c->train.seq, btc = bt * (size_t)m->dim;
    for (int k = 0; k < lay.chunks; k++)
        out->blocks += lay.hi[k] - lay.lo[k];
    out->params = lay.params;
    if (p->pp > 1) /* pipe_exec.c's message: this rank's rows, and the shards' statistics */
        out->pipe_send = (m->sp && m->tp > 1 ? btc / (size_t)m->tp : btc) +
                         (lay.head_shards > 1 ? 3 * bt : 0);
    if (p->tp > 1) /* gpt_tp.c: the (B T, C) buffer, all-reduced or reduce-scattered */
        out->tp_allreduce = btc;
    if (p->dp > 1) {
        out->dp_reduce = lay.params;
        if (coh_strategy_zero_stage(p->strategy) >= 1)
            out->zero_gather = lay.params;
        /* the buckets the grad hook issues (par_plan_buckets: the whole model without a
           pipeline) */
        par_bucket *bk = calloc((size_t)m->layers + 3, sizeof *bk);
        int *bucket_of = calloc((size_t)m->layers + 2, sizeof *bucket_of);
        size_t own;
        if (!bk || !bucket_of) {
            free(bk);
            free(bucket_of);
            return coh_errf(COH_ERR_NOMEM, "out of memory planning gradient buckets");
        }
        out->dp_buckets = par_bucket_plan(m, p->pp > 1 ? &lay : NULL,
                                          coh_strategy_zero_stage(p->strategy), p->dp, 0,
                                          coh_parallel_bucket_bytes(p),
                                          bk, bucket_of, &own);
        for (int i = 0; i < out->dp_buckets && i < COH_BUCKETS_LISTED; i++)
            out->dp_bucket[i] = bk[i].end - bk[i].begin;
        free(bk);
        free(bucket_of);
    }
    if (p->pp > 1 && (lay.first || lay.head)) /* pipe_exec.c reduce_grads: the embedding group */
        out->embed_allreduce = (size_t)coh_gpt_vocab_per_shard(m) * (size_t)m->dim;
    return COH_OK;
}

int par_pipe_count_slots(const coh_pipe_action *a, int n, int m)
{
    int *live = calloc((size_t)m, sizeof *live), open = 0, peak = 1;
    if (!live)
        return -1;
    for (int i = 0; i < n; i++) {
        if (a[i].op == COH_PIPE_FORWARD && live[a[i].mb]++ == 0 && ++open > peak)
            peak = open;
        if (a[i].op == COH_PIPE_BACKWARD && --live[a[i].mb] == 0)
            open--;
    }
    free(live);
    return peak;
}
