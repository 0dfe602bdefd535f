/* shard_map.c: where a rank's slices lie in the whole model's arena (runs), the names of a
 * sharded checkpoint's files and the parsing of one rank's file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/ckpt/ckpt_int.h"
#include "train/ckpt/shard.h"

void ckpt_runs_free(ckpt_runs *rs)
{
    free(rs->r);
    *rs = (ckpt_runs){0};
}

/* One run clipped to [lb, le) of the local arena, merged with the last when both continue it. */
static coh_status push(ckpt_runs *rs, size_t local, size_t whole, size_t len, size_t lb,
                       size_t le, long long shift)
{
    size_t b = local > lb ? local : lb, e = local + len < le ? local + len : le;
    if (b >= e)
        return COH_OK;
    size_t src = (size_t)((long long)b + shift), w = whole + (b - local);
    ckpt_run *last = rs->n ? &rs->r[rs->n - 1] : NULL;
    if (last && last->src + last->len == src && last->whole + last->len == w) {
        last->len += e - b;
        return COH_OK;
    }
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? 2 * rs->cap : 64;
        ckpt_run *r = realloc(rs->r, cap * sizeof *r);
        if (!r)
            return coh_errf(COH_ERR_NOMEM, "out of memory listing a checkpoint's slices");
        rs->r = r;
        rs->cap = cap;
    }
    rs->r[rs->n++] = (ckpt_run){src, w, e - b};
    return COH_OK;
}

/* Tensor i's runs: each row's segments, at their places in the whole tensor. */
static coh_status tensor_runs(ckpt_runs *rs, const coh_tensor_info *lt, const coh_tensor_info *ft,
                              const coh_tensor_shard *s, size_t lb, size_t le, long long shift)
{
    coh_status st = COH_OK;
    if (s->replicated)
        return push(rs, lt->offset, ft->offset, lt->numel, lb, le, shift);
    size_t lcols = (size_t)s->nseg * s->seg;
    for (size_t r = 0; !st && r < s->rows; r++)
        for (int k = 0; !st && k < s->nseg; k++)
            st = push(rs, lt->offset + r * lcols + (size_t)k * s->seg,
                      ft->offset + (s->row0 + r) * s->full_cols + s->col0[k], s->seg, lb, le,
                      shift);
    return st;
}

coh_status ckpt_runs_add(ckpt_runs *rs, const coh_gpt_config *c, int tp_rank, size_t lb,
                         size_t le, long long shift, int skip_rep)
{
    if (c->tp <= 1)
        return push(rs, lb, lb, le - lb, lb, le, shift);
    coh_gpt_config whole = *c;
    whole.tp = 1;
    coh_status st = COH_OK;
    for (int i = 0; !st && i < coh_gpt_tensor_count(c); i++) {
        coh_tensor_info lt, ft;
        coh_tensor_shard s;
        coh_gpt_tensor(c, i, &lt);
        if (lt.offset >= le || lt.offset + lt.numel <= lb)
            continue;
        coh_gpt_tensor(&whole, i, &ft);
        if (!(st = coh_gpt_tensor_shard(c, i, tp_rank, &s)) && !(skip_rep && s.replicated))
            st = tensor_runs(rs, &lt, &ft, &s, lb, le, shift);
    }
    return st;
}

uint64_t ckpt_save_bytes(const coh_gpt_config *c, int world)
{
    uint64_t runs = 1;
    for (int i = 0; c->tp > 1 && i < coh_gpt_tensor_count(c); i++) {
        coh_tensor_shard s;
        if (!coh_gpt_tensor_shard(c, i, 0, &s) && !s.replicated && s.seg * s.nseg != s.full_cols)
            runs += s.rows * (uint64_t)s.nseg; /* column-parallel: a run per row and segment */
        else
            runs++;
    }
    /* weights and moments: each run listed, its range in the file (two int64) and the index's
     * row of it (three) */
    return ST_STREAM_BUF + CKPT_ATOMIC_BUF + 2 * runs * (sizeof(ckpt_run) + 16) +
           2 * runs * 24 * (uint64_t)(world > 1 ? world : 1);
}

void ckpt_shard_name(char *b, size_t cap, const char *path, long step, int r, int n)
{
    snprintf(b, cap, "%s.shard%ld-%d-of-%d", path, step, r, n);
}

int ckpt_is_sharded(const coh_st_file *f)
{
    const char *l = coh_st_meta_get(f, "layout");
    return l && !strcmp(l, "shards");
}

void ckpt_shard_free(ckpt_shard *s)
{
    free(s->w);
    free(s->m);
    free(s->woff);
    free(s->moff);
    *s = (ckpt_shard){0};
}

