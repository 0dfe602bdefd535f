/* par_ckpt.c: saving checkpoints of the parallel trainer. Single/DDP: rank 0 writes the
 * engine's weights + state pair. ZeRO: every rank writes its optimizer shard, rank 0 the gathered
 * weights, an index of which shard holds which arena ranges, and last the state file naming the
 * index; files carry the step in their names, so a crash mid-save leaves the previous set
 * whole. Resume: par_ckpt_load.c. */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cohort/train_ckpt.h"
#include "train/parallel/strategy.h"

void par_shard_name(char *b, size_t cap, const char *path, long step, int r, int n)
{
    snprintf(b, cap, "%s.zero%ld-%d-of-%d", path, step, r, n);
}

void par_index_name(char *b, size_t cap, const char *path, long step)
{
    snprintf(b, cap, "%s.zero%ld.index", path, step);
}

static coh_status write_shard(coh_par_trainer *t, const char *path, long step)
{
    char name[4200], sstep[24];
    size_t n;
    coh_adamw *o = coh_trainer_optimizer(t->base);
    int64_t *rg = malloc(2 * (size_t)t->nown * sizeof *rg);
    if (!rg)
        return coh_errf(COH_ERR_NOMEM, "out of memory writing the optimizer shard");
    for (int i = 0; i < t->nown; i++) {
        rg[2 * i] = (int64_t)t->own_rb[i];
        rg[2 * i + 1] = (int64_t)t->own_re[i];
    }
    coh_st_tensor ten[3] = {
        {"adamw.m", COH_ST_F32, 1, {0}, coh_adamw_m(o, &n), 0},
        {"adamw.v", COH_ST_F32, 1, {0}, coh_adamw_v(o, NULL), 0},
        {"ranges", COH_ST_I64, 2, {t->nown, 2}, rg, 0},
    };
    ten[0].shape[0] = ten[1].shape[0] = (int64_t)n;
    snprintf(sstep, sizeof sstep, "%ld", step);
    coh_st_meta meta[] = {{"step", sstep}};
    par_shard_name(name, sizeof name, path, step, t->rdp, t->ndp);
    coh_status st = coh_st_save(name, ten, 3, meta, 1);
    free(rg);
    return st;
}

