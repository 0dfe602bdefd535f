/* pieces.c: the HF-named pieces of the sharded layout: the whole model's tensor table, a box's
 * text and a piece's name (written and parsed, one canonical form), and a rank's runs of the
 * arena turned into boxes. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/ckpt/shard.h"

static const char *const state_sfx[3] = {"", ".exp_avg", ".exp_avg_sq"};

coh_status ckpt_model_init(ckpt_model *m, const coh_gpt_config *c)
{
    *m = (ckpt_model){.c = *c};
    m->c.tp = 1;
    m->c.sp = 0;
    m->n = coh_gpt_tensor_count(&m->c);
    m->t = calloc((size_t)m->n, sizeof *m->t);
    strmap_init(&m->names);
    if (!m->t)
        return coh_errf(COH_ERR_NOMEM, "out of memory listing the model's tensors");
    for (int i = 0; i < m->n; i++) {
        coh_gpt_tensor(&m->c, i, &m->t[i]);
        if (strmap_put(&m->names, m->t[i].name, strlen(m->t[i].name), i))
            return coh_errf(COH_ERR_NOMEM, "out of memory listing the model's tensors");
    }
    return COH_OK;
}

void ckpt_model_free(ckpt_model *m)
{
    free(m->t);
    strmap_release(&m->names);
    *m = (ckpt_model){0};
}

void ckpt_model_dims(const ckpt_model *m, int i, int64_t *rows, int64_t *cols)
{
    const coh_tensor_info *t = &m->t[i];
    *rows = t->ndim == 2 ? (int64_t)t->shape[0] : 1;
    *cols = t->ndim == 2 ? (int64_t)t->shape[1] : (int64_t)t->shape[0];
}

void ckpt_box_text(const ckpt_model *m, const ckpt_box *b, char *buf, size_t cap)
{
    if (m->t[b->tensor].ndim == 2)
        snprintf(buf, cap, "%" PRId64 ":%" PRId64 ",%" PRId64 ":%" PRId64, b->r0, b->r1, b->c0,
                 b->c1);
    else
        snprintf(buf, cap, "%" PRId64 ":%" PRId64, b->c0, b->c1);
}

static int whole_box(const ckpt_model *m, const ckpt_box *b)
{
    int64_t R, C;
    ckpt_model_dims(m, b->tensor, &R, &C);
    return b->r0 == 0 && b->r1 == R && b->c0 == 0 && b->c1 == C;
}

void ckpt_state_key(const ckpt_model *m, int tensor, ckpt_what w, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s", m->t[tensor].name, state_sfx[w]);
}

void ckpt_piece_name(const ckpt_model *m, const ckpt_box *b, char *buf, size_t cap)
{
    char box[CKPT_NAME_MAX];
    if (whole_box(m, b)) {
        ckpt_state_key(m, b->tensor, b->what, buf, cap);
        return;
    }
    ckpt_box_text(m, b, box, sizeof box);
    snprintf(buf, cap, "%s%s[%s]", m->t[b->tensor].name, state_sfx[b->what], box);
}

coh_status ckpt_key_parse(const ckpt_model *m, const char *key, ckpt_box *b)
{
    size_t n = strlen(key);
    for (int w = 2; w >= 0; w--) { /* the longest state suffix first */
        size_t k = strlen(state_sfx[w]);
        if (n < k || strcmp(key + n - k, state_sfx[w]))
            continue;
        const int64_t *i = strmap_get(&m->names, key, n - k);
        if (!i)
            break;
        b->tensor = (int)*i;
        b->what = (ckpt_what)w;
        return COH_OK;
    }
    return coh_errf(COH_ERR_INVALID, "'%s' is not a tensor of the model (an HF name, optionally "
                    "with '.exp_avg' or '.exp_avg_sq')", key);
}

/* A decimal number without sign or leading zeros at *p, advanced past it. */
static int number(const char **p, int64_t *v)
{
    const char *s = *p;
    *v = 0;
    if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
        return 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (*v > (INT64_MAX - 9) / 10)
            return 0;
        *v = *v * 10 + (*s - '0');
    }
    *p = s;
    return 1;
}

/* "a:b" at *p into [a, b), advanced past it. */
static int span(const char **p, int64_t *a, int64_t *b)
{
    if (!number(p, a) || **p != ':')
        return 0;
    (*p)++;
    return number(p, b);
}

coh_status ckpt_box_parse(const ckpt_model *m, const char *text, ckpt_box *b)
{
    int64_t R, C;
    ckpt_model_dims(m, b->tensor, &R, &C);
    const char *p = text;
    int ok = 1;
    b->r0 = 0;
    b->r1 = 1;
    if (m->t[b->tensor].ndim == 2)
        ok = span(&p, &b->r0, &b->r1) && *p++ == ',';
    ok = ok && span(&p, &b->c0, &b->c1) && !*p;
    if (!ok || b->r0 >= b->r1 || b->r1 > R || b->c0 >= b->c1 || b->c1 > C)
        return coh_errf(COH_ERR_INVALID, "box '%s' of '%s' is not %s inside its shape (%" PRId64
                        " x %" PRId64 ")", text, m->t[b->tensor].name,
                        m->t[b->tensor].ndim == 2 ? "a non-empty 'r0:r1,c0:c1'"
                                                  : "a non-empty 'c0:c1'", R, C);
    return COH_OK;
}

