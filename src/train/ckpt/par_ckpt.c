/* par_ckpt.c: saving checkpoints of the parallel trainer. Single/DDP: rank 0 writes the
 * engine's state + weights pair. ZeRO: every rank writes its optimizer shard, rank 0 an index of
 * which shard holds which arena ranges, the state file naming the index and last the gathered
 * weights naming the state. Every file but the weights carries the step in its name, and the
 * weights' rename is the commit (commit.c), so a crash mid-save leaves the previous checkpoint
 * whole. Resume: par_ckpt_load.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/train_ckpt.h"
#include "train/ckpt/commit.h"
#include "train/ckpt/gpt_ckpt_int.h"
#include "train/parallel/par_trainer_int.h"

void par_shard_name(char *b, size_t cap, const char *path, long step, int r, int n)
{
    snprintf(b, cap, "%s.zero%ld-%d-of-%d", path, step, r, n);
}

void par_index_name(char *b, size_t cap, const char *path, long step)
{
    snprintf(b, cap, "%s.zero%ld.index", path, step);
}

/* The ranges this rank's shard holds: its optimizer's, less a pipeline's last stage's copy of
 * the tied wte (the first stage's shard has it), so a set's shards never overlap. */
static int shard_first(const coh_par_trainer *t)
{
    return t->pipe && par_pipe_layout(t->pipe)->tied_copy ? 1 : 0;
}

/* Shard r of n: this rank's AdamW m and v and the arena ranges they cover. */
static coh_status write_shard(coh_par_trainer *t, const char *path, long step, int r, int n)
{
    char name[4200], sstep[24];
    size_t count;
    coh_adamw *o = coh_trainer_optimizer(t->base);
    int first = shard_first(t), k = t->nown - first;
    size_t skip = first ? t->own_re[0] - t->own_rb[0] : 0;
    int64_t *rg = malloc(2 * (size_t)k * sizeof *rg);
    if (!rg)
        return coh_errf(COH_ERR_NOMEM, "out of memory writing the optimizer shard");
    for (int i = 0; i < k; i++) {
        rg[2 * i] = (int64_t)t->own_rb[first + i];
        rg[2 * i + 1] = (int64_t)t->own_re[first + i];
    }
    float *m = coh_adamw_m(o, &count), *v = coh_adamw_v(o, NULL);
    coh_st_tensor ten[3] = {
        {"adamw.m", COH_ST_F32, 1, {0}, m + skip, 0},
        {"adamw.v", COH_ST_F32, 1, {0}, v + skip, 0},
        {"ranges", COH_ST_I64, 2, {k, 2}, rg, 0},
    };
    ten[0].shape[0] = ten[1].shape[0] = (int64_t)(count - skip);
    snprintf(sstep, sizeof sstep, "%ld", step);
    coh_st_meta meta[] = {{"step", sstep}};
    par_shard_name(name, sizeof name, path, step, r, n);
    coh_status st = coh_st_save(name, ten, 3, meta, 1);
    free(rg);
    return st;
}

/* Index of the shards written by the ranks of `comm` (rank j wrote shard j of its size); rank 0
 * of comm writes it: (shard, begin, end) rows of every shard's ranges. Collective over comm. */
static coh_status write_index(coh_par_trainer *t, coh_comm *comm, const char *path, long step)
{
    int n = coh_comm_size(comm), me = coh_comm_rank(comm), first = shard_first(t);
    int64_t mine = t->nown - first, *counts = malloc((size_t)n * sizeof *counts);
    coh_status st = counts ? coh_allgather(comm, &mine, counts, 1, COH_I64)
                           : coh_errf(COH_ERR_NOMEM, "out of memory writing the index");
    int64_t maxn = 0, *mr = NULL, *all = NULL, *rows = NULL;
    for (int j = 0; !st && j < n; j++)
        maxn = counts[j] > maxn ? counts[j] : maxn;
    if (!st && (!(mr = calloc(2 * (size_t)maxn, sizeof *mr)) ||
                !(all = malloc(2 * (size_t)maxn * n * sizeof *all)) ||
                !(rows = malloc(3 * (size_t)maxn * n * sizeof *rows))))
        st = coh_errf(COH_ERR_NOMEM, "out of memory writing the index");
    for (int i = 0; !st && i < mine; i++) {
        mr[2 * i] = (int64_t)t->own_rb[first + i];
        mr[2 * i + 1] = (int64_t)t->own_re[first + i];
    }
    if (!st)
        st = coh_allgather(comm, mr, all, 2 * (size_t)maxn, COH_I64);
    if (!st && me == 0) {
        int64_t nr = 0;
        for (int j = 0; j < n; j++)
            for (int64_t i = 0; i < counts[j]; i++, nr++) {
                rows[3 * nr] = j;
                rows[3 * nr + 1] = all[2 * maxn * j + 2 * i];
                rows[3 * nr + 2] = all[2 * maxn * j + 2 * i + 1];
            }
        char name[4200], sstep[24], sdp[24];
        snprintf(sstep, sizeof sstep, "%ld", step);
        snprintf(sdp, sizeof sdp, "%d", n);
        coh_st_tensor ten = {"ranges", COH_ST_I64, 2, {nr, 3}, rows, 0};
        coh_st_meta meta[] = {{"step", sstep}, {"dp", sdp}};
        par_index_name(name, sizeof name, path, step);
        st = coh_st_save(name, &ten, 1, meta, 2);
    }
    free(counts);
    free(mr);
    free(all);
    free(rows);
    return st;
}

