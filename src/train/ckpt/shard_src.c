/* shard_src.c: any range of a checkpoint's whole-model weights or moments, read from the pieces
 * of the sharded layout (opening only the files the index names for it) or from a plain
 * weights/state pair: every reader of either layout goes through it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/ckpt/gpt_ckpt_int.h"
#include "train/ckpt/shard.h"

struct ckpt_src {
    const coh_st_file *f, *sf;
    const char *path;
    coh_gpt_config c;
    size_t nparams;
    int sharded, f32_only;
    long step;
    int nfiles;
    int64_t *idx[2], nidx[2]; /* (file, begin, end) sorted by begin: weights, moments */
    ckpt_shard *shards;       /* opened on first use */
    coh_st_file **files;
    int ntens;                /* the pair: its weights' tensors at their arena offsets */
    const coh_st_tensor **tens;
};

static int cmp_row(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* The index `name` (k x 3: file, begin, end), checked and sorted. */
static coh_status read_index(ckpt_src *s, const char *name, int which)
{
    const coh_st_tensor *t = coh_st_find(s->f, name);
    if (!t || t->dtype != COH_ST_I64 || t->ndim != 2 || t->shape[1] != 3 || t->shape[0] < 1 ||
        t->shape[0] > (1 << 26))
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': no (n, 3) I64 index '%s'", s->path,
                        name);
    int64_t k = t->shape[0], *r = malloc((size_t)k * 3 * sizeof *r);
    if (!r)
        return coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", s->path);
    s->idx[which] = r;
    coh_status st = coh_st_read(s->f, name, COH_ST_I64, 2, t->shape, r);
    for (int64_t i = 0; !st && i < k; i++)
        if (r[3 * i] < 0 || r[3 * i] >= s->nfiles || r[3 * i + 1] < 0 ||
            r[3 * i + 2] <= r[3 * i + 1] || (uint64_t)r[3 * i + 2] > s->nparams)
            st = coh_errf(COH_ERR_INVALID, "checkpoint '%s': index '%s' row %lld (file '%lld', "
                          "range '[%lld, %lld)') is not a file of %d and a range of the model's "
                          "%zu parameters", s->path, name, (long long)i, (long long)r[3 * i],
                          (long long)r[3 * i + 1], (long long)r[3 * i + 2], s->nfiles,
                          s->nparams);
    if (!st)
        qsort(r, (size_t)k, 3 * sizeof *r, cmp_row);
    for (int64_t i = 1; !st && i < k; i++)
        if (r[3 * i + 1] < r[3 * i - 1])
            st = coh_errf(COH_ERR_INVALID, "checkpoint '%s': index '%s' has overlapping pieces "
                          "at element '%lld'", s->path, name, (long long)r[3 * i + 1]);
    s->nidx[which] = k;
    return st;
}

static coh_status open_sharded(ckpt_src *s)
{
    const char *n = coh_st_meta_get(s->f, "shards"), *ms = coh_st_meta_get(s->f, "step");
    char *end;
    long v = n ? strtol(n, &end, 10) : 0;
    if (!n || *end || v < 1 || v > (1 << 20))
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': invalid shards '%s' (expected a file "
                        "count from 1)", s->path, n ? n : "");
    s->nfiles = (int)v;
    s->step = ms ? atol(ms) : -1;
    s->shards = calloc((size_t)v, sizeof *s->shards);
    s->files = calloc((size_t)v, sizeof *s->files);
    if (!s->shards || !s->files)
        return coh_errf(COH_ERR_NOMEM, "out of memory opening '%s'", s->path);
    coh_status st = read_index(s, "weight_index", 0);
    return st ? st : read_index(s, "moment_index", 1);
}

