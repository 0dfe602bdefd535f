/* loader.c: the batch loader: maps token shards, enumerates windows of T+1 tokens, orders them
 * per epoch (file order or a seeded permutation) and hands each data-parallel rank its rows of
 * every global batch. */
#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/data.h"
#include "train/data/file_map.h"
#include "train/data/perm.h"

typedef struct shard {
    char *path;
    file_map map;
    const unsigned char *tokens; /* uint16 little-endian, after the header */
    uint64_t ntokens;
} shard;

struct coh_loader {
    coh_loader_config cfg;
    shard *shards;
    size_t nshards, shards_cap;
    uint64_t *first_window; /* (nshards + 1) prefix sums of windows per shard */
    uint64_t windows, tokens, global_rows, steps_per_epoch;
    uint64_t epoch, step, seed;
    perm order;
};

static coh_status check_config(const coh_loader_config *c)
{
    if (!c->paths || c->npaths == 0)
        return coh_errf(COH_ERR_INVALID, "no data files given");
    if (c->batch < 1)
        return coh_errf(COH_ERR_INVALID, "invalid batch size '%d': must be at least 1", c->batch);
    if (c->seq < 1)
        return coh_errf(COH_ERR_INVALID, "invalid sequence length '%d': must be at least 1",
                        c->seq);
    if (c->world < 1)
        return coh_errf(COH_ERR_INVALID, "invalid data-parallel size '%d': must be at least 1",
                        c->world);
    if (c->rank < 0 || c->rank >= c->world)
        return coh_errf(COH_ERR_INVALID, "invalid data-parallel rank '%d': valid are 0..%d",
                        c->rank, c->world - 1);
    if (c->mode != COH_LOADER_TRAIN && c->mode != COH_LOADER_EVAL)
        return coh_errf(COH_ERR_INVALID, "invalid loader mode '%d'", (int)c->mode);
    return COH_OK;
}

static coh_status check_vocab(const shard *s, int64_t vocab)
{
    for (uint64_t i = 0; i < s->ntokens; i++) {
        int64_t id = s->tokens[2 * i] | s->tokens[2 * i + 1] << 8;
        if (id >= vocab)
            return coh_errf(COH_ERR_INVALID,
                            "'%s': token %llu is id %lld, outside the model's vocabulary of "
                            "%lld ids: train a model of at least %lld ids (--vocab), or prepare "
                            "the text with a tokenizer of at most %lld ids%s", s->path,
                            (unsigned long long)i, (long long)id, (long long)vocab,
                            (long long)id + 1, (long long)vocab,
                            vocab == 256 ? " (--tokenizer byte)" : "");
    }
    return COH_OK;
}

static coh_status add_shard(coh_loader *l, const char *path)
{
    if (l->nshards == l->shards_cap) {
        size_t cap = l->shards_cap ? l->shards_cap * 2 : 8;
        shard *p = realloc(l->shards, cap * sizeof *p);
        if (!p)
            return coh_errf(COH_ERR_NOMEM, "out of memory");
        l->shards = p;
        l->shards_cap = cap;
    }
    shard *s = &l->shards[l->nshards];
    memset(s, 0, sizeof *s);
    s->path = strdup(path);
    if (!s->path)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    coh_status st = file_map_open(&s->map, path);
    if (st == COH_OK)
        st = coh_shard_check(s->map.data, s->map.size, path, &s->ntokens);
    if (st == COH_OK) {
        s->tokens = (const unsigned char *)s->map.data + COH_SHARD_HEADER_BYTES;
        if (l->cfg.vocab > 0)
            st = check_vocab(s, l->cfg.vocab);
    }
    if (st != COH_OK) {
        file_map_close(&s->map);
        free(s->path);
        return st;
    }
    l->nshards++;
    return COH_OK;
}