/* Rank 0: the index lists (rank, begin, end) of every shard's ranges. */
static coh_status write_index(coh_par_trainer *t, const char *path, long step)
{
    int64_t mine = t->nown, *counts = malloc((size_t)t->ndp * sizeof *counts);
    coh_status st = counts ? coh_allgather(t->dp, &mine, counts, 1, COH_I64)
                           : coh_errf(COH_ERR_NOMEM, "out of memory writing the index");
    int64_t maxn = 0, *mr = NULL, *all = NULL, *rows = NULL;
    for (int j = 0; !st && j < t->ndp; j++)
        maxn = counts[j] > maxn ? counts[j] : maxn;
    if (!st && (!(mr = calloc(2 * (size_t)maxn, sizeof *mr)) ||
                !(all = malloc(2 * (size_t)maxn * t->ndp * sizeof *all)) ||
                !(rows = malloc(3 * (size_t)maxn * t->ndp * sizeof *rows))))
        st = coh_errf(COH_ERR_NOMEM, "out of memory writing the index");
    for (int i = 0; !st && i < t->nown; i++) {
        mr[2 * i] = (int64_t)t->own_rb[i];
        mr[2 * i + 1] = (int64_t)t->own_re[i];
    }
    if (!st)
        st = coh_allgather(t->dp, mr, all, 2 * (size_t)maxn, COH_I64);
    if (!st && t->rdp == 0) {
        int64_t nr = 0;
        for (int j = 0; j < t->ndp; j++)
            for (int64_t i = 0; i < counts[j]; i++, nr++) {
                rows[3 * nr] = j;
                rows[3 * nr + 1] = all[2 * maxn * j + 2 * i];
                rows[3 * nr + 2] = all[2 * maxn * j + 2 * i + 1];
            }
        char name[4200], sstep[24], sdp[24];
        snprintf(sstep, sizeof sstep, "%ld", step);
        snprintf(sdp, sizeof sdp, "%d", t->ndp);
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

static coh_status write_state(coh_par_trainer *t, const char *path, long step,
                              const coh_loader_pos *data, int threads)
{
    char sp[4200], idx[4200], thr[24], sdp[24];
    snprintf(sp, sizeof sp, "%s.state", path);
    par_index_name(idx, sizeof idx, path, step);
    const char *base = strrchr(idx, '/') ? strrchr(idx, '/') + 1 : idx;
    snprintf(thr, sizeof thr, "%d", threads);
    snprintf(sdp, sizeof sdp, "%d", t->ndp);
    coh_train_state s;
    memset(&s, 0, sizeof s);
    s.step = (uint64_t)step;
    if (data)
        s.data = *data;
    coh_st_meta meta[] = {{"threads", thr}, {"zero_index", base}, {"zero_dp", sdp}};
    return coh_state_save(sp, &s, NULL, 0, meta, 3);
}

/* 1 when `s` is ".tmp.<digits>", the name atomic_file gives a file being written. */
static int tmp_suffix(const char *s)
{
    if (strncmp(s, ".tmp.", 5) || !s[5])
        return 0;
    for (s += 5; isdigit((unsigned char)*s); s++)
        ;
    return !*s;
}

/* 1 when directory entry `name` is a shard or index of checkpoint `base` (par_shard_name,
 * par_index_name) for a step other than `keep`, or such a file a killed process left half
 * written (any step: once every rank has written the set, nothing of this job is writing one). */
static int other_set_file(const char *name, const char *base, long keep)
{
    size_t bl = strlen(base);
    if (strncmp(name, base, bl) || strncmp(name + bl, ".zero", 5) ||
        !isdigit((unsigned char)name[bl + 5]))
        return 0;
    char *end;
    long step = strtol(name + bl + 5, &end, 10);
    int r, n, used = 0;
    if (!strncmp(end, ".index", 6))
        used = 6;
    else if (sscanf(end, "-%d-of-%d%n", &r, &n, &used) != 2)
        return 0;
    if (tmp_suffix(end + used))
        return 1;
    return end[used] == '\0' && step != keep;
}

/* Rank 0, once every rank has written the set of step `keep`: removes every other set of the
 * checkpoint, the previous one and any that a job killed while removing it left behind. */
static void remove_other_sets(const char *path, long keep)
{
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    char dir[4200], name[8400];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (other_set_file(e->d_name, base, keep)) {
            snprintf(name, sizeof name, "%s/%s", dir, e->d_name);
            unlink(name);
        }
    }
    closedir(d);
}

static coh_status save_zero(coh_par_trainer *t, const char *path, const char *tokenizer,
                            const coh_loader_pos *data, int threads)
{
    long step = coh_trainer_get_step(t->base);
    coh_status st = write_shard(t, path, step);
    for (int k = 0; !st && t->stage == 3 && k < t->nbk; k++)
        st = par_gather_bucket(t, k, 1); /* the weights file holds the whole model */
    if (!st)
        st = write_index(t, path, step);
    if (!st && t->rdp == 0 && !(st = coh_gpt_save(t->model, path, tokenizer, step)))
        st = write_state(t, path, step, data, threads);
    if (t->stage == 3)
        par_release_params(t);
    coh_status s2 = coh_barrier(t->dp); /* every shard and the state exist before cleanup */
    st = st ? st : s2;
    if (!st && t->rdp == 0)
        remove_other_sets(path, step);
    return st;
}

coh_status coh_par_trainer_save(coh_par_trainer *t, const char *path, const char *tokenizer,
                                const coh_loader_pos *data, int threads)
{
    if (t->pipe)
        return coh_errf(COH_ERR_UNSUPPORTED, "checkpoint '%s': a pipeline's (pp > 1) checkpoints "
                        "are not written yet", path);
    if (t->stage >= 1)
        return save_zero(t, path, tokenizer, data, threads);
    coh_status st = t->rdp == 0 ? coh_trainer_save(t->base, path, tokenizer, data, threads)
                                : COH_OK;
    coh_status s2 = t->ndp > 1 ? coh_barrier(t->dp) : COH_OK;
    return st ? st : s2;
}
