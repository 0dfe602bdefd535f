/* par_ckpt.c: saving checkpoints of the parallel trainer. Single/DDP: rank 0 writes the
 * engine's state + weights pair (it holds the whole model anyway). Every other mesh (ZeRO, tp,
 * pp and their mixes) writes the sharded layout (shard.h): each rank streams the weights and
 * AdamW moments it holds into its own safetensors file as HF-named pieces (boxes of the whole
 * model's tensors: a tp shard's column blocks, a ZeRO chunk's partial and whole rows); then
 * world rank 0 writes the state file and, last, the commit file at the checkpoint's path: the
 * config and the index mapping every HF tensor (and its exp_avg, exp_avg_sq) to its pieces. No
 * rank gathers another's state: a save holds the rank's state plus ckpt_save_bytes. The
 * commit's rename is the commit (commit.c), so a crash mid-save leaves the previous checkpoint
 * whole. Resume: par_ckpt_load.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/json_writer.h"
#include "cohort/train_ckpt.h"
#include "train/ckpt/ckpt_int.h"
#include "train/ckpt/commit.h"
#include "train/ckpt/dev_io.h"
#include "train/ckpt/gpt_ckpt_int.h"
#include "train/ckpt/shard.h"
#include "train/parallel/par_trainer_int.h"

/* What one rank writes: its weights' pieces (src: arena offset) and its moments' pieces (src:
 * offset in the optimizer's back-to-back ranges; exp_avg and exp_avg_sq share the boxes), the
 * buffers they come from, and the file's tensors and metadata (names and boxes in `text`). */
typedef struct shard_out {
    ckpt_model m;
    ckpt_pieces w, mo;
    ckpt_runs tmp; /* one tensor's runs at a time */
    const float *params, *om, *ov;
    int bf16;
    coh_st_tensor *ten;
    coh_st_meta *meta;
    char *text;
    size_t nten;
} shard_out;

static void shard_out_free(shard_out *o)
{
    ckpt_model_free(&o->m);
    ckpt_pieces_free(&o->w);
    ckpt_pieces_free(&o->mo);
    ckpt_runs_free(&o->tmp);
    free(o->ten);
    free(o->meta);
    free(o->text);
}

/* The pieces of local range [lb, le) (as ckpt_runs_add), one tensor's runs at a time. */
static coh_status add_range(shard_out *o, const coh_gpt_config *c, int tr, size_t lb,
                            size_t le, long long shift, ckpt_what w)
{
    coh_status st = COH_OK;
    for (int i = 0; !st && i < coh_gpt_tensor_count(c); i++) {
        o->tmp.n = 0;
        st = ckpt_runs_add_tensor(&o->tmp, c, i, tr, lb, le, shift, tr != 0);
        if (!st && o->tmp.n)
            st = ckpt_pieces_add(w == CKPT_W ? &o->w : &o->mo, &o->m, &o->tmp, w);
    }
    return st;
}

/* The weights this rank writes: ZeRO-3 its own slices; otherwise the first replica all it
 * holds (a pipeline stage's ranges, less a last stage's copy of the tied wte); a tp shard
 * other than the first leaves the replicated tensors to the first. */
static coh_status weight_pieces(const coh_par_trainer *t, shard_out *o)
{
    const coh_gpt_config *c = coh_gpt_get_config(t->model);
    int tr = t->mesh->tp_rank;
    coh_status st = COH_OK;
    if (t->zero_stage == 3) {
        for (int k = 0; !st && k < t->nown; k++)
            st = add_range(o, c, tr, t->own_rb[k], t->own_re[k], 0, CKPT_W);
    } else if (t->rdp == 0 && t->pipe) {
        const coh_pipe_stage *lay = par_pipe_layout(t->pipe);
        for (int k = lay->tied_copy ? 1 : 0; !st && k < lay->nranges; k++)
            st = add_range(o, c, tr, lay->begin[k], lay->end[k], 0, CKPT_W);
    } else if (t->rdp == 0) {
        st = add_range(o, c, tr, 0, t->n, 0, CKPT_W);
    }
    return st;
}

/* The moments this rank writes: its optimizer's ranges (less a last stage's tied copy, whose
 * moments the first stage writes) when they are sliced over the replicas, else the first
 * replica's. */