coh_status coh_shard_files(const char *entry, coh_status (*each)(void *ctx, const char *file),
                           void *ctx)
{
    if (!strpbrk(entry, "*?["))
        return each(ctx, entry);
    glob_t g;
    int rc = glob(entry, GLOB_ERR, NULL, &g);
    if (rc == GLOB_NOMATCH)
        return coh_errf(COH_ERR_NOT_FOUND, "no files match '%s'", entry);
    if (rc != 0) /* GLOB_ERR: a folder on the way is missing or unreadable */
        return coh_errf(COH_ERR_NOT_FOUND, "no files match '%s' (a folder in it cannot be read)",
                        entry);
    coh_status st = COH_OK;
    for (size_t i = 0; st == COH_OK && i < g.gl_pathc; i++)
        st = each(ctx, g.gl_pathv[i]);
    globfree(&g);
    return st;
}

static coh_status add_file(void *ctx, const char *file) { return add_shard(ctx, file); }

static coh_status count_windows(coh_loader *l)
{
    l->first_window = malloc((l->nshards + 1) * sizeof *l->first_window);
    if (!l->first_window)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    uint64_t T = (uint64_t)l->cfg.seq;
    l->windows = l->tokens = 0;
    for (size_t i = 0; i < l->nshards; i++) {
        l->first_window[i] = l->windows;
        uint64_t n = l->shards[i].ntokens;
        l->windows += n > 0 ? (n - 1) / T : 0;
        l->tokens += n;
    }
    l->first_window[l->nshards] = l->windows;
    l->global_rows = (uint64_t)l->cfg.batch * (uint64_t)l->cfg.world;
    l->steps_per_epoch = l->windows / l->global_rows;
    if (l->steps_per_epoch == 0)
        return coh_errf(COH_ERR_INVALID,
                        "too little data: %llu tokens in %zu shard(s) make %llu windows of %d+1 "
                        "tokens, fewer than one global batch of %llu rows (batch %d x %d ranks)",
                        (unsigned long long)l->tokens, l->nshards,
                        (unsigned long long)l->windows, l->cfg.seq,
                        (unsigned long long)l->global_rows, l->cfg.batch, l->cfg.world);
    return COH_OK;
}

coh_status coh_loader_create(const coh_loader_config *cfg, coh_loader **out)
{
    *out = NULL;
    coh_status st = check_config(cfg);
    if (st != COH_OK)
        return st;
    coh_loader *l = calloc(1, sizeof *l);
    if (!l)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    l->cfg = *cfg;
    l->cfg.paths = NULL; /* not kept: the caller's array may go away */
    if (cfg->mode == COH_LOADER_EVAL)
        l->cfg.shuffle = 0;
    for (size_t i = 0; st == COH_OK && i < cfg->npaths; i++)
        st = coh_shard_files(cfg->paths[i], add_file, l);
    if (st == COH_OK)
        st = count_windows(l);
    if (st != COH_OK) {
        coh_loader_destroy(l);
        return st;
    }
    l->seed = cfg->seed;
    perm_init(&l->order, l->windows, l->seed, 0);
    *out = l;
    return COH_OK;
}

coh_status coh_shards_max_id(const char *const *paths, size_t n, int32_t *max_id)
{
    *max_id = -1;
    coh_loader *l = calloc(1, sizeof *l); /* vocab 0: add_shard checks no id */
    if (!l)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    coh_status st = n ? COH_OK : coh_errf(COH_ERR_INVALID, "no data files given");
    for (size_t i = 0; st == COH_OK && i < n; i++)
        st = coh_shard_files(paths[i], add_file, l);
    for (size_t k = 0; st == COH_OK && k < l->nshards; k++) {
        const shard *s = &l->shards[k];
        for (uint64_t i = 0; i < s->ntokens; i++) {
            int32_t id = s->tokens[2 * i] | s->tokens[2 * i + 1] << 8;
            *max_id = id > *max_id ? id : *max_id;
        }
    }
    coh_loader_destroy(l);
    return st;
}

void coh_loader_destroy(coh_loader *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->nshards; i++) {
        file_map_close(&l->shards[i].map);
        free(l->shards[i].path);
    }
    free(l->shards);
    free(l->first_window);
    free(l);
}

/* The shard holding global window w: the last shard whose first window is <= w. */
static size_t shard_of(const coh_loader *l, uint64_t w)
{
    size_t lo = 0, hi = l->nshards;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (l->first_window[mid] <= w)
            lo = mid;
        else
            hi = mid;
    }
    while (l->first_window[lo + 1] <= w) /* skip shards with no windows */
        lo++;
    return lo;
}

