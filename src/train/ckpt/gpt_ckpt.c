/* gpt_ckpt.c: model weights <-> HF GPT2LMHeadModel safetensors (a plain copy: the arena already
 * stores Conv1D [in, out] layouts), and the training-state companion file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/train_ckpt.h"
#include "train/backend/backend.h"
#include "train/ckpt/commit.h"
#include "train/ckpt/dev_io.h"
#include "train/ckpt/gpt_ckpt_int.h"
#include "train/ckpt/shard.h"
#include "train/model/gpt_int.h"


/* The arena as a list of safetensors entries; names live in `info`. */
typedef struct tensor_list {
    coh_st_tensor *t;
    coh_tensor_info *info;
} tensor_list;

static void free_list(tensor_list *l)
{
    free(l->t);
    free(l->info);
}

/* The arena's tensors in `dtype`, data pointing into the arena (a device save rounds BF16 on
 * the way), or with host_bf16, into a bf16 copy rounded here (*copy, which the caller frees). */
static coh_status list_tensors(const coh_gpt_config *c, const float *arena, coh_st_dtype dtype,
                               int host_bf16, tensor_list *l, uint16_t **copy)
{
    int n = coh_gpt_tensor_count(c);
    size_t np = coh_gpt_param_count(c);
    int round_here = host_bf16 && dtype == COH_ST_BF16;
    *copy = NULL;
    l->t = calloc((size_t)n, sizeof *l->t);
    l->info = calloc((size_t)n, sizeof *l->info);
    if (round_here)
        *copy = malloc((np ? np : 1) * sizeof **copy);
    if (!l->t || !l->info || (round_here && !*copy)) {
        free_list(l);
        free(*copy);
        *copy = NULL;
        return coh_errf(COH_ERR_NOMEM, "out of memory listing tensors");
    }
    if (*copy)
        ckpt_round_bf16(*copy, arena, np);
    for (int i = 0; i < n; i++) {
        coh_tensor_info *in = &l->info[i];
        coh_gpt_tensor(c, i, in);
        l->t[i] = (coh_st_tensor){.name = in->name, .dtype = dtype, .ndim = in->ndim,
                                  .data = *copy ? (const void *)(*copy + in->offset)
                                                : (const void *)(arena + in->offset)};
        l->t[i].shape[0] = (int64_t)in->shape[0];
        l->t[i].shape[1] = (int64_t)in->shape[1];
    }
    return COH_OK;
}

/* The weights file, with "state_suffix" naming its step's state file when `commit` is set (the
 * file is then the checkpoint's commit); params in device memory (a model's) or on the host. */
static coh_status save_arena(const coh_gpt_config *c, const float *params, const char *path,
                             const char *tokenizer, long step, coh_st_dtype dtype,
                             const ckpt_tag *commit, int device)
{
    if (gpt_tp(c) > 1)
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': an arena of one of %d tensor-parallel "
                        "shards; gather the whole model first", path, c->tp);
    if (dtype != COH_ST_F32 && dtype != COH_ST_BF16)
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': weights in %s: cohort writes F32 or "
                        "BF16", path, coh_st_dtype_name(dtype));
    tensor_list l;
    uint16_t *copy;
    coh_status st = list_tensors(c, params, dtype, !device, &l, &copy);
    if (st)
        return st;
    gpt_meta_text m;
    size_t nmeta = gpt_weights_meta(c, tokenizer, step, commit, &m);
    size_t nt = (size_t)coh_gpt_tensor_count(c);
    st = device ? ckpt_save_device(path, l.t, nt, m.meta, nmeta)
                : coh_st_save(path, l.t, nt, m.meta, nmeta);
    free_list(&l);
    free(copy);
    return st;
}

coh_status coh_gpt_save(coh_gpt *g, const char *path, const char *tokenizer, long step)
{
    if (g->tp > 1)
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': this model is one of %d "
                        "tensor-parallel shards; the parallel trainer saves whole tensors", path,
                        g->tp);
    return save_arena(coh_gpt_get_config(g), coh_gpt_params(g, NULL), path, tokenizer, step,
                      COH_ST_F32, NULL, 1);
}


