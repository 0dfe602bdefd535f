/* par_ckpt_load.c: resuming the parallel trainer at any mesh from either layout (the engine's
 * pair or the sharded layout of shard.h): each rank reads only the ranges of the whole model
 * that it holds, weights and moments, through a ckpt_src. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/train_ckpt.h"
#include "train/ckpt/gpt_ckpt_int.h"
#include "train/ckpt/shard.h"
#include "train/parallel/par_trainer_int.h"

/* The weights this rank holds: ZeRO-3 its own slices, a pipeline stage its ranges (the tied
 * copy included), otherwise its whole arena. */
static coh_status held_weights(const coh_par_trainer *t, ckpt_runs *rs)
{
    const coh_gpt_config *c = coh_gpt_get_config(t->model);
    int tr = t->mesh->tp_rank;
    coh_status st = COH_OK;
    if (t->zero_stage == 3) {
        for (int k = 0; !st && k < t->nown; k++)
            st = ckpt_runs_add(rs, c, tr, t->own_rb[k], t->own_re[k], 0, 0);
    } else if (t->pipe) {
        const coh_pipe_stage *lay = par_pipe_layout(t->pipe);
        for (int k = 0; !st && k < lay->nranges; k++)
            st = ckpt_runs_add(rs, c, tr, lay->begin[k], lay->end[k], 0, 0);
    } else {
        st = ckpt_runs_add(rs, c, tr, 0, t->n, 0, 0);
    }
    return st;
}

/* The optimizer's ranges, at their places in its back-to-back buffers. */
static coh_status held_moments(const coh_par_trainer *t, ckpt_runs *rs)
{
    const coh_gpt_config *c = coh_gpt_get_config(t->model);
    size_t off = 0;
    coh_status st = COH_OK;
    for (int k = 0; !st && k < t->nown; k++) {
        st = ckpt_runs_add(rs, c, t->mesh->tp_rank, t->own_rb[k], t->own_re[k],
                           (long long)off - (long long)t->own_rb[k], 0);
        off += t->own_re[k] - t->own_rb[k];
    }
    return st;
}

/* The checkpoint's model must be the trainer's. */
static coh_status same_model(const coh_par_trainer *t, const ckpt_src *s, const char *path)
{
    const coh_gpt_config *a = ckpt_src_config(s), *b = &t->cfg.train.model;
    if (a->layers != b->layers || a->dim != b->dim || a->vocab != b->vocab || a->seq != b->seq)
        return coh_errf(COH_ERR_MISMATCH, "checkpoint '%s' is of a model with %d layers, dim %d, "
                        "vocabulary %d, context %d; this run's has %d, %d, %d, %d", path,
                        a->layers, a->dim, a->vocab, a->seq, b->layers, b->dim, b->vocab, b->seq);
    return COH_OK;
}

static coh_status load_all(coh_par_trainer *t, ckpt_src *s)
{
    ckpt_runs w = {0}, m = {0};
    coh_adamw *o = coh_trainer_optimizer(t->base);
    coh_status st = held_weights(t, &w);
    if (!st)
        st = held_moments(t, &m);
    if (!st)
        st = ckpt_src_read_runs(s, CKPT_W, &w, coh_gpt_params(t->model, NULL));
    if (!st)
        st = ckpt_src_read_runs(s, CKPT_M, &m, coh_adamw_m(o, NULL));
    if (!st)
        st = ckpt_src_read_runs(s, CKPT_V, &m, coh_adamw_v(o, NULL));
    ckpt_runs_free(&w);
    ckpt_runs_free(&m);
    return st;
}

/* The commit (or weights) file f and its state sf: steps agree, then every slice. */
static coh_status resume_from(coh_par_trainer *t, const char *path, const coh_st_file *f,
                              const char *sp, const coh_st_file *sf, long step)
{
    const char *ms = coh_st_meta_get(f, "step");
    if (!ms || atol(ms) != step)
        return coh_errf(COH_ERR_MISMATCH, "checkpoint '%s' is at step %s but its state '%s' is "
                        "at step %ld: the pair is torn (a save was interrupted)", path,
                        ms ? ms : "?", sp, step);
    ckpt_src *s;
    coh_status st = ckpt_is_sharded(f) ? COH_OK : gpt_check_resumable(f, path);
    if (!st && !(st = ckpt_src_open(f, path, sf, 1, &s))) {
        if (!(st = same_model(t, s, path)))
            st = load_all(t, s);
        ckpt_src_close(s);
    }
    return st;
}

/* The layout before sharded saves kept ZeRO's and the pipeline's moments in .zero files named by
 * the state's metadata: its weights still load (eval, --init-from, export), it does not resume. */
static coh_status refuse_old_layout(const coh_st_file *sf, const char *path)
{
    if (!coh_st_meta_get(sf, "zero_index"))
        return COH_OK;
    return coh_errf(COH_ERR_INVALID, "checkpoint '%s' is in the layout before sharded saves "
                    "(its optimizer state is in .zero files): it cannot be resumed; "
                    "--init-from, eval and export still read its weights", path);
}

/* The engine's own pair, read by the engine, once its state is known not to be the older
 * layout's (whose state holds no moments: the engine would only say that it lacks them). */
static coh_status resume_engine(coh_par_trainer *t, const coh_st_file *f, const char *path,
                                coh_loader_pos *data, int *threads)
{
    char sp[4200];
    coh_st_file *sf;
    if (!gpt_state_path_of(f, path, sp, sizeof sp) && !coh_st_open(sp, &sf)) {
        coh_status st = refuse_old_layout(sf, path);
        coh_st_close(sf);
        if (st)
            return st;
    }
    coh_err_clear(); /* a state that does not open: the engine says why */
    coh_status st = coh_trainer_resume(t->base, path, data, threads);
    coh_par_trainer_params_loaded(t);
    return st;
}

coh_status coh_par_trainer_resume(coh_par_trainer *t, const char *path, coh_loader_pos *data,
                                  int *threads)
{
    char sp[4200];
    coh_train_state s;
    coh_st_file *f, *sf;
    coh_status st = coh_st_open(path, &f);
    if (st)
        return st;
    if (!ckpt_is_sharded(f) && t->zero_stage == 0 && !t->pipe && t->mesh->tp == 1) {
        st = resume_engine(t, f, path, data, threads);
        coh_st_close(f);
        return st;
    }
    if ((st = gpt_state_path_of(f, path, sp, sizeof sp)) || (st = coh_state_open(sp, &s, &sf))) {
        coh_st_close(f);
        return st;
    }
    if (!(st = refuse_old_layout(sf, path)))
        st = resume_from(t, path, f, sp, sf, (long)s.step);
    if (!st) {
        const char *thr = coh_st_meta_get(sf, "threads");
        coh_trainer_set_step(t->base, (long)s.step);
        *data = s.data;
        *threads = thr ? atoi(thr) : 0;
    }
    coh_st_close(sf);
    coh_st_close(f);
    coh_par_trainer_params_loaded(t);
    return st;
}