static void copy_window(const coh_loader *l, uint64_t w, int32_t *in, int32_t *tgt)
{
    size_t s = shard_of(l, w);
    uint64_t T = (uint64_t)l->cfg.seq;
    const unsigned char *p = l->shards[s].tokens + 2 * (w - l->first_window[s]) * T;
    for (uint64_t t = 0; t < T; t++) {
        in[t] = p[2 * t] | p[2 * t + 1] << 8;
        tgt[t] = p[2 * t + 2] | p[2 * t + 3] << 8;
    }
}

coh_status coh_loader_next(coh_loader *l, int32_t *inputs, int32_t *targets)
{
    if (l->step == l->steps_per_epoch) {
        if (l->cfg.mode == COH_LOADER_EVAL)
            return coh_errf(COH_ERR_NOT_FOUND,
                            "the evaluation data holds only %llu batches of %llu x %d tokens",
                            (unsigned long long)l->steps_per_epoch,
                            (unsigned long long)l->global_rows, l->cfg.seq);
        l->epoch++;
        l->step = 0;
        perm_init(&l->order, l->windows, l->seed, l->epoch);
    }
    uint64_t B = (uint64_t)l->cfg.batch, T = (uint64_t)l->cfg.seq;
    uint64_t row0 = l->step * l->global_rows + (uint64_t)l->cfg.rank * B;
    for (uint64_t b = 0; b < B; b++) {
        uint64_t w = l->cfg.shuffle ? perm_apply(&l->order, row0 + b) : row0 + b;
        copy_window(l, w, inputs + b * T, targets + b * T);
    }
    l->step++;
    return COH_OK;
}

uint64_t coh_loader_steps_per_epoch(const coh_loader *l)
{
    return l->steps_per_epoch;
}

uint64_t coh_loader_windows(const coh_loader *l)
{
    return l->windows;
}

uint64_t coh_loader_tokens(const coh_loader *l)
{
    return l->tokens;
}

size_t coh_loader_shards(const coh_loader *l)
{
    return l->nshards;
}

void coh_loader_position(const coh_loader *l, coh_loader_pos *pos)
{
    pos->epoch = l->epoch;
    pos->step = l->step;
    pos->seed = l->seed;
    pos->windows = l->windows;
    pos->global_rows = l->global_rows;
}

coh_status coh_loader_seek(coh_loader *l, const coh_loader_pos *pos)
{
    if (pos->windows != l->windows)
        return coh_errf(COH_ERR_MISMATCH,
                        "the data changed: the saved position is in a data set of %llu windows, "
                        "this one has %llu", (unsigned long long)pos->windows,
                        (unsigned long long)l->windows);
    /* another split of the rows (fewer ranks, more accumulation) continues at the same row of
     * the epoch's order, when that row begins one of this loader's batches */
    uint64_t rows = pos->step * pos->global_rows;
    if (!pos->global_rows || rows / pos->global_rows != pos->step || rows % l->global_rows)
        return coh_errf(COH_ERR_MISMATCH,
                        "the saved data position, %llu batches of %llu rows (batch x ranks) "
                        "into its epoch, is not a whole number of batches of %llu rows: resume "
                        "with the saved batch x ranks",
                        (unsigned long long)pos->step, (unsigned long long)pos->global_rows,
                        (unsigned long long)l->global_rows);
    if (rows / l->global_rows > l->steps_per_epoch)
        return coh_errf(COH_ERR_INVALID, "invalid data position: step '%llu' beyond the %llu "
                        "steps of an epoch", (unsigned long long)pos->step,
                        (unsigned long long)l->steps_per_epoch);
    l->epoch = pos->epoch;
    l->step = rows / l->global_rows;
    l->seed = pos->seed;
    perm_init(&l->order, l->windows, l->seed, l->epoch);
    return COH_OK;
}

void coh_loader_rewind(coh_loader *l)
{
    l->epoch = 0;
    l->step = 0;
    perm_init(&l->order, l->windows, l->seed, 0);
}