size_t gpt_weights_meta(const coh_gpt_config *c, const char *tokenizer, long step,
                        const ckpt_tag *commit, gpt_meta_text *m)
{
    const long vals[6] = {c->layers, c->heads, c->dim, c->vocab, c->seq, step};
    for (int i = 0; i < 6; i++)
        snprintf(m->nums[i], sizeof m->nums[i], "%ld", vals[i]);
    if (commit)
        ckpt_state_suffix(m->suffix, sizeof m->suffix, *commit);
    const coh_st_meta meta[] = {
        {"format", "pt"},              {"n_layer", m->nums[0]},    {"n_head", m->nums[1]},
        {"n_embd", m->nums[2]},        {"vocab_size", m->nums[3]}, {"n_positions", m->nums[4]},
        {"step", m->nums[5]},          {"tokenizer", tokenizer ? tokenizer : ""},
        {"state_suffix", m->suffix},
    };
    memcpy(m->meta, meta, sizeof meta);
    return sizeof meta / sizeof *meta - (commit ? 0 : 1);
}

coh_status coh_gpt_save_arena(const coh_gpt_config *c, const float *params, const char *path,
                              const char *tokenizer, long step)
{
    return save_arena(c, params, path, tokenizer, step, COH_ST_F32, NULL, 0);
}

coh_status coh_gpt_save_arena_dtype(const coh_gpt_config *c, const float *params,
                                    const char *path, const char *tokenizer, long step,
                                    coh_st_dtype dtype)
{
    return save_arena(c, params, path, tokenizer, step, dtype, NULL, 0);
}

coh_status gpt_save_commit(const coh_gpt_config *c, const float *params, const char *path,
                           const char *tokenizer, ckpt_tag tag, int bf16)
{
    return save_arena(c, params, path, tokenizer, tag.step, bf16 ? COH_ST_BF16 : COH_ST_F32, &tag,
                      1);
}

static int meta_int(const coh_st_file *f, const char *key, long *v)
{
    const char *s = coh_st_meta_get(f, key);
    char *end;
    if (!s || !*s)
        return 0;
    *v = strtol(s, &end, 10);
    return *end == 0;
}

static coh_status infer_config(const coh_st_file *f, const char *path, int heads_hint,
                               coh_gpt_config *c)
{
    const coh_st_tensor *wte = coh_st_find(f, "transformer.wte.weight");
    const coh_st_tensor *wpe = coh_st_find(f, "transformer.wpe.weight");
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2)
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': no 2-d transformer.wte.weight and "
                        "transformer.wpe.weight: not a GPT-2 checkpoint", path);
    if (wte->shape[0] < 1 || wte->shape[0] > (1 << 20) || wte->shape[1] < 1 ||
        wte->shape[1] > (1 << 20) || wpe->shape[0] < 1 || wpe->shape[0] > (1 << 20))
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': embedding shapes out of range", path);
    c->vocab = (int)wte->shape[0];
    c->dim = (int)wte->shape[1];
    c->seq = (int)wpe->shape[0];
    c->layers = 0;
    char name[64];
    for (; c->layers < (1 << 20); ) {
        snprintf(name, sizeof name, "transformer.h.%d.ln_1.weight", c->layers);
        if (!coh_st_find(f, name))
            break;
        c->layers++;
    }
    c->heads = heads_hint > 0 ? heads_hint : (c->dim % 64 ? 1 : c->dim / 64);
    return COH_OK;
}

coh_status gpt_config_from_file(const coh_st_file *f, const char *path, int heads_hint,
                                coh_gpt_config *out, char *tokenizer, size_t cap)
{
    long L, H, C, V, S;
    coh_status st = COH_OK;
    if (meta_int(f, "n_layer", &L) && meta_int(f, "n_head", &H) && meta_int(f, "n_embd", &C) &&
        meta_int(f, "vocab_size", &V) && meta_int(f, "n_positions", &S)) {
        const long lim = 1L << 20;
        if (L < 1 || L > lim || H < 1 || H > lim || C < 1 || C > lim || V < 1 || V > lim ||
            S < 1 || S > lim)
            return coh_errf(COH_ERR_INVALID, "checkpoint '%s': config metadata out of range "
                            "(n_layer %ld, n_head %ld, n_embd %ld, vocab_size %ld, n_positions "
                            "%ld)", path, L, H, C, V, S);
        *out = (coh_gpt_config){(int)L, (int)H, (int)C, (int)V, (int)S, 0, 0};
    } else {
        st = infer_config(f, path, heads_hint, out);
    }
    if (tokenizer && cap) {
        const char *tk = coh_st_meta_get(f, "tokenizer");
        snprintf(tokenizer, cap, "%s", tk ? tk : "");
    }
    if (!st && (st = coh_gpt_config_check(out)))
        coh_err_prefix(st, "checkpoint '%s'", path);
    return st;
}