static coh_status write_state(int shards, const char *path, long step,
                              const coh_loader_pos *data, int threads)
{
    char sp[4200], idx[4200], thr[24], sdp[24];
    coh_status st = ckpt_state_name(sp, sizeof sp, path, step);
    if (st)
        return st;
    par_index_name(idx, sizeof idx, path, step);
    const char *base = strrchr(idx, '/') ? strrchr(idx, '/') + 1 : idx;
    snprintf(thr, sizeof thr, "%d", threads);
    snprintf(sdp, sizeof sdp, "%d", shards);
    coh_train_state s;
    memset(&s, 0, sizeof s);
    s.step = (uint64_t)step;
    if (data)
        s.data = *data;
    coh_st_meta meta[] = {{"threads", thr}, {"zero_index", base}, {"zero_dp", sdp}};
    return coh_state_save(sp, &s, NULL, 0, meta, 3);
}

/* The commit: the weights naming this step's state (bf16 with --save-dtype bf16, not
 * resumable), written by one rank once every rank's files of the step exist. */
static coh_status commit(const coh_par_trainer *t, const coh_gpt_config *c, const float *p,
                         const char *path, const char *tokenizer, long step)
{
    return gpt_save_commit(c, p, path, tokenizer, step, t->cfg.train.save_bf16);
}

/* After every rank passed the barrier that follows the commit: `lead` removes the other steps'
 * files. */
static void cleanup(int lead, const char *path, long step)
{
    if (!lead)
        return;
    ckpt_fault_point("committed, cleanup next", path);
    ckpt_remove_others(path, step);
}

static coh_status save_zero(coh_par_trainer *t, const char *path, const char *tokenizer,
                            const coh_loader_pos *data, int threads)
{
    long step = coh_trainer_get_step(t->base);
    coh_status st = write_shard(t, path, step, t->rdp, t->ndp);
    for (int k = 0; !st && t->zero_stage == 3 && k < t->nbk; k++)
        st = par_gather_bucket(t, k, 1); /* the weights file holds the whole model */
    if (!st)
        st = write_index(t, t->dp, path, step);
    /* the index's gather follows every rank's shard: rank 0 commits after all of them */
    if (!st && t->rdp == 0 && !(st = write_state(t->ndp, path, step, data, threads)))
        st = commit(t, coh_gpt_get_config(t->model), coh_gpt_params(t->model, NULL), path,
                    tokenizer, step);
    if (t->zero_stage == 3)
        par_release_params(t);
    coh_status s2 = coh_barrier(t->dp);
    st = st ? st : s2;
    if (!st)
        cleanup(t->rdp == 0, path, step);
    return st;
}

/* A pipeline's set: the first replica of each stage writes its optimizer shard (shard s of pp;
 * under ZeRO-1 every rank its slices, shard r of the world), world rank 0 the gathered weights,
 * the index and the state, as ZeRO's set is laid out: any mesh resumes from it, and eval and
 * generate read the weights. */
static coh_status save_pipeline(coh_par_trainer *t, const char *path, const char *tokenizer,
                                const coh_loader_pos *data, int threads)
{
    long step = coh_trainer_get_step(t->base);
    const coh_mesh *m = t->mesh;
    float *full = malloc(t->n * sizeof *full);
    coh_status st = full ? par_gather_own(t, full)
                         : coh_errf(COH_ERR_NOMEM, "out of memory gathering the weights");
    /* replicas hold the same state: the first writes; ZeRO-1 slices it: every rank writes */
    int zero1 = t->ndp > 1 && t->cfg.par.strategy == COH_STRATEGY_ZERO1;
    coh_comm *writers = zero1 ? m->world : m->pp_comm;
    int writes = zero1 || t->rdp == 0, shards = coh_comm_size(writers);
    if (!st && writes)
        st = write_shard(t, path, step, coh_comm_rank(writers), shards);
    if (!st && writes)
        st = write_index(t, writers, path, step);
    /* world rank 0 is a writer: past the index's gather, every shard exists */
    if (!st && coh_comm_rank(m->world) == 0 &&
        !(st = write_state(shards, path, step, data, threads)))
        st = commit(t, &t->cfg.train.model, full, path, tokenizer, step);
    free(full);
    coh_status s2 = coh_barrier(m->world);
    st = st ? st : s2;
    if (!st)
        cleanup(coh_comm_rank(m->world) == 0, path, step);
    return st;
}

