/* par_ckpt.c: saving checkpoints of the parallel trainer. Single/DDP: rank 0 writes the
 * engine's state + weights pair (it holds the whole model anyway). Every other mesh (ZeRO, tp,
 * pp and their mixes) writes the sharded layout (shard.h): each rank streams the weights and
 * AdamW moments it holds, as runs of the whole model's arena, into its own file; then world
 * rank 0 writes the state file and, last, the commit file at the checkpoint's path: the config
 * and the index of which file holds which ranges. No rank gathers another's state: a save holds
 * the rank's state plus ckpt_save_bytes. The commit's rename is the commit (commit.c), so a
 * crash mid-save leaves the previous checkpoint whole. Resume: par_ckpt_load.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/train_ckpt.h"
#include "train/ckpt/ckpt_int.h"
#include "train/ckpt/commit.h"
#include "train/ckpt/gpt_ckpt_int.h"
#include "train/ckpt/shard.h"
#include "train/parallel/par_trainer_int.h"

/* What one rank writes: its weights' runs (src: arena offset) and its moments' runs (src:
 * offset in the optimizer's back-to-back ranges), and the buffers they come from. */
typedef struct shard_out {
    ckpt_runs w, m;
    size_t *wpre, *mpre; /* element offset of each run in its tensor (n + 1) */
    int64_t *wr, *mr;    /* the runs' whole-arena ranges, (n, 2) */
    const float *params, *om, *ov;
    int bf16;
    int kind[5]; /* the file's tensors: 0 weights, 1 weight_ranges, 2 m, 3 v, 4 ranges */
} shard_out;

static void shard_out_free(shard_out *o)
{
    ckpt_runs_free(&o->w);
    ckpt_runs_free(&o->m);
    free(o->wpre);
    free(o->mpre);
    free(o->wr);
    free(o->mr);
}

/* The weights this rank writes: ZeRO-3 its own slices; otherwise the first replica all it
 * holds (a pipeline stage's ranges, less a last stage's copy of the tied wte); a tp shard
 * other than the first leaves the replicated tensors to the first. */
static coh_status weight_runs(const coh_par_trainer *t, ckpt_runs *rs)
{
    const coh_gpt_config *c = coh_gpt_get_config(t->model);
    int tr = t->mesh->tp_rank;
    coh_status st = COH_OK;
    if (t->zero_stage == 3) {
        for (int k = 0; !st && k < t->nown; k++)
            st = ckpt_runs_add(rs, c, tr, t->own_rb[k], t->own_re[k], 0, tr != 0);
    } else if (t->rdp == 0 && t->pipe) {
        const coh_pipe_stage *lay = par_pipe_layout(t->pipe);
        for (int k = lay->tied_copy ? 1 : 0; !st && k < lay->nranges; k++)
            st = ckpt_runs_add(rs, c, tr, lay->begin[k], lay->end[k], 0, tr != 0);
    } else if (t->rdp == 0) {
        st = ckpt_runs_add(rs, c, tr, 0, t->n, 0, tr != 0);
    }
    return st;
}

/* The moments this rank writes: its optimizer's ranges (less a last stage's tied copy, whose
 * moments the first stage writes) when they are sliced over the replicas, else the first
 * replica's. */
static coh_status moment_runs(const coh_par_trainer *t, ckpt_runs *rs)
{
    const coh_gpt_config *c = coh_gpt_get_config(t->model);
    int tr = t->mesh->tp_rank;
    int sliced = t->zero_stage >= 1 || (t->pipe && t->cfg.par.strategy == COH_STRATEGY_ZERO1);
    int first = t->pipe && par_pipe_layout(t->pipe)->tied_copy ? 1 : 0;
    size_t off = 0;
    coh_status st = COH_OK;
    for (int k = 0; !st && k < t->nown; k++) {
        if (k >= first && (sliced || t->rdp == 0))
            st = ckpt_runs_add(rs, c, tr, t->own_rb[k], t->own_re[k],
                               (long long)off - (long long)t->own_rb[k], tr != 0);
        off += t->own_re[k] - t->own_rb[k];
    }
    return st;
}