coh_status coh_gpt_checkpoint_config(const char *path, int heads_hint, coh_gpt_config *out,
                                     char *tokenizer, size_t cap)
{
    coh_st_file *f;
    coh_status st = coh_st_open(path, &f);
    if (st)
        return st;
    st = gpt_config_from_file(f, path, heads_hint, out, tokenizer, cap);
    coh_st_close(f);
    return st;
}

/* A sharded checkpoint: the model's slices (a tp shard's, or every tensor) from the pieces. */
static coh_status load_sharded(coh_gpt *g, const coh_st_file *f, const char *path)
{
    const coh_gpt_config *c = coh_gpt_get_config(g), *k;
    ckpt_src *s;
    ckpt_runs rs = {0};
    coh_status st = ckpt_src_open(f, path, NULL, 0, &s);
    if (st)
        return st;
    k = ckpt_src_config(s);
    if (k->layers != c->layers || k->dim != c->dim ||
        k->vocab != c->vocab || k->seq != c->seq)
        st = coh_errf(COH_ERR_MISMATCH, "checkpoint '%s' is of another model (%d layers, dim "
                      "%d, vocabulary %d, context %d)", path, k->layers, k->dim, k->vocab, k->seq);
    if (!st)
        st = ckpt_runs_add(&rs, c, g->tp_rank, 0, coh_gpt_param_count(c), 0, 0);
    if (!st)
        st = ckpt_src_read_runs(s, CKPT_W, &rs, coh_gpt_params(g, NULL));
    ckpt_runs_free(&rs);
    ckpt_src_close(s);
    return st;
}

coh_status gpt_load_from_file(coh_gpt *g, const coh_st_file *f, const char *path)
{
    if (ckpt_is_sharded(f))
        return load_sharded(g, f, path);
    const coh_gpt_config *c = coh_gpt_get_config(g);
    coh_gpt_config whole = *c;
    whole.tp = 1;
    float *arena = coh_gpt_params(g, NULL), *full = NULL;
    coh_status st = COH_OK;
    for (int i = 0; !st && i < coh_gpt_tensor_count(c); i++) {
        coh_tensor_info t, wt;
        coh_tensor_shard sh;
        coh_gpt_tensor(c, i, &t);
        coh_gpt_tensor(&whole, i, &wt);
        coh_gpt_tensor_shard(c, i, g->tp_rank, &sh);
        int64_t shape[2] = {(int64_t)wt.shape[0], (int64_t)wt.shape[1]};
        if (sh.replicated) { /* the whole tensor, straight into the arena */
            st = ckpt_read_device(f, t.name, t.ndim, shape, arena + t.offset);
            continue;
        }
        /* a tensor-parallel shard reads the whole tensor on the host and keeps its part */
        float *buf = realloc(full, (wt.numel + t.numel) * sizeof *full);
        if (!buf) {
            st = coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", t.name);
            break;
        }
        full = buf;
        if (!(st = coh_st_read(f, t.name, COH_ST_F32, t.ndim, shape, full))) {
            coh_tensor_shard_scatter(&sh, full, full + wt.numel);
            coh_backend_current()->copy(arena + t.offset, full + wt.numel,
                                        t.numel * sizeof *full, COH_COPY_H2D);
        }
    }
    free(full);
    return st ? coh_err_prefix(st, "loading '%s'", path) : COH_OK;
}

coh_status gpt_check_resumable(const coh_st_file *f, const char *path)
{
    const coh_st_tensor *wte = coh_st_find(f, "transformer.wte.weight");
    if (wte && wte->dtype != COH_ST_F32)
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s' holds its weights in %s (saved with "
                        "--save-dtype bf16, for inference): resuming needs the fp32 master "
                        "weights; start from it with --init-from, or save with --save-dtype fp32 "
                        "to resume", path, coh_st_dtype_name(wte->dtype));
    return COH_OK;
}

coh_status coh_gpt_load(coh_gpt *g, const char *path)
{
    coh_st_file *f;
    coh_status st = coh_st_open(path, &f);
    if (st)
        return st;
    st = gpt_load_from_file(g, f, path);
    coh_st_close(f);
    return st;
}

coh_status gpt_state_path_of(const coh_st_file *f, const char *path, char *buf, size_t cap)
{
    ckpt_tag t;
    coh_status st = ckpt_tag_of(f, path, &t);
    if (st)
        return st;
    if (!coh_st_meta_get(f, "state_suffix")) { /* the older layout: a pair of unsuffixed files */
        if ((size_t)snprintf(buf, cap, "%s.state", path) >= cap)
            return coh_errf(COH_ERR_INVALID, "checkpoint path '%s' is too long", path);
        return COH_OK;
    }
    return ckpt_state_name(buf, cap, path, t);
}

