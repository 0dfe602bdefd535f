/* pipe_layout.c: where a pipeline puts the model: the blocks of each virtual stage (balanced by
 * estimated compute per stage, the LM head included), and the arena ranges each stage holds. Pure, so the
 * trainer, its memory prediction and the start-up summary agree. */
#include <stdlib.h>
#include <string.h>

#include "train/parallel/strategy.h"

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

void par_pipe_split(const coh_gpt_config *c, int T, int u, int p, int *bounds)
{
    int L = c->layers;
    double blk = 24.0 * c->dim * (double)c->dim + 4.0 * T * (double)c->dim;
    double head = 2.0 * c->vocab * (double)c->dim;
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

/* "a-b" or "a" at *p: the block range [lo, hi]; advances *p. 0 when it is not one. */
static int read_range(const char **p, long *lo, long *hi)
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
    return **p == ',' || **p == '\0';
}

coh_status coh_pipe_parse_layers(const char *text, int layers, int parts, int *bounds)
{
    const char *p = text ? text : "";
    int n = 0;
    long next = 0;
    while (*p) {
        long lo, hi;
        if (!read_range(&p, &lo, &hi))
            return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': expected block ranges "
                            "like 0-2,3-7", text ? text : "");
        if (lo != next || hi < lo || hi >= layers)
            return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': stage %d is blocks "
                            "%ld-%ld, but it must start at block %ld and end before block %d "
                            "(the stages cover blocks 0..%d in order, each once)", text, n, lo,
                            hi, next, layers, layers - 1);
        if (n == parts)
            return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': more than the %d "
                            "stages of the pipeline (pp x virtual stages)", text, parts);
        bounds[n++] = (int)lo;
        next = hi + 1;
        if (*p == ',' && !*++p)
            return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': empty last entry",
                            text);
    }
    if (n != parts || next != layers)
        return coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': %d stage(s) covering "
                        "blocks 0..%ld, but the pipeline has %d stages (pp x virtual stages) over "
                        "blocks 0..%d", text ? text : "", n, next - 1, parts, layers - 1);
    bounds[parts] = layers;
    return COH_OK;
}

coh_status coh_par_pipe_stage(const coh_par_config *c, int stage, coh_pipe_stage *out)
{
    const coh_gpt_config *m = &c->train.model;
    int p = c->par.pp, v = c->par.schedule == COH_SCHED_INTERLEAVED ? c->par.virtual_stages : 1;
    int L = m->layers, u = p * v;
    memset(out, 0, sizeof *out);
    if (p < 1 || v < 1 || v > COH_PIPE_MAX_VIRTUAL || stage < 0 || stage >= p)
        return coh_errf(COH_ERR_INVALID, "invalid pipeline stage '%d' of %d (%d chunks)", stage,
                        p, v);
    if (u > L)
        return coh_errf(COH_ERR_INVALID, "pipeline of %d virtual stages for %d layers: at most "
                        "one stage per layer", u, L);
    int *bounds = malloc(sizeof *bounds * ((size_t)u + 1));
    if (!bounds)
        return coh_errf(COH_ERR_NOMEM, "out of memory laying out the pipeline");
    int T = c->par.seq ? (int)c->par.seq : m->seq;
    coh_status st = COH_OK;
    if (c->par.stage_layers)
        st = coh_pipe_parse_layers(c->par.stage_layers, L, u, bounds);
    else
        par_pipe_split(m, T, u, p, bounds);
    if (st) {
        free(bounds);
        return st;
    }
    out->chunks = v;
    for (int k = 0; k < v; k++) {
        out->lo[k] = bounds[k * p + stage];
        out->hi[k] = bounds[k * p + stage + 1];
    }
    free(bounds);
    int first = out->lo[0] == 0, last = out->hi[v - 1] == L;
    size_t b, e;
    out->tied_copy = last && !first;
    if (out->tied_copy) { /* the LM head's copy of wte */
        out->begin[0] = 0;
        out->end[0] = (size_t)coh_gpt_vocab_per_shard(m) * m->dim;
        out->nranges = 1;
    }
    for (int k = 0; k < v; k++) {
        coh_gpt_layer_range(m, out->lo[k] == 0 ? -1 : out->lo[k], &b, &e);
        size_t begin = b;
        coh_gpt_layer_range(m, out->hi[k] == L ? L : out->hi[k] - 1, &b, &e);
        int n = out->nranges;
        if (n && out->end[n - 1] == begin) {
            out->end[n - 1] = e;
        } else {
            out->begin[n] = begin;
            out->end[n] = e;
            out->nranges++;
        }
    }
    for (int k = 0; k < out->nranges; k++)
        out->params += out->end[k] - out->begin[k];
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