static coh_status moment_pieces(const coh_par_trainer *t, shard_out *o)
{
    const coh_gpt_config *c = coh_gpt_get_config(t->model);
    int sliced = t->zero_stage >= 1 || (t->pipe && t->cfg.par.strategy == COH_STRATEGY_ZERO1);
    int first = t->pipe && par_pipe_layout(t->pipe)->tied_copy ? 1 : 0;
    size_t off = 0;
    coh_status st = COH_OK;
    for (int k = 0; !st && k < t->nown; k++) {
        if (k >= first && (sliced || t->rdp == 0))
            st = add_range(o, c, t->mesh->tp_rank, t->own_rb[k], t->own_re[k],
                           (long long)off - (long long)t->own_rb[k], CKPT_M);
        off += t->own_re[k] - t->own_rb[k];
    }
    return st;
}

/* File tensor i's piece: the weights', then the moments' as exp_avg, then as exp_avg_sq. */
static const ckpt_piece *piece_at(const shard_out *o, size_t i, ckpt_what *w)
{
    if (i < o->w.n) {
        *w = CKPT_W;
        return &o->w.p[i];
    }
    i -= o->w.n;
    *w = i < o->mo.n ? CKPT_M : CKPT_V;
    return &o->mo.p[i % o->mo.n];
}

/* Elements [e0, e0 + n) of piece p (row-major in its box) from `from` (device memory: the
 * rank's arena or moments) into host buf, in bf16 when asked (the save's own rounding). */
static void copy_piece(const ckpt_piece *p, const float *from, size_t e0, size_t n, void *buf,
                       int bf16)
{
    size_t width = (size_t)(p->b.c1 - p->b.c0);
    if (p->stride == width || p->b.r1 - p->b.r0 == 1)
        width = SIZE_MAX; /* the rows lie back to back: one copy */
    for (size_t done = 0; done < n;) {
        size_t row = (e0 + done) / width, col = (e0 + done) % width, k = width - col;
        k = k < n - done ? k : n - done;
        const float *src = from + p->src + row * p->stride + col;
        ckpt_from_device(bf16 ? (void *)((uint16_t *)buf + done) : (void *)((float *)buf + done),
                         src, k, bf16);
        done += k;
    }
}

static coh_status fill(void *ctx, size_t i, uint64_t at, void *buf, size_t n)
{
    const shard_out *o = ctx;
    ckpt_what w;
    const ckpt_piece *p = piece_at(o, i, &w);
    int bf16 = w == CKPT_W && o->bf16;
    const float *from = w == CKPT_W ? o->params : w == CKPT_M ? o->om : o->ov;
    copy_piece(p, from, at / (bf16 ? 2 : 4), n / (bf16 ? 2 : 4), buf, bf16);
    return COH_OK;
}

/* The file's tensors (named pieces) and metadata (format, step, each piece's box). */
static coh_status list_file(shard_out *o, const char *sstep)
{
    o->nten = o->w.n + 2 * o->mo.n;
    size_t len = 0;
    char name[CKPT_NAME_MAX], box[CKPT_NAME_MAX];
    for (int pass = 0; pass < 2; pass++) {
        char *at = o->text;
        for (size_t i = 0; i < o->nten; i++) {
            ckpt_what w;
            ckpt_box b = piece_at(o, i, &w)->b;
            b.what = w;
            ckpt_piece_name(&o->m, &b, name, sizeof name);
            ckpt_box_text(&o->m, &b, box, sizeof box);
            if (!pass) {
                len += strlen(name) + strlen(box) + 2;
                continue;
            }
            int two = o->m.t[b.tensor].ndim == 2;
            o->ten[i] = (coh_st_tensor){strcpy(at, name),
                                        w == CKPT_W && o->bf16 ? COH_ST_BF16 : COH_ST_F32,
                                        two ? 2 : 1,
                                        {two ? b.r1 - b.r0 : b.c1 - b.c0, b.c1 - b.c0}, NULL, 0};
            o->meta[i + 2] = (coh_st_meta){at, strcpy(at + strlen(name) + 1, box)};
            at += strlen(name) + strlen(box) + 2;
        }
        if (pass)
            break;
        o->ten = malloc((o->nten ? o->nten : 1) * sizeof *o->ten);
        o->meta = malloc((o->nten + 2) * sizeof *o->meta);
        o->text = malloc(len ? len : 1);
        if (!o->ten || !o->meta || !o->text)
            return coh_errf(COH_ERR_NOMEM, "out of memory listing a checkpoint's pieces");
    }
    o->meta[0] = (coh_st_meta){"format", "pt"};
    o->meta[1] = (coh_st_meta){"step", sstep};
    return COH_OK;
}

