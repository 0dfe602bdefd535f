/* shard_src.c: any range of a checkpoint's whole-model weights or moments, read from the pieces
 * of the sharded layout (boxes of HF tensors; opening only the files the index names for the
 * range) or from a plain weights/state pair: every reader of either layout goes through it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/ckpt/gpt_ckpt_int.h"
#include "train/ckpt/shard.h"
#include "util/json.h"

/* A piece the index names: its box, its file and, once looked up, its tensor there. */
typedef struct src_box {
    ckpt_box b;
    int file;
    const coh_st_tensor *t;
} src_box;

struct ckpt_src {
    const coh_st_file *f, *sf;
    const char *path;
    ckpt_model m;
    size_t nparams;
    int sharded, f32_only;
    long step;
    ckpt_tag tag; /* the names of the save's files (its step, and gen) */
    int nfiles;
    src_box *box;    /* sorted by what, tensor, first row, first column */
    size_t nbox, *first; /* the boxes of (what, tensor) g: [first[g], first[g + 1]) */
    coh_st_file **files; /* opened and checked on first use */
    int ntens;           /* the pair: its weights' tensors at their arena offsets */
    const coh_st_tensor **tens;
};

static int cmp_box(const void *x, const void *y)
{
    const ckpt_box *a = x, *b = y;
    if (a->what != b->what)
        return a->what < b->what ? -1 : 1;
    if (a->tensor != b->tensor)
        return a->tensor < b->tensor ? -1 : 1;
    if (a->r0 != b->r0)
        return a->r0 < b->r0 ? -1 : 1;
    return a->c0 < b->c0 ? -1 : a->c0 > b->c0;
}

/* The file an index entry names: ".shard<tag>-<r>-of-<n>" of this checkpoint, nothing else. */
static coh_status entry_file(const ckpt_src *s, const char *key, const char *name, int *j)
{
    char pre[48], canon[96];
    snprintf(pre, sizeof pre, ".shard%ld%s-", s->tag.step, s->tag.gen ? ".1" : "");
    long r = -1;
    if (!strncmp(name, pre, strlen(pre))) {
        char *end;
        r = strtol(name + strlen(pre), &end, 10);
        snprintf(canon, sizeof canon, "%s%ld-of-%d", pre, r, s->nfiles);
    }
    if (r < 0 || r >= s->nfiles || strcmp(canon, name))
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': index entry of '%s' names file '%s' "
                        "(expected '%sR-of-%d', R below %d)", s->path, key, name, pre, s->nfiles,
                        s->nfiles);
    *j = (int)r;
    return COH_OK;
}

/* One entry [file, piece, box] of the index's list of `key` (b: its tensor and state). */
static coh_status read_entry(ckpt_src *s, const char *key, const json_value *e, ckpt_box b,
                             src_box *out)
{
    const json_value *v[3];
    for (int k = 0; k < 3; k++)
        v[k] = e->type == JSON_ARRAY && e->u.arr.count == 3 ? e->u.arr.items[k] : NULL;
    if (!v[0] || v[0]->type != JSON_STRING || v[1]->type != JSON_STRING ||
        v[2]->type != JSON_STRING)
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': an index entry of '%s' is not "
                        "[file, piece, box] (three strings)", s->path, key);
    char canon[CKPT_NAME_MAX];
    coh_status st = entry_file(s, key, v[0]->u.str.chars, &out->file);
    if (!st && (st = ckpt_box_parse(&s->m, v[2]->u.str.chars, &b)))
        coh_err_prefix(st, "checkpoint '%s': index of '%s'", s->path, key);
    if (!st)
        ckpt_piece_name(&s->m, &b, canon, sizeof canon);
    if (!st && strcmp(canon, v[1]->u.str.chars))
        st = coh_errf(COH_ERR_INVALID, "checkpoint '%s': index entry of '%s' names piece '%s' "
                      "for box '%s' (its name is '%s')", s->path, key, v[1]->u.str.chars,
                      v[2]->u.str.chars, canon);
    out->b = b;
    out->t = NULL;
    return st;
}

