/* json.c: strict recursive-descent JSON reader with an arena for all nodes. */
#include "util/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/file.h"

#define JSON_MAX_DEPTH 256

/* All nodes and strings of a document come from a chain of blocks, freed at once. */
typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} arena_block;

struct json_doc {
    arena_block *blocks;
    json_value *root;
};

typedef struct parser {
    const char *p, *end, *start;
    int line;
    const char *line_start;
    json_doc *doc;
    int depth;
} parser;

static void *arena_alloc(json_doc *doc, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    arena_block *b = doc->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->next = doc->blocks;
        b->used = 0;
        b->cap = cap;
        doc->blocks = b;
    }
    void *r = b->data + b->used;
    b->used += n;
    return r;
}

static int col_of(const parser *ps) { return (int)(ps->p - ps->line_start) + 1; }

static coh_status fail(parser *ps, const char *what)
{
    if (ps->p >= ps->end)
        return coh_errf(COH_ERR_INVALID, "json: line %d column %d: %s (at end of input)", ps->line,
                        col_of(ps), what);
    unsigned char c = (unsigned char)*ps->p;
    if (c >= 0x20 && c < 0x7f)
        return coh_errf(COH_ERR_INVALID, "json: line %d column %d: %s (found '%c')", ps->line,
                        col_of(ps), what, c);
    return coh_errf(COH_ERR_INVALID, "json: line %d column %d: %s (found byte 0x%02x)", ps->line,
                    col_of(ps), what, c);
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == '\n') {
            ps->line++;
            ps->line_start = ps->p + 1;
        } else if (c != ' ' && c != '\t' && c != '\r') {
            return;
        }
        ps->p++;
    }
}

static coh_status parse_value(parser *ps, json_value **out);

static json_value *new_value(parser *ps, json_type t)
{
    json_value *v = arena_alloc(ps->doc, sizeof *v);
    if (!v)
        return NULL;
    memset(v, 0, sizeof *v);
    v->type = t;
    v->line = ps->line;
    v->col = col_of(ps);
    return v;
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

static size_t put_utf8(char *dst, unsigned cp)
{
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char)(0xC0 | (cp >> 6));
        dst[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xE0 | (cp >> 12));
        dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    dst[0] = (char)(0xF0 | (cp >> 18));
    dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parse a string starting at '"'; the decoded text is never longer than the source. */
static coh_status parse_string(parser *ps, char **out, size_t *out_len)
{
    const char *s = ++ps->p; /* past the opening quote */
    const char *q = s;
    while (q < ps->end && *q != '"') {
        if (*q == '\\')
            q++;
        q++;
    }
    if (q >= ps->end)
        return fail(ps, "unterminated string");
    char *buf = arena_alloc(ps->doc, (size_t)(q - s) + 1);
    if (!buf)
        return coh_errf(COH_ERR_NOMEM, "json: out of memory");
    size_t n = 0;
    while (ps->p < q) {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20)
            return fail(ps, "control character in string");
        if (c != '\\') {
            buf[n++] = (char)c;
            ps->p++;
            continue;
        }
        ps->p++;
        char e = *ps->p;
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (q - ps->p < 5 || !hex4(ps->p + 1, &cp))
                return fail(ps, "invalid \\u escape");
            ps->p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (q - ps->p < 7 || ps->p[1] != '\\' || ps->p[2] != 'u' || !hex4(ps->p + 3, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return fail(ps, "unpaired surrogate in \\u escape");
                ps->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return fail(ps, "unpaired surrogate in \\u escape");
            }
            n += put_utf8(buf + n, cp);
            break;
        }
        default:
            return fail(ps, "invalid escape in string");
        }
        ps->p++;
    }
    buf[n] = '\0';
    ps->p = q + 1;
    *out = buf;
    *out_len = n;
    return COH_OK;
}

static coh_status parse_number(parser *ps, json_value *v)
{
    const char *s = ps->p;
    int integer = 1;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return fail(ps, "invalid number");
    if (*ps->p == '0') {
        ps->p++;
    } else {
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    if (ps->p < ps->end && *ps->p == '.') {
        integer = 0;
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return fail(ps, "invalid number: digit expected after '.'");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        integer = 0;
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return fail(ps, "invalid number: digit expected in exponent");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    char tmp[64];
    size_t n = (size_t)(ps->p - s);
    if (n >= sizeof tmp) {
        /* Very long numbers: only the double matters. */
        char *big = malloc(n + 1);
        if (!big)
            return coh_errf(COH_ERR_NOMEM, "json: out of memory");
        memcpy(big, s, n);
        big[n] = '\0';
        v->u.num.value = strtod(big, NULL);
        free(big);
        v->u.num.is_integer = 0;
        return COH_OK;
    }
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    v->u.num.value = strtod(tmp, NULL);
    if (integer) {
        errno = 0;
        long long ll = strtoll(tmp, NULL, 10);
        if (errno == 0) {
            v->u.num.is_integer = 1;
            v->u.num.integer = ll;
        }
    }
    return COH_OK;
}

static int match_word(parser *ps, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n) != 0)
        return 0;
    ps->p += n;
    return 1;
}