coh_status coh_ckpt_state_path(const char *path, char *buf, size_t cap)
{
    coh_st_file *f;
    coh_status st = coh_st_open(path, &f);
    if (st)
        return st;
    st = gpt_state_path_of(f, path, buf, cap);
    coh_st_close(f);
    return st;
}

size_t gpt_state_meta(const coh_trainer_config *c, int threads, gpt_state_meta_text *m)
{
    const int v[4] = {threads, c->batch, c->accum, c->seq};
    static const char *const key[4] = {"threads", "micro_batch", "grad_accum", "seq"};
    for (int i = 0; i < 4; i++) {
        snprintf(m->nums[i], sizeof m->nums[i], "%d", v[i]);
        m->meta[i] = (coh_st_meta){key[i], m->nums[i]};
    }
    return 4;
}

coh_status coh_trainer_save(coh_trainer *t, const char *path, const char *tokenizer,
                            const coh_loader_pos *data, int threads)
{
    char sp[4096];
    long step = coh_trainer_get_step(t);
    coh_gpt *g = coh_trainer_model(t);
    ckpt_tag tag = ckpt_tag_for(path, step);
    coh_status st = ckpt_state_name(sp, sizeof sp, path, tag);
    if (st)
        return st;
    if (g->tp > 1)
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': this model is one of %d "
                        "tensor-parallel shards; the parallel trainer saves whole tensors", path,
                        g->tp);
    size_t n;
    coh_adamw *o = coh_trainer_optimizer(t);
    coh_st_tensor ten[2] = {
        {"adamw.m", COH_ST_F32, 1, {0}, coh_adamw_m(o, &n), 0},
        {"adamw.v", COH_ST_F32, 1, {0}, coh_adamw_v(o, NULL), 0},
    };
    ten[0].shape[0] = ten[1].shape[0] = (int64_t)n;
    coh_train_state s;
    memset(&s, 0, sizeof s);
    s.step = (uint64_t)coh_trainer_get_step(t);
    if (data)
        s.data = *data;
    gpt_state_meta_text mt;
    size_t nmeta = gpt_state_meta(coh_trainer_get_config(t), threads, &mt);
    /* the state of this step, then the weights naming it: their rename commits the pair */
    if ((st = ckpt_state_save_device(sp, &s, ten, 2, mt.meta, nmeta)))
        return st;
    if ((st = gpt_save_commit(coh_gpt_get_config(g), coh_gpt_params(g, NULL), path, tokenizer,
                              tag, coh_trainer_get_config(t)->save_bf16)))
        return ckpt_drop_uncommitted(st, path, sp);
    ckpt_fault_point("committed, cleanup next", path);
    ckpt_remove_others(path, tag);
    return COH_OK;
}

coh_status coh_trainer_resume(coh_trainer *t, const char *path, coh_loader_pos *data,
                              int *threads)
{
    char sp[4096];
    coh_st_file *mf, *sf;
    coh_train_state s;
    coh_status st = coh_st_open(path, &mf);
    if (st)
        return st;
    if ((st = gpt_state_path_of(mf, path, sp, sizeof sp)) ||
        (st = coh_state_open(sp, &s, &sf))) {
        coh_st_close(mf);
        return st;
    }
    long mstep = -1;
    if (!meta_int(mf, "step", &mstep) || mstep != (long)s.step) {
        st = coh_errf(COH_ERR_MISMATCH, "checkpoint '%s' is at step %ld but its state '%s' is "
                      "at step %llu: the pair is torn (a save was interrupted)",
                      path, mstep, sp, (unsigned long long)s.step);
    }
    if (!st)
        st = gpt_check_resumable(mf, path);
    if (!st)
        st = gpt_load_from_file(coh_trainer_model(t), mf, path);
    size_t n;
    coh_adamw *o = coh_trainer_optimizer(t);
    int64_t shape[1];
    float *m = coh_adamw_m(o, &n);
    shape[0] = (int64_t)n;
    if (!st && (st = ckpt_read_device(sf, "adamw.m", 1, shape, m)))
        coh_err_prefix(st, "loading '%s'", sp);
    if (!st && (st = ckpt_read_device(sf, "adamw.v", 1, shape, coh_adamw_v(o, NULL))))
        coh_err_prefix(st, "loading '%s'", sp);
    if (!st) {
        coh_trainer_set_step(t, (long)s.step);
        *data = s.data;
        const char *thr = coh_st_meta_get(sf, "threads");
        *threads = thr ? atoi(thr) : 0;
    }
    coh_st_close(mf);
    coh_st_close(sf);
    return st;
}