/* Every list of the index: its entries appended to s->box. */
static coh_status read_lists(ckpt_src *s, const json_value *root)
{
    size_t n = 0;
    for (size_t i = 0; i < root->u.obj.count; i++)
        n += root->u.obj.values[i]->type == JSON_ARRAY ? root->u.obj.values[i]->u.arr.count : 0;
    s->box = malloc((n ? n : 1) * sizeof *s->box);
    if (!s->box)
        return coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", s->path);
    coh_status st = COH_OK;
    for (size_t i = 0; !st && i < root->u.obj.count; i++) {
        const char *key = root->u.obj.keys[i];
        const json_value *l = root->u.obj.values[i];
        ckpt_box b;
        if (!(st = ckpt_key_parse(&s->m, key, &b)) && l->type != JSON_ARRAY)
            st = coh_errf(COH_ERR_INVALID, "'%s' maps to no list", key);
        if (st)
            return coh_err_prefix(st, "checkpoint '%s': index", s->path);
        for (size_t k = 0; !st && k < l->u.arr.count; k++)
            st = read_entry(s, key, l->u.arr.items[k], b, &s->box[s->nbox++]);
    }
    return st;
}

/* The boxes of each tensor's state, sorted; two that overlap are refused. */
static coh_status group_boxes(ckpt_src *s)
{
    size_t ng = 3 * (size_t)s->m.n;
    s->first = calloc(ng + 1, sizeof *s->first);
    if (!s->first)
        return coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", s->path);
    qsort(s->box, s->nbox, sizeof *s->box, cmp_box);
    for (size_t i = 0; i < s->nbox; i++)
        s->first[(size_t)s->box[i].b.what * (size_t)s->m.n + (size_t)s->box[i].b.tensor + 1]++;
    for (size_t g = 0; g < ng; g++)
        s->first[g + 1] += s->first[g];
    for (size_t i = 0; i < s->nbox; i++) {
        const ckpt_box *a = &s->box[i].b;
        for (size_t j = i + 1; j < s->nbox; j++) {
            const ckpt_box *b = &s->box[j].b;
            if (b->what != a->what || b->tensor != a->tensor || b->r0 >= a->r1)
                break;
            if (b->c0 < a->c1 && a->c0 < b->c1) {
                char x[CKPT_NAME_MAX], y[CKPT_NAME_MAX];
                ckpt_piece_name(&s->m, a, x, sizeof x);
                ckpt_piece_name(&s->m, b, y, sizeof y);
                return coh_errf(COH_ERR_INVALID, "checkpoint '%s': its index has overlapping "
                                "pieces '%s' and '%s'", s->path, x, y);
            }
        }
    }
    return COH_OK;
}

static coh_status read_index(ckpt_src *s)
{
    const char *text = coh_st_meta_get(s->f, "index");
    if (!text && coh_st_find(s->f, "weight_index"))
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s' is in the sharded layout of arena "
                        "ranges (before HF-named pieces): this version cannot read it; export "
                        "it to one file with the cohort that wrote it ('cohort export'), then "
                        "start from that with --init-from", s->path);
    json_doc *doc = NULL;
    coh_status st = text ? json_parse(text, strlen(text), &doc)
                         : coh_errf(COH_ERR_INVALID, "checkpoint '%s': no 'index' in its "
                                    "metadata", s->path);
    if (st && text)
        coh_err_prefix(st, "checkpoint '%s': its index", s->path);
    if (!st && json_root(doc)->type != JSON_OBJECT)
        st = coh_errf(COH_ERR_INVALID, "checkpoint '%s': its index is not a JSON object",
                      s->path);
    if (!st)
        st = read_lists(s, json_root(doc));
    json_free(doc);
    return st ? st : group_boxes(s);
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
    coh_status st = ckpt_tag_of(s->f, s->path, &s->tag);
    if (st)
        return st;
    s->files = calloc((size_t)v, sizeof *s->files);
    if (!s->files)
        return coh_errf(COH_ERR_NOMEM, "out of memory opening '%s'", s->path);
    return read_index(s);
}