/* The pair's weights: every tensor of the model, F32 or BF16, at its arena offset. */
static coh_status open_pair(ckpt_src *s)
{
    s->ntens = coh_gpt_tensor_count(&s->c);
    s->tens = calloc((size_t)s->ntens, sizeof *s->tens);
    if (!s->tens)
        return coh_errf(COH_ERR_NOMEM, "out of memory opening '%s'", s->path);
    for (int i = 0; i < s->ntens; i++) {
        coh_tensor_info ti;
        coh_gpt_tensor(&s->c, i, &ti);
        const coh_st_tensor *t = coh_st_find(s->f, ti.name);
        int64_t numel = 1;
        for (int d = 0; t && d < t->ndim; d++)
            numel *= t->shape[d];
        if (!t || (size_t)numel != ti.numel ||
            (t->dtype != COH_ST_F32 && t->dtype != COH_ST_BF16))
            return coh_errf(COH_ERR_INVALID, "checkpoint '%s': no F32 or BF16 tensor '%s' of "
                            "%zu elements", s->path, ti.name, ti.numel);
        s->tens[i] = t;
    }
    return COH_OK;
}

coh_status ckpt_src_open(const coh_st_file *f, const char *path, const coh_st_file *sf,
                         int f32_only, ckpt_src **out)
{
    ckpt_src *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s)
        return coh_errf(COH_ERR_NOMEM, "out of memory opening '%s'", path);
    *s = (ckpt_src){.f = f, .sf = sf, .path = path, .f32_only = f32_only,
                    .sharded = ckpt_is_sharded(f)};
    coh_status st = gpt_config_from_file(f, path, 0, &s->c, NULL, 0);
    s->c.tp = 1;
    s->c.sp = 0;
    if (!st) {
        s->nparams = coh_gpt_param_count(&s->c);
        st = s->sharded ? open_sharded(s) : open_pair(s);
    }
    if (st) {
        ckpt_src_close(s);
        return st;
    }
    *out = s;
    return COH_OK;
}

const coh_gpt_config *ckpt_src_config(const ckpt_src *s) { return &s->c; }

void ckpt_src_close(ckpt_src *s)
{
    if (!s)
        return;
    for (int j = 0; s->files && j < s->nfiles; j++) {
        ckpt_shard_free(&s->shards[j]);
        coh_st_close(s->files[j]);
    }
    free(s->shards);
    free(s->files);
    free(s->idx[0]);
    free(s->idx[1]);
    free(s->tens);
    free(s);
}

/* n values of tensor t from element `at` into dst as f32. */
static coh_status copy_out(const ckpt_src *s, const coh_st_tensor *t, size_t at, size_t n,
                           float *dst)
{
    if (t->dtype == COH_ST_F32) {
        memcpy(dst, (const char *)t->data + 4 * at, n * sizeof *dst);
        return COH_OK;
    }
    if (s->f32_only)
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s' holds its weights in BF16 (saved "
                        "with --save-dtype bf16, for inference): resuming needs the fp32 master "
                        "weights; start from it with --init-from, or save with --save-dtype fp32 "
                        "to resume", s->path);
    const unsigned char *p = (const unsigned char *)t->data + 2 * at;
    for (size_t k = 0; k < n; k++) { /* bf16: the upper half of an f32 */
        uint16_t h;
        memcpy(&h, p + 2 * k, 2);
        uint32_t w = (uint32_t)h << 16;
        memcpy(dst + k, &w, 4);
    }
    return COH_OK;
}