/* This rank's file: its weights' pieces, then its moments' (exp_avg, exp_avg_sq). */
static coh_status write_file(shard_out *o, const char *name, long step)
{
    char sstep[24];
    snprintf(sstep, sizeof sstep, "%ld", step);
    coh_status st = list_file(o, sstep);
    return st ? st : st_save_stream(name, o->ten, o->nten, o->meta, o->nten + 2, fill, o);
}

/* Build this rank's lists and write its file when it holds something (o kept for the index). */
static coh_status write_shard(coh_par_trainer *t, const char *path, ckpt_tag tag, shard_out *o)
{
    *o = (shard_out){.params = coh_gpt_params(t->model, NULL), .bf16 = t->cfg.train.save_bf16};
    coh_adamw *opt = coh_trainer_optimizer(t->base);
    o->om = coh_adamw_m(opt, NULL);
    o->ov = coh_adamw_v(opt, NULL);
    coh_status st = ckpt_model_init(&o->m, coh_gpt_get_config(t->model));
    if (!st)
        st = weight_pieces(t, o);
    if (!st)
        st = moment_pieces(t, o);
    ckpt_runs_free(&o->tmp);
    if (!st && (o->w.n || o->mo.n)) {
        char name[4200];
        ckpt_shard_name(name, sizeof name, path, tag, coh_comm_rank(t->mesh->world),
                        coh_comm_size(t->mesh->world));
        st = write_file(o, name, tag.step);
    }
    return st;
}

/* A piece as the index receives it: (file, tensor, what, r0, r1, c0, c1). */
#define ROW 7

/* This rank's pieces as index rows of file j. */
static coh_status my_rows(const shard_out *o, int j, int64_t **rows)
{
    size_t n = o->w.n + o->mo.n;
    *rows = malloc((n ? n : 1) * ROW * sizeof **rows);
    if (!*rows)
        return coh_errf(COH_ERR_NOMEM, "out of memory writing a checkpoint's index");
    for (size_t i = 0; i < n; i++) {
        const ckpt_box *b = i < o->w.n ? &o->w.p[i].b : &o->mo.p[i - o->w.n].b;
        int64_t r[ROW] = {j, b->tensor, b->what, b->r0, b->r1, b->c0, b->c1};
        memcpy(*rows + ROW * i, r, sizeof r);
    }
    return COH_OK;
}

/* The index's rows: every rank's to world rank 0, rank by rank (counts: (failed, pieces) per
 * rank): no rank holds more than its own list, rank 0 the index. */
static coh_status gather_index(coh_comm *w, const shard_out *o, const int64_t *counts,
                               int64_t **rows, int64_t *n)
{
    int me = coh_comm_rank(w), size = coh_comm_size(w);
    int64_t *mine = NULL, total = 0;
    coh_status st = my_rows(o, me, &mine);
    for (int j = 0; j < size; j++)
        total += counts[2 * j + 1];
    if (!st && me == 0 && !(*rows = malloc((size_t)(total ? total : 1) * ROW * sizeof **rows)))
        st = coh_errf(COH_ERR_NOMEM, "out of memory writing a checkpoint's index");
    for (int j = 0; !st && j < size; j++) {
        size_t k = (size_t)counts[2 * j + 1] * ROW;
        if (!k || (me != 0 && me != j))
            continue;
        if (me == j && j != 0)
            st = coh_send(w, mine, k, COH_I64, 0);
        else if (j == 0)
            memcpy(*rows + *n * ROW, mine, k * sizeof *mine);
        else
            st = coh_recv(w, *rows + *n * ROW, k, COH_I64, j);
        *n += counts[2 * j + 1];
    }
    free(mine);
    return st;
}