/* Growable list of pointers used while reading arrays and objects (heap, copied to the arena). */
typedef struct plist {
    void **v;
    size_t n, cap;
} plist;

static int plist_push(plist *l, void *x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        void **nv = realloc(l->v, cap * sizeof *nv);
        if (!nv)
            return 0;
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 1;
}

static void **plist_to_arena(parser *ps, const plist *l)
{
    void **a = arena_alloc(ps->doc, (l->n ? l->n : 1) * sizeof(void *));
    if (a && l->n)
        memcpy(a, l->v, l->n * sizeof(void *));
    return a;
}

/* After an array item or object member: ',' means another follows (1), the closing bracket
 * ends the container (0), anything else is an error reported in *st (-1). */
static int next_member(parser *ps, char close, coh_status *st)
{
    skip_ws(ps);
    if (ps->p < ps->end && (*ps->p == ',' || *ps->p == close))
        return *ps->p++ == ',';
    *st = fail(ps, close == ']' ? "expected ',' or ']' in array" : "expected ',' or '}' in object");
    return -1;
}

static coh_status parse_array(parser *ps, json_value *v)
{
    plist items = {0};
    coh_status st = COH_OK;
    ps->p++; /* '[' */
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
    } else {
        for (;;) {
            json_value *item;
            if ((st = parse_value(ps, &item)) != COH_OK)
                goto out;
            if (!plist_push(&items, item)) {
                st = coh_errf(COH_ERR_NOMEM, "json: out of memory");
                goto out;
            }
            int more = next_member(ps, ']', &st);
            if (more < 0)
                goto out;
            if (!more)
                break;
        }
    }
    v->u.arr.items = (json_value **)plist_to_arena(ps, &items);
    v->u.arr.count = items.n;
    if (!v->u.arr.items)
        st = coh_errf(COH_ERR_NOMEM, "json: out of memory");
out:
    free(items.v);
    return st;
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* Objects may be large (a tokenizer table has 50k keys): duplicates are found with a hash set. */
static coh_status check_duplicate_keys(const json_value *v)
{
    size_t n = v->u.obj.count, cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    size_t *slots = malloc(cap * sizeof *slots);
    if (!slots)
        return coh_errf(COH_ERR_NOMEM, "json: out of memory");
    for (size_t i = 0; i < cap; i++)
        slots[i] = SIZE_MAX;
    coh_status st = COH_OK;
    for (size_t i = 0; i < n && st == COH_OK; i++) {
        const char *k = v->u.obj.keys[i];
        size_t kl = v->u.obj.key_lens[i];
        size_t h = (size_t)hash_bytes(k, kl) & (cap - 1);
        while (slots[h] != SIZE_MAX) {
            size_t j = slots[h];
            if (v->u.obj.key_lens[j] == kl && memcmp(v->u.obj.keys[j], k, kl) == 0) {
                st = coh_errf(COH_ERR_INVALID,
                              "json: line %d column %d: duplicate key '%s' in object", v->line,
                              v->col, k);
                break;
            }
            h = (h + 1) & (cap - 1);
        }
        slots[h] = i;
    }
    free(slots);
    return st;
}

static coh_status parse_object(parser *ps, json_value *v)
{
    plist keys = {0}, vals = {0}, lens = {0};
    coh_status st = COH_OK;
    ps->p++; /* '{' */
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
    } else {
        for (;;) {
            char *key;
            size_t klen;
            json_value *val;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != '"') {
                st = fail(ps, "expected a string key in object");
                goto out;
            }
            if ((st = parse_string(ps, &key, &klen)) != COH_OK)
                goto out;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                st = fail(ps, "expected ':' after object key");
                goto out;
            }
            ps->p++;
            if ((st = parse_value(ps, &val)) != COH_OK)
                goto out;
            if (!plist_push(&keys, key) || !plist_push(&vals, val) ||
                !plist_push(&lens, (void *)(uintptr_t)klen)) {
                st = coh_errf(COH_ERR_NOMEM, "json: out of memory");
                goto out;
            }
            int more = next_member(ps, '}', &st);
            if (more < 0)
                goto out;
            if (!more)
                break;
        }
    }
    v->u.obj.keys = (char **)plist_to_arena(ps, &keys);
    v->u.obj.values = (json_value **)plist_to_arena(ps, &vals);
    v->u.obj.key_lens = arena_alloc(ps->doc, (keys.n ? keys.n : 1) * sizeof(size_t));
    v->u.obj.count = keys.n;
    if (!v->u.obj.keys || !v->u.obj.values || !v->u.obj.key_lens) {
        st = coh_errf(COH_ERR_NOMEM, "json: out of memory");
        goto out;
    }
    for (size_t i = 0; i < keys.n; i++)
        v->u.obj.key_lens[i] = (size_t)(uintptr_t)lens.v[i];
    st = check_duplicate_keys(v);
