/* shard_map.c: where a rank's slices lie in the whole model's arena (runs), what a save holds
 * (ckpt_save_bytes), the names of a sharded checkpoint's files and the check of one rank's. */
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

coh_status ckpt_runs_add_tensor(ckpt_runs *rs, const coh_gpt_config *c, int i, int tp_rank,
                                size_t lb, size_t le, long long shift, int skip_rep)
{
    coh_tensor_info lt, ft;
    coh_tensor_shard s;
    coh_gpt_tensor(c, i, &lt);
    if (c->tp <= 1)
        return push(rs, lt.offset, lt.offset, lt.numel, lb, le, shift);
    if (lt.offset >= le || lt.offset + lt.numel <= lb)
        return COH_OK;
    coh_gpt_config whole = *c;
    whole.tp = 1;
    coh_gpt_tensor(&whole, i, &ft);
    coh_status st = coh_gpt_tensor_shard(c, i, tp_rank, &s);
    if (st || (skip_rep && s.replicated))
        return st;
    return tensor_runs(rs, &lt, &ft, &s, lb, le, shift);
}

coh_status ckpt_runs_add(ckpt_runs *rs, const coh_gpt_config *c, int tp_rank, size_t lb,
                         size_t le, long long shift, int skip_rep)
{
    if (c->tp <= 1)
        return push(rs, lb, lb, le - lb, lb, le, shift);
    coh_status st = COH_OK;
    for (int i = 0; !st && i < coh_gpt_tensor_count(c); i++)
        st = ckpt_runs_add_tensor(rs, c, i, tp_rank, lb, le, shift, skip_rep);
    return st;
}

/* A tensor's segments in a shard of c: 3 for attention's q/k/v, else 1. */
static int segments(const coh_gpt_config *c, int i)
{
    coh_tensor_shard s;
    return c->tp > 1 && !coh_gpt_tensor_shard(c, i, 0, &s) && !s.replicated ? s.nseg : 1;
}

/* Pieces of whole segments: a tensor whole in a rank's range is a piece a segment. */
static uint64_t segment_pieces(const coh_gpt_config *c)
{
    uint64_t n = 0;
    for (int i = 0; i < coh_gpt_tensor_count(c); i++)
        n += (uint64_t)segments(c, i);
    return n;
}

/* The pieces a rank's range boundaries add: its ranges (a ZeRO chunk of each bucket: whole
 * layers, the embeddings, the final LayerNorm, a pipeline's wte) cut at most the tensors at
 * their two ends, each into at most a partial row, whole rows and a partial row per segment. */
static uint64_t cut_pieces(const coh_gpt_config *c)
{
    return 6 * (uint64_t)(c->tp > 1 ? 3 : 1) * ((uint64_t)c->layers + 3);
}

uint64_t ckpt_pieces_bound(const coh_gpt_config *c) { return segment_pieces(c) + cut_pieces(c); }