static coh_status write_state(const coh_par_trainer *t, const char *path, ckpt_tag tag,
                              const coh_loader_pos *data, int threads)
{
    char sp[4200];
    coh_status st = ckpt_state_name(sp, sizeof sp, path, tag);
    if (st)
        return st;
    coh_train_state s;
    memset(&s, 0, sizeof s);
    s.step = (uint64_t)tag.step;
    if (data)
        s.data = *data;
    gpt_state_meta_text mt;
    size_t nmeta = gpt_state_meta(coh_trainer_get_config(t->base), threads, &mt);
    return coh_state_save(sp, &s, NULL, 0, mt.meta, nmeta);
}

static int cmp_row(const void *x, const void *y)
{
    static const int key[5] = {2, 1, 0, 3, 5}; /* what, tensor, file, r0, c0 */
    const int64_t *a = x, *b = y;
    for (int k = 0; k < 5; k++)
        if (a[key[k]] != b[key[k]])
            return a[key[k]] < b[key[k]] ? -1 : 1;
    return 0;
}

/* Every tensor's weights and moments are whole: the pieces' areas add up to its size (no
 * writer overlaps), or the save is refused rather than committed. */
static coh_status check_cover(const ckpt_model *m, const int64_t *rows, int64_t n,
                              const char *path)
{
    int64_t *area = calloc(2 * (size_t)m->n, sizeof *area);
    if (!area)
        return coh_errf(COH_ERR_NOMEM, "out of memory writing a checkpoint's index");
    for (int64_t i = 0; i < n; i++) {
        const int64_t *r = rows + ROW * i;
        area[r[2] * m->n + r[1]] += (r[4] - r[3]) * (r[6] - r[5]);
    }
    coh_status st = COH_OK;
    for (int k = 0; !st && k < 2 * m->n; k++)
        if ((size_t)area[k] != m->t[k % m->n].numel)
            st = coh_errf(COH_ERR_INTERNAL, "checkpoint '%s': the ranks wrote %lld of the %zu "
                          "%s of '%s'", path, (long long)area[k], m->t[k % m->n].numel,
                          k < m->n ? "weights" : "moments", m->t[k % m->n].name);
    free(area);
    return st;
}

/* The index's entries of one tensor's state w from rows [*i, ...) (sorted; the moments' rows
 * serve exp_avg and exp_avg_sq): "<key>": [[file, piece, box], ...]. */
static void index_list(coh_jw *jw, const ckpt_model *m, const int64_t *rows, int64_t n,
                       int64_t *i, ckpt_what w, ckpt_tag tag, int nfiles)
{
    char key[CKPT_NAME_MAX], piece[CKPT_NAME_MAX], box[CKPT_NAME_MAX], file[96];
    int tensor = (int)rows[ROW * *i + 1];
    int64_t from = rows[ROW * *i + 2];
    ckpt_state_key(m, tensor, w, key, sizeof key);
    coh_jw_key(jw, key);
    coh_jw_array_begin(jw);
    for (; *i < n && rows[ROW * *i + 2] == from && rows[ROW * *i + 1] == tensor; (*i)++) {
        const int64_t *r = rows + ROW * *i;
        ckpt_box b = {tensor, w, r[3], r[4], r[5], r[6]};
        ckpt_piece_name(m, &b, piece, sizeof piece);
        ckpt_box_text(m, &b, box, sizeof box);
        ckpt_shard_name(file, sizeof file, "", tag, (int)r[0], nfiles);
        coh_jw_array_begin(jw);
        coh_jw_string(jw, file);
        coh_jw_string(jw, piece);
        coh_jw_string(jw, box);
        coh_jw_array_end(jw);
    }
    coh_jw_array_end(jw);
}

/* The index as JSON text: weights, exp_avg, exp_avg_sq; each in the model's tensor order. */
static coh_status index_text(const ckpt_model *m, const int64_t *rows, int64_t n, ckpt_tag tag,
                             int nfiles, char **out)
{
    size_t len = 0;
    FILE *f = open_memstream(out, &len);
    if (!f)
        return coh_errf(COH_ERR_NOMEM, "out of memory writing a checkpoint's index");
    coh_jw jw;
    coh_jw_init(&jw, f, 0);
    coh_jw_object_begin(&jw);
    int64_t moments = 0;
    while (moments < n && rows[ROW * moments + 2] == CKPT_W)
        moments++;
    for (int w = CKPT_W; w <= CKPT_V; w++)
        for (int64_t i = w == CKPT_W ? 0 : moments; i < (w == CKPT_W ? moments : n);)
            index_list(&jw, m, rows, n, &i, (ckpt_what)w, tag, nfiles);
    coh_jw_object_end(&jw);
    if (fclose(f) || !*out)
        return coh_errf(COH_ERR_NOMEM, "out of memory writing a checkpoint's index");
    return COH_OK;
}