out:
    free(keys.v);
    free(vals.v);
    free(lens.v);
    return st;
}

static coh_status parse_value(parser *ps, json_value **out)
{
    skip_ws(ps);
    if (ps->p >= ps->end)
        return fail(ps, "expected a value");
    json_value *v = new_value(ps, JSON_NULL);
    if (!v)
        return coh_errf(COH_ERR_NOMEM, "json: out of memory");
    *out = v;
    coh_status st = COH_OK;
    switch (*ps->p) {
    case '{':
    case '[':
        if (++ps->depth > JSON_MAX_DEPTH)
            return fail(ps, "nesting deeper than 256 levels");
        if (*ps->p == '{') {
            v->type = JSON_OBJECT;
            st = parse_object(ps, v);
        } else {
            v->type = JSON_ARRAY;
            st = parse_array(ps, v);
        }
        ps->depth--;
        return st;
    case '"':
        v->type = JSON_STRING;
        return parse_string(ps, &v->u.str.chars, &v->u.str.len);
    case 't':
    case 'f':
        v->type = JSON_BOOL;
        if (match_word(ps, "true"))
            v->u.boolean = 1;
        else if (!match_word(ps, "false"))
            return fail(ps, "invalid literal");
        return COH_OK;
    case 'n':
        if (!match_word(ps, "null"))
            return fail(ps, "invalid literal");
        return COH_OK;
    default:
        v->type = JSON_NUMBER;
        return parse_number(ps, v);
    }
}

coh_status json_parse(const char *text, size_t len, json_doc **out)
{
    *out = NULL;
    json_doc *doc = calloc(1, sizeof *doc);
    if (!doc)
        return coh_errf(COH_ERR_NOMEM, "json: out of memory");
    parser ps = {.p = text, .end = text + len, .start = text, .line = 1, .line_start = text, .doc = doc};
    /* A UTF-8 byte order mark is tolerated, as editors write it. */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        ps.p += 3, ps.line_start += 3;
    coh_status st = parse_value(&ps, &doc->root);
    if (st == COH_OK) {
        skip_ws(&ps);
        if (ps.p != ps.end)
            st = fail(&ps, "unexpected text after the value");
    }
    if (st != COH_OK) {
        json_free(doc);
        return st;
    }
    *out = doc;
    return COH_OK;
}

coh_status json_parse_file(const char *path, json_doc **out)
{
    *out = NULL;
    char *buf;
    size_t n;
    coh_status st = util_read_file(path, 0, &buf, &n);
    if (st)
        return st;
    st = json_parse(buf, n, out);
    free(buf);
    if (st != COH_OK)
        return coh_err_prefix(st, "%s", path);
    return COH_OK;
}

const json_value *json_root(const json_doc *doc) { return doc ? doc->root : NULL; }

void json_free(json_doc *doc)
{
    if (!doc)
        return;
    arena_block *b = doc->blocks;
    while (b) {
        arena_block *next = b->next;
        free(b);
        b = next;
    }
    free(doc);
}

const json_value *json_get(const json_value *v, const char *key)
{
    if (!v || v->type != JSON_OBJECT)
        return NULL;
    size_t klen = strlen(key);
    for (size_t i = 0; i < v->u.obj.count; i++)
        if (v->u.obj.key_lens[i] == klen && memcmp(v->u.obj.keys[i], key, klen) == 0)
            return v->u.obj.values[i];
    return NULL;
}

const char *json_type_name(json_type t)
{
    switch (t) {
    case JSON_NULL: return "null";
    case JSON_BOOL: return "boolean";
    case JSON_NUMBER: return "number";
    case JSON_STRING: return "string";
    case JSON_ARRAY: return "array";
    case JSON_OBJECT: return "object";
    }
    return "?";
}