coh_status ckpt_piece_parse(const ckpt_model *m, const char *name, ckpt_box *b)
{
    char key[CKPT_NAME_MAX], canon[CKPT_NAME_MAX];
    const char *open = strchr(name, '[');
    size_t n = open ? (size_t)(open - name) : strlen(name);
    size_t blen = open ? strlen(open + 1) : 0;
    if (n >= sizeof key || blen >= sizeof key || (open && (blen < 2 || open[blen] != ']')))
        return coh_errf(COH_ERR_INVALID, "piece name '%s' is not '<tensor>' or "
                        "'<tensor>[<box>]'", name);
    memcpy(key, name, n);
    key[n] = '\0';
    coh_status st = ckpt_key_parse(m, key, b);
    if (st)
        return st;
    if (open) {
        char box[CKPT_NAME_MAX];
        memcpy(box, open + 1, blen - 1);
        box[blen - 1] = '\0';
        st = ckpt_box_parse(m, box, b);
    } else {
        ckpt_model_dims(m, b->tensor, &b->r1, &b->c1);
        b->r0 = b->c0 = 0;
    }
    if (!st) /* one name per box: the whole tensor by its own name, numbers as written */
        ckpt_piece_name(m, b, canon, sizeof canon);
    if (!st && strcmp(canon, name))
        st = coh_errf(COH_ERR_INVALID, "piece name '%s' is not in its canonical form '%s'",
                      name, canon);
    return st;
}

void ckpt_pieces_free(ckpt_pieces *ps)
{
    free(ps->p);
    *ps = (ckpt_pieces){0};
}

/* Rows [r0, r1) x columns [c0, c1) of tensor i at src (row stride `stride`): continues the
 * last piece of the same tensor and columns whose rows it follows, else a new piece. */
static coh_status put(ckpt_pieces *ps, ckpt_box b, size_t src, size_t stride)
{
    for (size_t k = ps->n; k-- > 0 && ps->p[k].b.tensor == b.tensor;) {
        ckpt_piece *q = &ps->p[k];
        if (q->b.what != b.what || q->b.c0 != b.c0 || q->b.c1 != b.c1 || q->b.r1 != b.r0)
            continue;
        size_t rows = (size_t)(q->b.r1 - q->b.r0), s = rows > 1 ? q->stride
                                                      : b.r1 - b.r0 > 1 ? stride
                                                                        : src - q->src;
        if (src <= q->src || src != q->src + rows * s || (b.r1 - b.r0 > 1 && stride != s))
            continue;
        q->b.r1 = b.r1;
        q->stride = s;
        return COH_OK;
    }
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? 2 * ps->cap : 64;
        ckpt_piece *p = realloc(ps->p, cap * sizeof *p);
        if (!p)
            return coh_errf(COH_ERR_NOMEM, "out of memory listing a checkpoint's pieces");
        ps->p = p;
        ps->cap = cap;
    }
    ps->p[ps->n++] = (ckpt_piece){b, src, stride};
    return COH_OK;
}

/* Elements [a, b) of tensor i (row-major, C columns) at src: a partial first row, whole rows,
 * a partial last row. */
static coh_status split_rows(ckpt_pieces *ps, int i, ckpt_what w, int64_t C, int64_t a,
                             int64_t e, size_t src)
{
    coh_status st = COH_OK;
    while (!st && a < e) {
        int64_t r = a / C, c = a % C, k;
        ckpt_box b = {i, w, r, r + 1, c, c + (e - a < C - c ? e - a : C - c)};
        if (c == 0 && e - a >= C) { /* whole rows */
            k = (e - a) / C;
            b.r1 = r + k;
            b.c1 = C;
            st = put(ps, b, src, (size_t)C);
            k *= C;
        } else {
            k = b.c1 - b.c0;
            st = put(ps, b, src, (size_t)C);
        }
        a += k;
        src += (size_t)k;
    }
    return st;
}

coh_status ckpt_pieces_add(ckpt_pieces *ps, const ckpt_model *m, const ckpt_runs *rs,
                           ckpt_what what)
{
    coh_status st = COH_OK;
    for (size_t k = 0; !st && k < rs->n; k++) {
        const ckpt_run *r = &rs->r[k];
        size_t end = r->whole + r->len;
        int i = 0, hi = m->n;
        while (hi - i > 1) { /* the tensor holding the run's first element */
            int mid = (i + hi) / 2;
            if (m->t[mid].offset <= r->whole)
                i = mid;
            else
                hi = mid;
        }
        for (; !st && i < m->n && m->t[i].offset < end; i++) {
            size_t tb = m->t[i].offset, te = tb + m->t[i].numel;
            size_t x = r->whole > tb ? r->whole : tb, y = end < te ? end : te;
            int64_t R, C;
            ckpt_model_dims(m, i, &R, &C);
            if (x < y)
                st = split_rows(ps, i, what, C, (int64_t)(x - tb), (int64_t)(y - tb),
                                r->src + (x - r->whole));
        }
    }
    return st;
}