static int digits(uint64_t v)
{
    int d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* The longest piece name and box text of model c. */
static void name_bounds(const coh_gpt_config *c, uint64_t *name, uint64_t *box)
{
    coh_gpt_config w = *c;
    w.tp = 1;
    size_t hf = 0, big = 0;
    for (int i = 0; i < coh_gpt_tensor_count(&w); i++) {
        coh_tensor_info t;
        coh_gpt_tensor(&w, i, &t);
        size_t n = strlen(t.name);
        hf = n > hf ? n : hf;
        big = t.shape[0] > big ? t.shape[0] : big;
        big = t.shape[1] > big ? t.shape[1] : big;
    }
    *box = 4 + 4 * (uint64_t)digits(big);          /* "a:b,c:d" */
    *name = hf + strlen(".exp_avg_sq") + 2 + *box; /* "<hf><state>[<box>]" */
}

uint64_t ckpt_save_bytes(const coh_gpt_config *c, int dp, int pp)
{
    uint64_t runs = 64, name, box;
    for (int i = 0; c->tp > 1 && i < coh_gpt_tensor_count(c); i++) {
        coh_tensor_shard s;
        if (!coh_gpt_tensor_shard(c, i, 0, &s) && !s.replicated && s.seg * s.nseg != s.full_cols)
            runs = s.rows * (uint64_t)s.nseg > runs ? s.rows * (uint64_t)s.nseg : runs;
    }
    name_bounds(c, &name, &box);
    /* a tensor of the file: its piece (twice: the list grows by doubling), name and box (the
     * metadata's value), its safetensors entry, metadata entry and offset, the name checks'
     * map (name and metadata key) and its header text (tensor and metadata entries, 96 bytes of
     * fields), twice (the text grows by doubling) */
    uint64_t file = 2 * sizeof(ckpt_piece) + name + box + sizeof(coh_st_tensor) +
                    sizeof(coh_st_meta) + 8 + 2 * (name + 32) + 2 * (2 * name + box + 96);
    /* an entry of the index on the rank that commits: received (5 int64) and its text (file
     * name of 48 bytes, piece name, box and 16 bytes of punctuation) in the metadata and,
     * escaped, in the header, twice (doubling) */
    uint64_t idx = 40 + 3 * (48 + name + box + 16) + (48 + name + box + 16);
    uint64_t pieces = 3 * ckpt_pieces_bound(c); /* weights, exp_avg, exp_avg_sq */
    /* the index lists every piece of the checkpoint once: each segment of every tp shard's
     * tensors is written once whatever the mesh (dp replicas skip the weights, stages hold
     * their own tensors), and the dp ranks' ranges cut them: a bucket (at most a stage's layers
     * + 3) split dp ways has dp - 1 inner ends, each cutting one tensor into at most 3 more
     * pieces a segment (3 segments: the attention's q, k, v), in each stage and tp shard */
    uint64_t tp = (uint64_t)(c->tp > 1 ? c->tp : 1), P = (uint64_t)(pp > 1 ? pp : 1);
    uint64_t stage_layers = ((uint64_t)c->layers + P - 1) / P;
    uint64_t cuts = tp * P * (uint64_t)(dp > 1 ? dp - 1 : 0) * (stage_layers + 3) * 3 *
                    (c->tp > 1 ? 3 : 1);
    uint64_t all = 3 * (tp * segment_pieces(c) + cuts);
    return ST_STREAM_BUF + CKPT_ATOMIC_BUF + 2 * runs * sizeof(ckpt_run) + pieces * file +
           all * idx;
}

void ckpt_shard_name(char *b, size_t cap, const char *path, ckpt_tag t, int r, int n)
{
    snprintf(b, cap, "%s.shard%ld%s-%d-of-%d", path, t.step, t.gen ? ".1" : "", r, n);
}

int ckpt_is_sharded(const coh_st_file *f)
{
    const char *l = coh_st_meta_get(f, "layout");
    return l && !strcmp(l, "shards");
}

/* Piece t of file `name`: its name, dtype, shape and the metadata's box for it (meta: the
 * metadata's keys to their values' positions). */
static coh_status check_piece(const coh_st_file *f, const char *name, const ckpt_model *m,
                              const coh_st_tensor *t, const strmap *meta)
{
    ckpt_box b;
    char box[CKPT_NAME_MAX];
    coh_status st = ckpt_piece_parse(m, t->name, &b);
    if (st)
        return coh_err_prefix(st, "checkpoint file '%s'", name);
    int two = m->t[b.tensor].ndim == 2;
    if (t->ndim != (two ? 2 : 1) || t->shape[0] != (two ? b.r1 - b.r0 : b.c1 - b.c0) ||
        (two && t->shape[1] != b.c1 - b.c0) ||
        !(t->dtype == COH_ST_F32 || (b.what == CKPT_W && t->dtype == COH_ST_BF16)))
        return coh_errf(COH_ERR_INVALID, "checkpoint file '%s': piece '%s' is not an %s tensor "
                        "of its box's shape", name, t->name,
                        b.what == CKPT_W ? "F32 or BF16" : "F32");
    const int64_t *k = strmap_get(meta, t->name, strlen(t->name));
    const coh_st_meta *mv = k ? st_meta_at(f, (size_t)*k) : NULL;
    ckpt_box_text(m, &b, box, sizeof box);
    if (!mv || strcmp(mv->value, box))
        return coh_errf(COH_ERR_INVALID, "checkpoint file '%s': its metadata gives piece '%s' "
                        "the box '%s', expected '%s'", name, t->name, mv ? mv->value : "",
                        box);
    return COH_OK;
}

coh_status ckpt_shard_check(const coh_st_file *f, const char *name, const ckpt_model *m,
                            long step)
{
    const char *ms = coh_st_meta_get(f, "step");
    if (step >= 0 && (!ms || atol(ms) != step))
        return coh_errf(COH_ERR_MISMATCH, "checkpoint file '%s' is not of step %ld", name, step);
    strmap meta;
    strmap_init(&meta);
    coh_status st = COH_OK;
    for (size_t i = 0; !st && i < st_meta_count(f); i++) {
        const coh_st_meta *e = st_meta_at(f, i);
        if (strmap_put(&meta, e->key, strlen(e->key), (int64_t)i))
            st = coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", name);
    }
    for (size_t i = 0; !st && i < coh_st_count(f); i++)
        st = check_piece(f, name, m, coh_st_at(f, i), &meta);
    strmap_release(&meta);
    return st;
}