static int cmp_begin(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Ranges (k x 2) checked inside nparams; *sorted receives them sorted by begin with each
 * range's element offset in the file's tensor ((begin, end, offset) rows, k x 3 in *sorted),
 * *total their length. Overlaps are refused. */
static coh_status sort_ranges(const int64_t *r, int64_t k, size_t nparams, const char *name,
                              int64_t **sorted, int64_t *total)
{
    int64_t *s = malloc((size_t)(k ? k : 1) * 3 * sizeof *s), off = 0;
    if (!s)
        return coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", name);
    for (int64_t i = 0; i < k; i++) {
        if (r[2 * i] < 0 || r[2 * i + 1] <= r[2 * i] || (uint64_t)r[2 * i + 1] > nparams) {
            free(s);
            return coh_errf(COH_ERR_INVALID, "checkpoint file '%s': range '[%lld, %lld)' is "
                            "empty or outside the model's %zu parameters", name,
                            (long long)r[2 * i], (long long)r[2 * i + 1], nparams);
        }
        s[3 * i] = r[2 * i];
        s[3 * i + 1] = r[2 * i + 1];
        s[3 * i + 2] = off;
        off += r[2 * i + 1] - r[2 * i];
    }
    qsort(s, (size_t)k, 3 * sizeof *s, cmp_begin);
    for (int64_t i = 1; i < k; i++)
        if (s[3 * i] < s[3 * i - 2]) {
            int64_t b = s[3 * i];
            free(s);
            return coh_errf(COH_ERR_INVALID, "checkpoint file '%s': ranges overlap at element "
                            "'%lld'", name, (long long)b);
        }
    *sorted = s;
    *total = off;
    return COH_OK;
}

/* A 1-d tensor `tname` of `len` elements in one of the dtypes allowed (bf16 only for weights). */
static coh_status vector(const coh_st_file *f, const char *name, const char *tname, int64_t len,
                         int bf16_ok, const coh_st_tensor **out)
{
    const coh_st_tensor *t = coh_st_find(f, tname);
    if (!t || t->ndim != 1 || t->shape[0] != len ||
        !(t->dtype == COH_ST_F32 || (bf16_ok && t->dtype == COH_ST_BF16)))
        return coh_errf(COH_ERR_INVALID, "checkpoint file '%s': no 1-d tensor '%s' of %lld %s "
                        "values for its ranges", name, tname, (long long)len,
                        bf16_ok ? "F32 or BF16" : "F32");
    *out = t;
    return COH_OK;
}

/* The (k, 2) ranges `rname` and their values' tensors, when the file has them. */
static coh_status part(const coh_st_file *f, const char *name, size_t nparams, const char *rname,
                       int64_t **sorted, int64_t *k)
{
    const coh_st_tensor *t = coh_st_find(f, rname);
    *k = 0;
    *sorted = NULL;
    if (!t)
        return COH_OK;
    if (t->dtype != COH_ST_I64 || t->ndim != 2 || t->shape[1] != 2 || t->shape[0] < 1 ||
        t->shape[0] > (1 << 26))
        return coh_errf(COH_ERR_INVALID, "checkpoint file '%s': '%s' is not an (n, 2) I64 "
                        "tensor", name, rname);
    int64_t *r = malloc((size_t)t->shape[0] * 2 * sizeof *r), total;
    coh_status st = r ? coh_st_read(f, rname, COH_ST_I64, 2, t->shape, r)
                      : coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", name);
    if (!st)
        st = sort_ranges(r, t->shape[0], nparams, name, sorted, &total);
    free(r);
    if (!st)
        *k = t->shape[0];
    return st;
}

/* Split (begin, end, offset) rows into the struct's arrays (begin/end pairs and offsets). */
static coh_status split(int64_t *rows, int64_t k, int64_t **be, int64_t **off)
{
    *be = malloc((size_t)(k ? k : 1) * 2 * sizeof **be);
    *off = malloc((size_t)(k ? k : 1) * sizeof **off);
    if (!*be || !*off)
        return coh_errf(COH_ERR_NOMEM, "out of memory reading a checkpoint's ranges");
    for (int64_t i = 0; i < k; i++) {
        (*be)[2 * i] = rows[3 * i];
        (*be)[2 * i + 1] = rows[3 * i + 1];
        (*off)[i] = rows[3 * i + 2];
    }
    return COH_OK;
}

static int64_t total_of(const int64_t *be, int64_t k)
{
    int64_t t = 0;
    for (int64_t i = 0; i < k; i++)
        t += be[2 * i + 1] - be[2 * i];
    return t;
}

coh_status ckpt_shard_parse(const coh_st_file *f, const char *name, size_t nparams, long step,
                            ckpt_shard *out)
{
    *out = (ckpt_shard){0};
    const char *ms = coh_st_meta_get(f, "step");
    if (step >= 0 && (!ms || atol(ms) != step))
        return coh_errf(COH_ERR_MISMATCH, "checkpoint file '%s' is not of step %ld", name, step);
    int64_t *w = NULL, *m = NULL;
    coh_status st = part(f, name, nparams, "weight_ranges", &w, &out->kw);
    if (!st)
        st = part(f, name, nparams, "ranges", &m, &out->km);
    if (!st)
        st = split(w, out->kw, &out->w, &out->woff);
    if (!st)
        st = split(m, out->km, &out->m, &out->moff);
    free(w);
    free(m);
    if (!st && out->kw)
        st = vector(f, name, "weights", total_of(out->w, out->kw), 1, &out->weights);
    if (!st && out->km && !(st = vector(f, name, "adamw.m", total_of(out->m, out->km), 0,
                                        &out->adam_m)))
        st = vector(f, name, "adamw.v", total_of(out->m, out->km), 0, &out->adam_v);
    if (st)
        ckpt_shard_free(out);
    return st;
}
