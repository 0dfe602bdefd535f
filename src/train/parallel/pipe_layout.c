/* pipe_layout.c: where a pipeline puts the model: the blocks of each virtual stage (balanced by
 * estimated compute, the LM head included), and the arena ranges each stage holds. Pure, so the
 * trainer, its memory prediction and the start-up summary agree. */
#include <stdlib.h>
#include <string.h>

#include "train/parallel/strategy.h"

void par_pipe_split(const coh_gpt_config *c, int T, int u, int even, int *bounds)
{
    int L = c->layers;
    double blk = 24.0 * c->dim * (double)c->dim + 4.0 * T * (double)c->dim;
    double head = 2.0 * c->vocab * (double)c->dim;
    double *best = even ? NULL : malloc(sizeof(double) * (size_t)(u + 1) * (L + 1));
    int *cut = even ? NULL : malloc(sizeof(int) * (size_t)(u + 1) * (L + 1));
    if (!best || !cut) { /* even parts: asked for, or no memory for the search */
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
        par_pipe_split(m, T, u, v > 1, bounds);
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
        out->end[0] = (size_t)m->vocab * m->dim;
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