/* Element offsets of the runs in their tensor and their (n, 2) ranges. */
static coh_status tables(const ckpt_runs *rs, size_t **pre, int64_t **r)
{
    *pre = malloc((rs->n + 1) * sizeof **pre);
    *r = malloc((rs->n ? rs->n : 1) * 2 * sizeof **r);
    if (!*pre || !*r)
        return coh_errf(COH_ERR_NOMEM, "out of memory listing a checkpoint's slices");
    (*pre)[0] = 0;
    for (size_t i = 0; i < rs->n; i++) {
        (*pre)[i + 1] = (*pre)[i] + rs->r[i].len;
        (*r)[2 * i] = (int64_t)rs->r[i].whole;
        (*r)[2 * i + 1] = (int64_t)(rs->r[i].whole + rs->r[i].len);
    }
    return COH_OK;
}

/* Elements [e0, e0 + n) of the runs' values (back to back) from `from` into buf, in bf16 when
 * asked (the save's own rounding). */
static void copy_runs(const ckpt_runs *rs, const size_t *pre, const float *from, size_t e0,
                      size_t n, void *buf, int bf16)
{
    size_t lo = 0, hi = rs->n;
    while (hi - lo > 1) { /* the run holding e0 */
        size_t mid = (lo + hi) / 2;
        if (pre[mid] <= e0)
            lo = mid;
        else
            hi = mid;
    }
    for (size_t i = lo, done = 0; done < n; i++) {
        size_t at = e0 + done - pre[i], k = rs->r[i].len - at;
        k = k < n - done ? k : n - done;
        const float *src = from + rs->r[i].src + at;
        if (bf16)
            coh_backend_current()->to_bf16((gpt_bf16 *)buf + done, src, k);
        else
            memcpy((float *)buf + done, src, k * sizeof(float));
        done += k;
    }
}

static coh_status fill(void *ctx, size_t i, uint64_t at, void *buf, size_t n)
{
    const shard_out *o = ctx;
    switch (o->kind[i]) {
    case 0:
        copy_runs(&o->w, o->wpre, o->params, at / (o->bf16 ? 2 : 4), n / (o->bf16 ? 2 : 4), buf,
                  o->bf16);
        break;
    case 2:
    case 3:
        copy_runs(&o->m, o->mpre, o->kind[i] == 2 ? o->om : o->ov, at / 4, n / 4, buf, 0);
        break;
    default:
        memcpy(buf, (const char *)(o->kind[i] == 1 ? o->wr : o->mr) + at, n);
    }
    return COH_OK;
}

/* This rank's file: its weights and their ranges, its moments and theirs (each pair only when
 * it has some). */
static coh_status write_file(shard_out *o, const char *name, long step)
{
    coh_st_tensor ten[5];
    size_t nt = 0;
    if (o->w.n) {
        ten[nt] = (coh_st_tensor){"weights", o->bf16 ? COH_ST_BF16 : COH_ST_F32, 1,
                                  {(int64_t)o->wpre[o->w.n]}, NULL, 0};
        o->kind[nt++] = 0;
        ten[nt] = (coh_st_tensor){"weight_ranges", COH_ST_I64, 2, {(int64_t)o->w.n, 2}, NULL, 0};
        o->kind[nt++] = 1;
    }
    if (o->m.n) {
        int64_t len = (int64_t)o->mpre[o->m.n];
        ten[nt] = (coh_st_tensor){"adamw.m", COH_ST_F32, 1, {len}, NULL, 0};
        o->kind[nt++] = 2;
        ten[nt] = (coh_st_tensor){"adamw.v", COH_ST_F32, 1, {len}, NULL, 0};
        o->kind[nt++] = 3;
        ten[nt] = (coh_st_tensor){"ranges", COH_ST_I64, 2, {(int64_t)o->m.n, 2}, NULL, 0};
        o->kind[nt++] = 4;
    }
    char sstep[24];
    snprintf(sstep, sizeof sstep, "%ld", step);
    coh_st_meta meta[] = {{"step", sstep}};
    return st_save_stream(name, ten, nt, meta, 1, fill, o);
}

