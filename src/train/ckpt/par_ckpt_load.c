/* par_ckpt_load.c: resuming the parallel trainer from either kind of checkpoint (the engine's
 * pair or a ZeRO shard set with its index) into any dp size and stage: each rank reads only the
 * shards that overlap what it owns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/train_ckpt.h"
#include "train/ckpt/gpt_ckpt_int.h"
#include "train/parallel/par_trainer_int.h"

/* Where moments read from a checkpoint go: ranges [rb[j], re[j]) of the whole model's arena,
 * held back to back in m and v (this rank's optimizer; or, for a tensor-parallel shard, the
 * whole arena, cut into the shard afterwards). nparams: the whole model's arena. */
typedef struct moments_dst {
    float *m, *v;
    const size_t *rb, *re;
    int n;
    size_t nparams;
} moments_dst;

/* Copy the parts of a source (m, v over ranges sr, k x 2) that the destination covers; returns
 * the elements copied. */
static size_t fill(const moments_dst *d, const float *sm, const float *sv, const int64_t *sr,
                   int64_t k)
{
    size_t soff = 0, got = 0;
    for (int64_t i = 0; i < k; i++) {
        size_t sb = (size_t)sr[2 * i], se = (size_t)sr[2 * i + 1], doff = 0;
        for (int j = 0; j < d->n; j++) {
            size_t db = d->rb[j], de = d->re[j];
            size_t b = sb > db ? sb : db, e = se < de ? se : de;
            if (b < e) {
                memcpy(d->m + doff + (b - db), sm + soff + (b - sb), (e - b) * sizeof *sm);
                memcpy(d->v + doff + (b - db), sv + soff + (b - sb), (e - b) * sizeof *sv);
                got += e - b;
            }
            doff += de - db;
        }
        soff += se - sb;
    }
    return got;
}

/* Reads an (rows, cols) int64 tensor of any row count; *out is malloc'd. */
static coh_status read_rows(const coh_st_file *f, const char *file, const char *name, int cols,
                            int64_t **out, int64_t *rows)
{
    const coh_st_tensor *tt = coh_st_find(f, name);
    *out = NULL;
    if (!tt || tt->ndim != 2 || tt->shape[1] != cols || tt->shape[0] < 1 ||
        tt->shape[0] > (1 << 24))
        return coh_errf(COH_ERR_INVALID, "checkpoint file '%s': no (n, %d) tensor '%s'", file,
                        cols, name);
    *rows = tt->shape[0];
    if (!(*out = malloc((size_t)*rows * cols * sizeof **out)))
        return coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", file);
    return coh_st_read(f, name, COH_ST_I64, 2, tt->shape, *out);
}

/* Check ranges against the arena; *count receives their total length. */
static coh_status check_ranges(const char *file, const int64_t *r, int64_t k, int stride,
                               size_t nparams, size_t *count)
{
    *count = 0;
    for (int64_t i = 0; i < k; i++) {
        int64_t b = r[stride * i + stride - 2], e = r[stride * i + stride - 1];
        if (b < 0 || e < b || (uint64_t)e > nparams)
            return coh_errf(COH_ERR_INVALID, "checkpoint file '%s': range '[%lld, %lld)' is "
                            "outside the model's %zu parameters", file, (long long)b,
                            (long long)e, nparams);
        *count += (size_t)(e - b);
    }
    return COH_OK;
}

coh_status par_ranges_read(const coh_st_file *f, const char *file, int cols, size_t nparams,
                           int64_t **rows, int64_t *k, size_t *total)
{
    coh_status st = read_rows(f, file, "ranges", cols, rows, k);
    if (!st)
        st = check_ranges(file, *rows, *k, cols, nparams, total);
    for (int64_t i = 0; !st && cols == 3 && i < *k; i++)
        if ((*rows)[3 * i] < 0 || (*rows)[3 * i] >= (1 << 20))
            st = coh_errf(COH_ERR_INVALID, "checkpoint index '%s': invalid rank '%lld' in row "
                          "%lld", file, (long long)(*rows)[3 * i], (long long)i);
    if (st) {
        free(*rows);
        *rows = NULL;
    }
    return st;
}