/* The commit file: the whole model's config and metadata (as a weights file's, naming the
 * state), the layout, the file count and the index; no tensors. */
static coh_status write_commit(const coh_par_trainer *t, const char *path, const char *tokenizer,
                               ckpt_tag tag, int n, int64_t *rows, int64_t nrows)
{
    coh_gpt_config whole = t->cfg.train.model;
    whole.tp = 1;
    whole.sp = 0;
    ckpt_model m;
    char *index = NULL;
    coh_status st = ckpt_model_init(&m, &whole);
    qsort(rows, (size_t)nrows, ROW * sizeof *rows, cmp_row);
    if (!st)
        st = check_cover(&m, rows, nrows, path);
    if (!st)
        st = index_text(&m, rows, nrows, tag, n, &index);
    if (!st) {
        gpt_meta_text mt;
        size_t nmeta = gpt_weights_meta(&whole, tokenizer, tag.step, &tag, &mt);
        char sn[24];
        snprintf(sn, sizeof sn, "%d", n);
        coh_st_meta meta[12];
        memcpy(meta, mt.meta, nmeta * sizeof *meta);
        meta[nmeta++] = (coh_st_meta){"layout", "shards"};
        meta[nmeta++] = (coh_st_meta){"shards", sn};
        meta[nmeta++] = (coh_st_meta){"index", index};
        st = coh_st_save(path, NULL, 0, meta, nmeta);
    }
    free(index);
    ckpt_model_free(&m);
    return st;
}

/* Every rank its file; all agree that each did and send rank 0 their pieces; world rank 0
 * writes the state and the commit; after the barrier that follows, it removes the other
 * steps' files. */
static coh_status save_sharded(coh_par_trainer *t, const char *path, const char *tokenizer,
                               const coh_loader_pos *data, int threads)
{
    coh_comm *w = t->mesh->world;
    int n = coh_comm_size(w), me = coh_comm_rank(w);
    /* Every rank reads the commit's header for the names of this save: the checkpoint lives
     * where every rank reads it (a resume on any mesh reads every rank's pieces), and the last
     * commit was renamed into place before the barrier that ended the last save. No collective
     * before a rank writes: each rank's shard goes out as soon as it is ready. */
    ckpt_tag tag = ckpt_tag_for(path, coh_trainer_get_step(t->base));
    shard_out o;
    coh_status st = write_shard(t, path, tag, &o);
    int64_t mine[2] = {st != COH_OK, (int64_t)(o.w.n + o.mo.n)};
    int64_t *all = malloc(2 * (size_t)n * sizeof *all), *rows = NULL, nrows = 0;
    coh_status s2 = all ? coh_allgather(w, mine, all, 2, COH_I64)
                        : coh_errf(COH_ERR_NOMEM, "out of memory saving '%s'", path);
    st = st ? st : s2;
    for (int j = 0; !st && j < n; j++)
        if (all[2 * j])
            st = coh_errf(COH_ERR_IO, "checkpoint '%s': rank %d could not write its shard", path,
                          j);
    if (!st)
        st = gather_index(w, &o, all, &rows, &nrows);
    shard_out_free(&o);
    if (!st && me == 0 && !(st = write_state(t, path, tag, data, threads)) &&
        (st = write_commit(t, path, tokenizer, tag, n, rows, nrows))) {
        char sp[4200];
        if (!ckpt_state_name(sp, sizeof sp, path, tag))
            st = ckpt_drop_uncommitted(st, path, sp);
    }
    free(all);
    free(rows);
    s2 = coh_barrier(w);
    st = st ? st : s2;
    if (!st && me == 0) {
        ckpt_fault_point("committed, cleanup next", path);
        ckpt_remove_others(path, tag);
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