/* Build this rank's lists and write its file when it holds something (o kept for the index). */
static coh_status write_shard(coh_par_trainer *t, const char *path, long step, shard_out *o)
{
    *o = (shard_out){.params = coh_gpt_params(t->model, NULL), .bf16 = t->cfg.train.save_bf16};
    coh_adamw *opt = coh_trainer_optimizer(t->base);
    o->om = coh_adamw_m(opt, NULL);
    o->ov = coh_adamw_v(opt, NULL);
    coh_status st = weight_runs(t, &o->w);
    if (!st)
        st = moment_runs(t, &o->m);
    if (!st)
        st = tables(&o->w, &o->wpre, &o->wr);
    if (!st)
        st = tables(&o->m, &o->mpre, &o->mr);
    if (!st && (o->w.n || o->m.n)) {
        char name[4200];
        ckpt_shard_name(name, sizeof name, path, step, coh_comm_rank(t->mesh->world),
                        coh_comm_size(t->mesh->world));
        st = write_file(o, name, step);
    }
    return st;
}

/* Append (file j, begin, end) rows of ranges r (k x 2) to *rows. */
static coh_status append_rows(int64_t **rows, int64_t *n, int j, const int64_t *r, int64_t k)
{
    int64_t *g = realloc(*rows, (size_t)(*n + k + 1) * 3 * sizeof *g);
    if (!g)
        return coh_errf(COH_ERR_NOMEM, "out of memory writing a checkpoint's index");
    for (int64_t i = 0; i < k; i++) {
        g[3 * (*n + i)] = j;
        g[3 * (*n + i) + 1] = r[2 * i];
        g[3 * (*n + i) + 2] = r[2 * i + 1];
    }
    *rows = g;
    *n += k;
    return COH_OK;
}

/* One list of ranges (k x 2) of rank j: rank 0 appends it to *rows (its own, or received from
 * j), rank j sends it. */
static coh_status index_part(coh_comm *w, int j, const int64_t *mine, int64_t k, int64_t **rows,
                             int64_t *n)
{
    int me = coh_comm_rank(w);
    if (!k || (me != 0 && me != j))
        return COH_OK;
    if (me == j && j != 0)
        return coh_send(w, mine, 2 * (size_t)k, COH_I64, 0);
    if (j == 0)
        return append_rows(rows, n, 0, mine, k);
    int64_t *r = malloc(2 * (size_t)k * sizeof *r);
    coh_status st = r ? coh_recv(w, r, 2 * (size_t)k, COH_I64, j)
                      : coh_errf(COH_ERR_NOMEM, "out of memory writing a checkpoint's index");
    if (!st)
        st = append_rows(rows, n, j, r, k);
    free(r);
    return st;
}

/* The index: every rank's range lists (counts in `counts`, (failed, kw, km) per rank) to world
 * rank 0, rank by rank: no rank holds more than its own lists, rank 0 the index. */
static coh_status gather_index(coh_comm *w, const shard_out *o, const int64_t *counts,
                               int64_t **wi, int64_t *nw, int64_t **mi, int64_t *nm)
{
    coh_status st = COH_OK;
    for (int j = 0; !st && j < coh_comm_size(w); j++)
        if (!(st = index_part(w, j, o->wr, counts[3 * j + 1], wi, nw)))
            st = index_part(w, j, o->mr, counts[3 * j + 2], mi, nm);
    return st;
}

static coh_status write_state(const char *path, long step, const coh_loader_pos *data,
                              int threads)
{
    char sp[4200], thr[24];
    coh_status st = ckpt_state_name(sp, sizeof sp, path, step);
    if (st)
        return st;
    snprintf(thr, sizeof thr, "%d", threads);
    coh_train_state s;
    memset(&s, 0, sizeof s);
    s.step = (uint64_t)step;
    if (data)
        s.data = *data;
    coh_st_meta meta[] = {{"threads", thr}};
    return coh_state_save(sp, &s, NULL, 0, meta, 1);
}