/* The first of k sorted (begin, end) ranges with stride `st` ending after x. */
static int64_t first_after(const int64_t *r, int64_t k, int stride, int64_t x)
{
    int64_t lo = 0, hi = k;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (r[stride * mid + stride - 1] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static coh_status open_file(ckpt_src *s, int j)
{
    if (s->files[j])
        return COH_OK;
    char name[4200];
    ckpt_shard_name(name, sizeof name, s->path, s->step, j, s->nfiles);
    coh_status st = coh_st_open(name, &s->files[j]);
    if (!st && (st = ckpt_shard_parse(s->files[j], name, s->nparams, s->step, &s->shards[j]))) {
        coh_st_close(s->files[j]);
        s->files[j] = NULL;
    }
    return st;
}

/* [x, y) from file j, which the index says holds it. */
static coh_status from_file(ckpt_src *s, ckpt_what w, int j, int64_t x, int64_t y, float *dst)
{
    coh_status st = open_file(s, j);
    if (st)
        return st;
    const ckpt_shard *sh = &s->shards[j];
    const int64_t *r = w == CKPT_W ? sh->w : sh->m, *off = w == CKPT_W ? sh->woff : sh->moff;
    int64_t k = w == CKPT_W ? sh->kw : sh->km, got = 0;
    const coh_st_tensor *t = w == CKPT_W ? sh->weights : w == CKPT_M ? sh->adam_m : sh->adam_v;
    for (int64_t i = first_after(r, k, 2, x); !st && i < k && r[2 * i] < y; i++) {
        int64_t b = r[2 * i] > x ? r[2 * i] : x, e = r[2 * i + 1] < y ? r[2 * i + 1] : y;
        st = copy_out(s, t, (size_t)(off[i] + b - r[2 * i]), (size_t)(e - b), dst + (b - x));
        got += e - b;
    }
    if (!st && got != y - x)
        st = coh_errf(COH_ERR_INVALID, "checkpoint '%s': its index names shard %d for elements "
                      "[%lld, %lld) but the shard holds %lld of them", s->path, j, (long long)x,
                      (long long)y, (long long)got);
    return st;
}

static coh_status read_sharded(ckpt_src *s, ckpt_what w, size_t b, size_t len, size_t *got,
                               float *dst)
{
    const int64_t *r = s->idx[w == CKPT_W ? 0 : 1];
    int64_t k = s->nidx[w == CKPT_W ? 0 : 1], y0 = (int64_t)(b + len);
    coh_status st = COH_OK;
    for (int64_t i = first_after(r, k, 3, (int64_t)b); !st && i < k && r[3 * i + 1] < y0; i++) {
        int64_t x = r[3 * i + 1] > (int64_t)b ? r[3 * i + 1] : (int64_t)b;
        int64_t y = r[3 * i + 2] < y0 ? r[3 * i + 2] : y0;
        st = from_file(s, w, (int)r[3 * i], x, y, dst + (x - (int64_t)b));
        *got += (size_t)(y - x);
    }
    return st;
}

static coh_status read_pair(ckpt_src *s, ckpt_what w, size_t b, size_t len, size_t *got,
                            float *dst)
{
    if (w != CKPT_W) {
        const coh_st_tensor *t = s->sf ? coh_st_find(s->sf, w == CKPT_M ? "adamw.m" : "adamw.v")
                                       : NULL;
        if (!t || t->dtype != COH_ST_F32 || t->ndim != 1 || (size_t)t->shape[0] != s->nparams)
            return coh_errf(COH_ERR_INVALID, "checkpoint '%s': its state holds no F32 '%s' of "
                            "the model's %zu parameters", s->path,
                            w == CKPT_M ? "adamw.m" : "adamw.v", s->nparams);
        *got = len;
        return copy_out(s, t, b, len, dst);
    }
    coh_status st = COH_OK;
    for (int i = 0; !st && i < s->ntens; i++) {
        coh_tensor_info ti;
        coh_gpt_tensor(&s->c, i, &ti);
        size_t tb = ti.offset, te = tb + ti.numel;
        size_t x = b > tb ? b : tb, y = b + len < te ? b + len : te;
        if (x < y) {
            st = copy_out(s, s->tens[i], x - tb, y - x, dst + (x - b));
            *got += y - x;
        }
    }
    return st;
}

coh_status ckpt_src_read(ckpt_src *s, ckpt_what w, size_t whole, size_t len, float *dst)
{
    size_t got = 0;
    if (whole > s->nparams || len > s->nparams - whole)
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': elements [%zu, %zu) are outside the "
                        "model's %zu parameters", s->path, whole, whole + len, s->nparams);
    coh_status st = s->sharded ? read_sharded(s, w, whole, len, &got, dst)
                               : read_pair(s, w, whole, len, &got, dst);
    if (!st && got != len)
        st = coh_errf(COH_ERR_INVALID, "checkpoint '%s' holds %zu of the %zu %s of elements "
                      "[%zu, %zu)", s->path, got, len, w == CKPT_W ? "weights" : "moments", whole,
                      whole + len);
    return st;
}

coh_status ckpt_src_read_runs(ckpt_src *s, ckpt_what w, const ckpt_runs *rs, float *base)
{
    coh_status st = COH_OK;
    for (size_t i = 0; !st && i < rs->n; i++)
        st = ckpt_src_read(s, w, rs->r[i].whole, rs->r[i].len, base + rs->r[i].src);
    return st;
}