/* The pair's weights: every tensor of the model, F32 or BF16, at its arena offset. */
static coh_status open_pair(ckpt_src *s)
{
    s->ntens = s->m.n;
    s->tens = calloc((size_t)s->ntens, sizeof *s->tens);
    if (!s->tens)
        return coh_errf(COH_ERR_NOMEM, "out of memory opening '%s'", s->path);
    for (int i = 0; i < s->ntens; i++) {
        const coh_tensor_info *ti = &s->m.t[i];
        const coh_st_tensor *t = coh_st_find(s->f, ti->name);
        int64_t numel = 1;
        for (int d = 0; t && d < t->ndim; d++)
            numel *= t->shape[d];
        if (!t || (size_t)numel != ti->numel ||
            (t->dtype != COH_ST_F32 && t->dtype != COH_ST_BF16))
            return coh_errf(COH_ERR_INVALID, "checkpoint '%s': no F32 or BF16 tensor '%s' of "
                            "%zu elements", s->path, ti->name, ti->numel);
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
    coh_gpt_config c;
    coh_status st = gpt_config_from_file(f, path, 0, &c, NULL, 0);
    if (!st)
        st = ckpt_model_init(&s->m, &c);
    if (!st) {
        s->nparams = coh_gpt_param_count(&s->m.c);
        st = s->sharded ? open_sharded(s) : open_pair(s);
    }
    if (st) {
        ckpt_src_close(s);
        return st;
    }
    *out = s;
    return COH_OK;
}

const coh_gpt_config *ckpt_src_config(const ckpt_src *s) { return &s->m.c; }

void ckpt_src_close(ckpt_src *s)
{
    if (!s)
        return;
    for (int j = 0; s->files && j < s->nfiles; j++)
        coh_st_close(s->files[j]);
    free(s->files);
    free(s->box);
    free(s->first);
    free(s->tens);
    ckpt_model_free(&s->m);
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

/* Box i's tensor in its file, the file opened and checked on first use. */
static coh_status piece_of(ckpt_src *s, src_box *bx)
{
    char name[4200], piece[CKPT_NAME_MAX];
    int j = bx->file;
    ckpt_shard_name(name, sizeof name, s->path, s->tag, j, s->nfiles);
    if (!s->files[j]) {
        coh_status st = coh_st_open(name, &s->files[j]);
        if (!st && (st = ckpt_shard_check(s->files[j], name, &s->m, s->step))) {
            coh_st_close(s->files[j]);
            s->files[j] = NULL;
        }
        if (st)
            return st;
    }
    ckpt_piece_name(&s->m, &bx->b, piece, sizeof piece);
    bx->t = coh_st_find(s->files[j], piece);
    if (!bx->t)
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': its index names piece '%s' in '%s', "
                        "which has no such tensor", s->path, piece, name);
    return COH_OK;
}

/* Elements [x, y) of tensor i's state w (row-major, C columns) from its box bx into dst (dst[0]
 * is element x); *got counts them. */
static coh_status from_box(ckpt_src *s, src_box *bx, int64_t C, int64_t x, int64_t y,
                           float *dst, size_t *got)
{
    const ckpt_box *b = &bx->b;
    if (b->c0 == 0 && b->c1 == C) { /* whole rows: the piece is the tensor's elements in order */
        int64_t e0 = x > b->r0 * C ? x : b->r0 * C, e1 = y < b->r1 * C ? y : b->r1 * C;
        coh_status st = e0 < e1 && !bx->t ? piece_of(s, bx) : COH_OK;
        if (!st && e0 < e1) {
            st = copy_out(s, bx->t, (size_t)(e0 - b->r0 * C), (size_t)(e1 - e0), dst + (e0 - x));
            *got += (size_t)(e1 - e0);
        }
        return st;
    }
    int64_t rlo = x / C > b->r0 ? x / C : b->r0, rhi = (y - 1) / C < b->r1 - 1 ? (y - 1) / C
                                                                             : b->r1 - 1;
    coh_status st = COH_OK;
    for (int64_t r = rlo; !st && r <= rhi; r++) {
        int64_t e0 = r * C + b->c0 > x ? r * C + b->c0 : x;
        int64_t e1 = r * C + b->c1 < y ? r * C + b->c1 : y;
        if (e0 >= e1)
            continue;
        if (!bx->t && (st = piece_of(s, bx)))
            break;
        int64_t at = (r - b->r0) * (b->c1 - b->c0) + (e0 - r * C - b->c0);
        st = copy_out(s, bx->t, (size_t)at, (size_t)(e1 - e0), dst + (e0 - x));
        *got += (size_t)(e1 - e0);
    }
    return st;
}

/* The first gap in columns [a, e) of row r among the boxes of group g: [*g0, *g1); 0 when
 * there is none. */
static int row_gap(const ckpt_src *s, size_t g, int64_t r, int64_t a, int64_t e, int64_t *g0,
                   int64_t *g1)
{
    int64_t cur = a;
    for (int moved = 1; moved && cur < e;) {
        moved = 0;
        for (size_t k = s->first[g]; k < s->first[g + 1]; k++) {
            const ckpt_box *b = &s->box[k].b;
            if (b->r0 <= r && r < b->r1 && b->c0 <= cur && cur < b->c1) {
                cur = b->c1;
                moved = 1;
            }
        }
    }
    *g0 = cur;
    *g1 = e;
    for (size_t k = s->first[g]; k < s->first[g + 1]; k++) {
        const ckpt_box *b = &s->box[k].b;
        if (b->r0 <= r && r < b->r1 && b->c0 > cur && b->c0 < *g1)
            *g1 = b->c0;
    }
    return cur < e;
}

/* The first box of elements [x, y) of tensor i's state w that no piece holds, named. */
static coh_status missing(const ckpt_src *s, ckpt_what w, int i, int64_t x, int64_t y)
{
    int64_t R, C, g0 = 0, g1 = 0, r;
    ckpt_model_dims(&s->m, i, &R, &C);
    size_t g = (size_t)w * (size_t)s->m.n + (size_t)i;
    for (r = x / C; r <= (y - 1) / C; r++)
        if (row_gap(s, g, r, r == x / C ? x % C : 0, r == (y - 1) / C ? (y - 1) % C + 1 : C,
                    &g0, &g1))
            break;
    ckpt_box want = {i, w, r, r + 1, g0, g1};
    char key[CKPT_NAME_MAX], box[CKPT_NAME_MAX];
    ckpt_state_key(&s->m, i, w, key, sizeof key);
    ckpt_box_text(&s->m, &want, box, sizeof box);
    return coh_errf(COH_ERR_INVALID, "checkpoint '%s' lacks part of '%s' [%s]: no piece of its "
                    "index holds it", s->path, key, box);
}

static coh_status read_sharded(ckpt_src *s, ckpt_what w, size_t b, size_t len, float *dst)
{
    size_t y0 = b + len;
    int lo = 0, hi = s->m.n;
    while (hi - lo > 1) { /* the tensor holding element b */
        int mid = (lo + hi) / 2;
        if (s->m.t[mid].offset <= b)
            lo = mid;
        else
            hi = mid;
    }
    coh_status st = COH_OK;
    for (int i = lo; !st && i < s->m.n && s->m.t[i].offset < y0; i++) {
        size_t tb = s->m.t[i].offset, te = tb + s->m.t[i].numel;
        size_t x = b > tb ? b : tb, y = y0 < te ? y0 : te, got = 0;
        int64_t R, C;
        if (x >= y)
            continue;
        ckpt_model_dims(&s->m, i, &R, &C);
        size_t g = (size_t)w * (size_t)s->m.n + (size_t)i;
        for (size_t k = s->first[g]; !st && k < s->first[g + 1]; k++)
            st = from_box(s, &s->box[k], C, (int64_t)(x - tb), (int64_t)(y - tb),
                          dst + (x - b), &got);
        if (!st && got != y - x)
            st = missing(s, w, i, (int64_t)(x - tb), (int64_t)(y - tb));
    }
    return st;
}

static coh_status read_pair(ckpt_src *s, ckpt_what w, size_t b, size_t len, float *dst)
{
    if (w != CKPT_W) {
        const coh_st_tensor *t = s->sf ? coh_st_find(s->sf, w == CKPT_M ? "adamw.m" : "adamw.v")
                                       : NULL;
        if (!t || t->dtype != COH_ST_F32 || t->ndim != 1 || (size_t)t->shape[0] != s->nparams)
            return coh_errf(COH_ERR_INVALID, "checkpoint '%s': its state holds no F32 '%s' of "
                            "the model's %zu parameters", s->path,
                            w == CKPT_M ? "adamw.m" : "adamw.v", s->nparams);
        return copy_out(s, t, b, len, dst);
    }
    coh_status st = COH_OK;
    for (int i = 0; !st && i < s->ntens; i++) {
        size_t tb = s->m.t[i].offset, te = tb + s->m.t[i].numel;
        size_t x = b > tb ? b : tb, y = b + len < te ? b + len : te;
        if (x < y)
            st = copy_out(s, s->tens[i], x - tb, y - x, dst + (x - b));
    }
    return st;
}

coh_status ckpt_src_read(ckpt_src *s, ckpt_what w, size_t whole, size_t len, float *dst)
{
    if (whole > s->nparams || len > s->nparams - whole)
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': elements [%zu, %zu) are outside the "
                        "model's %zu parameters", s->path, whole, whole + len, s->nparams);
    return s->sharded ? read_sharded(s, w, whole, len, dst) : read_pair(s, w, whole, len, dst);
}