/* The commit file: the whole model's config and metadata (as a weights file's, naming the
 * state), the layout and file count, and the index of weights and moments. */
static coh_status write_commit(const coh_par_trainer *t, const char *path, const char *tokenizer,
                               long step, int n, const int64_t *wi, int64_t nw, const int64_t *mi,
                               int64_t nm)
{
    coh_gpt_config whole = t->cfg.train.model;
    whole.tp = 1;
    whole.sp = 0;
    if (!nw || !nm)
        return coh_errf(COH_ERR_INTERNAL, "checkpoint '%s': no rank wrote %s", path,
                        nw ? "moments" : "weights");
    gpt_meta_text m;
    size_t nmeta = gpt_weights_meta(&whole, tokenizer, step, 1, &m);
    char sn[24];
    snprintf(sn, sizeof sn, "%d", n);
    coh_st_meta meta[11];
    memcpy(meta, m.meta, nmeta * sizeof *meta);
    meta[nmeta++] = (coh_st_meta){"layout", "shards"};
    meta[nmeta++] = (coh_st_meta){"shards", sn};
    coh_st_tensor ten[2] = {{"moment_index", COH_ST_I64, 2, {nm, 3}, (void *)mi, 0},
                            {"weight_index", COH_ST_I64, 2, {nw, 3}, (void *)wi, 0}};
    return coh_st_save(path, ten, 2, meta, nmeta);
}

/* Every rank its file; all agree that each did and send rank 0 their lists; world rank 0
 * writes the state and the commit; after the barrier that follows, it removes the other
 * steps' files. */
static coh_status save_sharded(coh_par_trainer *t, const char *path, const char *tokenizer,
                               const coh_loader_pos *data, int threads)
{
    coh_comm *w = t->mesh->world;
    int n = coh_comm_size(w), me = coh_comm_rank(w);
    long step = coh_trainer_get_step(t->base);
    shard_out o;
    coh_status st = write_shard(t, path, step, &o);
    int64_t mine[3] = {st != COH_OK, (int64_t)o.w.n, (int64_t)o.m.n};
    int64_t *all = malloc(3 * (size_t)n * sizeof *all), *wi = NULL, *mi = NULL, nw = 0, nm = 0;
    coh_status s2 = all ? coh_allgather(w, mine, all, 3, COH_I64)
                        : coh_errf(COH_ERR_NOMEM, "out of memory saving '%s'", path);
    st = st ? st : s2;
    for (int j = 0; !st && j < n; j++)
        if (all[3 * j])
            st = coh_errf(COH_ERR_IO, "checkpoint '%s': rank %d could not write its shard", path,
                          j);
    if (!st)
        st = gather_index(w, &o, all, &wi, &nw, &mi, &nm);
    if (!st && me == 0 && !(st = write_state(path, step, data, threads)))
        st = write_commit(t, path, tokenizer, step, n, wi, nw, mi, nm);
    shard_out_free(&o);
    free(all);
    free(wi);
    free(mi);
    s2 = coh_barrier(w);
    st = st ? st : s2;
    if (!st && me == 0) {
        ckpt_fault_point("committed, cleanup next", path);
        ckpt_remove_others(path, step);
    }
    return st;
}

static coh_status save_any(coh_par_trainer *t, const char *path, const char *tokenizer,
                           const coh_loader_pos *data, int threads)
{
    if (t->mesh->tp > 1 || t->pipe || t->zero_stage >= 1)
        return save_sharded(t, path, tokenizer, data, threads);
    coh_status st = t->rdp == 0 ? coh_trainer_save(t->base, path, tokenizer, data, threads)
                                : COH_OK;
    coh_status s2 = t->ndp > 1 ? coh_barrier(t->dp) : COH_OK;
    return st ? st : s2;
}

coh_status coh_par_trainer_save(coh_par_trainer *t, const char *path, const char *tokenizer,
                                const coh_loader_pos *data, int threads)
{
    coh_status st = ckpt_fault_begin();
    if (!st)
        st = save_any(t, path, tokenizer, data, threads);
    ckpt_fault_end();
    return st;
}