static coh_status load_moments(const moments_dst *d, const coh_st_file *f, const char *file,
                               const int64_t *ranges, int64_t k, size_t *got)
{
    size_t n;
    coh_status st = check_ranges(file, ranges, k, 2, d->nparams, &n);
    float *m = st ? NULL : malloc((n ? n : 1) * sizeof *m);
    float *v = st ? NULL : malloc((n ? n : 1) * sizeof *v);
    int64_t shape[1] = {(int64_t)n};
    if (!st && (!m || !v))
        st = coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", file);
    if (!st && !(st = coh_st_read(f, "adamw.m", COH_ST_F32, 1, shape, m)) &&
        !(st = coh_st_read(f, "adamw.v", COH_ST_F32, 1, shape, v)))
        *got += fill(d, m, v, ranges, k);
    free(m);
    free(v);
    return st ? coh_err_prefix(st, "loading '%s'", file) : COH_OK;
}

static int overlaps_mine(const moments_dst *d, int64_t b, int64_t e)
{
    for (int j = 0; j < d->n; j++)
        if ((size_t)b < d->re[j] && (size_t)e > d->rb[j])
            return 1;
    return 0;
}

static coh_status load_shard(const moments_dst *d, const char *path, long step, int j, int n,
                             size_t *got)
{
    char name[4200];
    par_shard_name(name, sizeof name, path, step, j, n);
    coh_st_file *f;
    int64_t *r = NULL, k = 0;
    size_t total;
    coh_status st = coh_st_open(name, &f);
    if (st)
        return st;
    const char *ms = coh_st_meta_get(f, "step");
    if (!ms || atol(ms) != step)
        st = coh_errf(COH_ERR_MISMATCH, "optimizer shard '%s' is not of step %ld", name, step);
    if (!st && !(st = par_ranges_read(f, name, 2, d->nparams, &r, &k, &total)))
        st = load_moments(d, f, name, r, k, got);
    free(r);
    coh_st_close(f);
    return st;
}

/* Every shard the index says overlaps this rank's ranges. */
static coh_status load_zero(const moments_dst *d, const char *path, const char *index, long step,
                            int n, size_t *got)
{
    char name[4200];
    const char *slash = strrchr(path, '/');
    snprintf(name, sizeof name, "%.*s%s", slash ? (int)(slash - path + 1) : 0, path, index);
    coh_st_file *f;
    int64_t *rows = NULL, k = 0;
    size_t total;
    coh_status st = coh_st_open(name, &f);
    if (st)
        return st;
    st = par_ranges_read(f, name, 3, d->nparams, &rows, &k, &total);
    coh_st_close(f);
    for (int j = 0; !st && j < n; j++) {
        int want = 0;
        for (int64_t i = 0; i < k; i++)
            want |= rows[3 * i] == j && overlaps_mine(d, rows[3 * i + 1], rows[3 * i + 2]);
        if (want)
            st = load_shard(d, path, step, j, n, got);
    }
    free(rows);
    return st;
}

/* The weights of the pair, read once: their step must be the state's. */
static coh_status load_weights(coh_par_trainer *t, const char *path, const char *sp, long step)
{
    coh_st_file *mf;
    coh_status st = coh_st_open(path, &mf);
    if (st)
        return st;
    const char *ms = coh_st_meta_get(mf, "step");
    if (!ms || atol(ms) != step)
        st = coh_errf(COH_ERR_MISMATCH, "checkpoint '%s' is at step %s but its state '%s' is at "
                      "step %ld: the pair is torn (a save was interrupted)", path,
                      ms ? ms : "?", sp, step);
    if (!st)
        st = gpt_check_resumable(mf, path);
    if (!st)
        st = gpt_load_from_file(t->model, mf, path);
    coh_st_close(mf);
    return st;
}

/* The moments of either kind of checkpoint into d. */
static coh_status read_moments(const moments_dst *d, const char *path, const char *sp,
                               const coh_st_file *sf, long step, size_t *got)
{
    const char *index = coh_st_meta_get(sf, "zero_index"), *sdp = coh_st_meta_get(sf, "zero_dp");
    if (index) {
        int n = sdp ? atoi(sdp) : 0;
        if (n < 1 || n > 1 << 20)
            return coh_errf(COH_ERR_INVALID, "checkpoint state '%s': invalid zero_dp '%s'", sp,
                            sdp ? sdp : "");
        return load_zero(d, path, index, step, n, got);
    }
    int64_t r[2] = {0, (int64_t)d->nparams};
    return load_moments(d, sf, sp, r, 1, got);
}