/* This rank's AdamW moments at their places in its arena (zero elsewhere), summed over the
 * ranks that split the arena (dp replicas' slices, pipeline stages): every rank then holds its
 * shard's whole m and v. A range is counted once: replicas that hold the same state contribute
 * from dp rank 0 only, and a last stage's copy of the tied wte not at all. */
static coh_status moments_of_shard(coh_par_trainer *t, float *m, float *v)
{
    coh_adamw *o = coh_trainer_optimizer(t->base);
    const float *om = coh_adamw_m(o, NULL), *ov = coh_adamw_v(o, NULL);
    int sliced = t->zero_stage >= 1 || (t->pipe && t->cfg.par.strategy == COH_STRATEGY_ZERO1);
    memset(m, 0, t->n * sizeof *m);
    memset(v, 0, t->n * sizeof *v);
    size_t off = 0;
    for (int k = 0; k < t->nown; k++) {
        size_t len = t->own_re[k] - t->own_rb[k];
        int skip = (k < shard_first(t)) || (!sliced && t->rdp != 0);
        if (!skip) {
            memcpy(m + t->own_rb[k], om + off, len * sizeof *m);
            memcpy(v + t->own_rb[k], ov + off, len * sizeof *v);
        }
        off += len;
    }
    coh_status st = COH_OK;
    coh_comm *axes[2] = {t->ndp > 1 ? t->dp : NULL, t->pipe ? t->mesh->pp_comm : NULL};
    for (int a = 0; !st && a < 2; a++)
        if (axes[a] && !(st = coh_allreduce(axes[a], m, m, t->n, COH_F32, COH_SUM)))
            st = coh_allreduce(axes[a], v, v, t->n, COH_F32, COH_SUM);
    return st;
}

/* Tensor parallelism: the whole model's weights and moments gathered from the shards to world
 * rank 0, which writes the engine's pair (HF-named whole tensors): any mesh resumes from it,
 * and eval and generate read it as a one-device checkpoint. */
static coh_status save_tensor_parallel(coh_par_trainer *t, const char *path,
                                       const char *tokenizer, const coh_loader_pos *data,
                                       int threads)
{
    long step = coh_trainer_get_step(t->base);
    coh_gpt_config whole = t->cfg.train.model;
    whole.tp = 1;
    size_t nw = coh_gpt_param_count(&whole);
    float *p = malloc(nw * sizeof *p), *m = malloc(nw * sizeof *m), *v = malloc(nw * sizeof *v);
    float *sm = malloc(t->n * sizeof *sm), *sv = malloc(t->n * sizeof *sv);
    coh_status st = p && m && v && sm && sv
                        ? coh_par_trainer_gather_params(t, p)
                        : coh_errf(COH_ERR_NOMEM, "out of memory gathering the checkpoint");
    if (!st)
        st = moments_of_shard(t, sm, sv);
    if (!st && !(st = par_tp_gather(t, sm, m, nw)))
        st = par_tp_gather(t, sv, v, nw);
    if (!st && coh_comm_rank(t->mesh->world) == 0) {
        char sp[4200], thr[24];
        st = ckpt_state_name(sp, sizeof sp, path, step);
        snprintf(thr, sizeof thr, "%d", threads);
        coh_st_tensor ten[2] = {{"adamw.m", COH_ST_F32, 1, {(int64_t)nw}, m, 0},
                                {"adamw.v", COH_ST_F32, 1, {(int64_t)nw}, v, 0}};
        coh_train_state s;
        memset(&s, 0, sizeof s);
        s.step = (uint64_t)step;
        if (data)
            s.data = *data;
        coh_st_meta meta[] = {{"threads", thr}};
        if (!st && !(st = coh_state_save(sp, &s, ten, 2, meta, 1)))
            st = commit(t, &whole, p, path, tokenizer, step);
    }
    free(p);
    free(m);
    free(v);
    free(sm);
    free(sv);
    coh_status s2 = coh_barrier(t->mesh->world);
    st = st ? st : s2;
    if (!st)
        cleanup(coh_comm_rank(t->mesh->world) == 0, path, step);
    return st;
}

static coh_status save_any(coh_par_trainer *t, const char *path, const char *tokenizer,
                           const coh_loader_pos *data, int threads)
{
    if (t->mesh->tp > 1)
        return save_tensor_parallel(t, path, tokenizer, data, threads);
    if (t->pipe)
        return save_pipeline(t, path, tokenizer, data, threads);
    if (t->zero_stage >= 1)
        return save_zero(t, path, tokenizer, data, threads);
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