/* A tensor-parallel shard: the whole model's moments, then this shard's part of them, then the
 * ranges its optimizer covers. */
static coh_status read_moments_tp(coh_par_trainer *t, const moments_dst *whole, const char *path,
                                  const char *sp, const coh_st_file *sf, long step, size_t *got)
{
    size_t nw = whole->nparams, have = 0;
    float *wm = malloc(nw * sizeof *wm), *wv = malloc(nw * sizeof *wv);
    float *lm = malloc(t->n * sizeof *lm), *lv = malloc(t->n * sizeof *lv);
    size_t all_b = 0;
    moments_dst d = {wm, wv, &all_b, &whole->nparams, 1, nw};
    coh_status st = wm && wv && lm && lv ? read_moments(&d, path, sp, sf, step, &have)
                                         : coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'",
                                                    sp);
    if (!st && have != nw)
        st = coh_errf(COH_ERR_INVALID, "checkpoint '%s' holds optimizer state for %zu of the "
                      "model's %zu parameters", path, have, nw);
    if (!st) {
        coh_gpt_arena_scatter(&t->cfg.train.model, t->mesh->tp_rank, wm, lm);
        coh_gpt_arena_scatter(&t->cfg.train.model, t->mesh->tp_rank, wv, lv);
        coh_adamw *o = coh_trainer_optimizer(t->base);
        float *m = coh_adamw_m(o, NULL), *v = coh_adamw_v(o, NULL);
        size_t off = 0;
        for (int j = 0; j < t->nown; j++) {
            size_t len = t->own_re[j] - t->own_rb[j];
            memcpy(m + off, lm + t->own_rb[j], len * sizeof *m);
            memcpy(v + off, lv + t->own_rb[j], len * sizeof *v);
            off += len;
        }
        *got += off;
    }
    free(wm);
    free(wv);
    free(lm);
    free(lv);
    return st;
}

static coh_status resume_any(coh_par_trainer *t, const char *path, const char *sp,
                             const coh_st_file *sf, long step)
{
    coh_gpt_config whole = t->cfg.train.model;
    whole.tp = 1;
    coh_adamw *o = coh_trainer_optimizer(t->base);
    moments_dst d = {coh_adamw_m(o, NULL), coh_adamw_v(o, NULL), t->own_rb, t->own_re, t->nown,
                     coh_gpt_param_count(&whole)};
    size_t got = 0, total = 0;
    coh_status st = load_weights(t, path, sp, step);
    for (int j = 0; j < t->nown; j++)
        total += t->own_re[j] - t->own_rb[j];
    if (!st)
        st = t->mesh->tp > 1 ? read_moments_tp(t, &d, path, sp, sf, step, &got)
                             : read_moments(&d, path, sp, sf, step, &got);
    if (!st && got != total)
        st = coh_errf(COH_ERR_INVALID, "checkpoint '%s' holds optimizer state for %zu of the %zu "
                      "parameters this rank owns", path, got, total);
    return st;
}

coh_status coh_par_trainer_resume(coh_par_trainer *t, const char *path, coh_loader_pos *data,
                                  int *threads)
{
    char sp[4200];
    coh_train_state s;
    coh_st_file *sf;
    coh_status st = coh_ckpt_state_path(path, sp, sizeof sp); /* the state the weights name */
    if (st || (st = coh_state_open(sp, &s, &sf)))
        return st;
    if (!coh_st_meta_get(sf, "zero_index") && t->zero_stage == 0 && !t->pipe && t->mesh->tp == 1) {
        coh_st_close(sf); /* the engine's own pair, read by the engine */
        st = coh_trainer_resume(t->base, path, data, threads);
        coh_par_trainer_params_loaded(t);
        return st;
    }
    st = resume_any(t, path, sp, sf, (long)s.step);
    if (!st) {
        const char *thr = coh_st_meta_get(sf, "threads");
        coh_trainer_set_step(t->base, (long)s.step);
        *data = s.data;
        *threads = thr ? atoi(thr) : 0;
    }
    coh_st_close(sf);
    coh_par_trainer_params_loaded(t);
    return st;
}
