/* bpe_load.c: reads GPT-2's encoder.json (token -> id, in the printable byte alphabet) and
 * vocab.bpe (merges in rank order) into id-level tables. */
#include <stdlib.h>
#include <string.h>

#include "train/data/bpe.h"
#include "train/data/unicode.h"
#include "util/json.h"

/* GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the other 68 bytes are
 * shifted to U+0100.. in byte order, so every token is printable text. */
static void byte_alphabet(uint32_t byte_to_cp[256], int16_t cp_to_byte[324])
{
    uint32_t extra = 256;
    for (int i = 0; i < 324; i++)
        cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        byte_to_cp[b] = printable ? (uint32_t)b : extra++;
        cp_to_byte[byte_to_cp[b]] = (int16_t)b;
    }
}

/* Map a token written in the byte alphabet back to its bytes; out has room for len bytes.
 * Returns the byte count, or -1 with the offending code point in *bad. */
static long unmap_token(const int16_t cp_to_byte[324], const char *s, size_t len, char *out,
                        uint32_t *bad)
{
    long n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += utf8_decode((const unsigned char *)s + i, len - i, &cp);
        if (cp >= 324 || cp_to_byte[cp] < 0) {
            *bad = cp;
            return -1;
        }
        out[n++] = (char)cp_to_byte[cp];
    }
    return n;
}

/* Fill tok_off/tok_bytes from the encoder object and `bytes_to_id` (token bytes -> id). */
static coh_status load_vocab(bpe *b, const json_value *root, const char *name, strmap *ids)
{
    if (root->type != JSON_OBJECT || root->u.obj.count == 0)
        return coh_errf(COH_ERR_INVALID, "'%s': expected a non-empty object of token -> id",
                        name);
    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[324];
    byte_alphabet(byte_to_cp, cp_to_byte);
    size_t count = root->u.obj.count, total = 0;
    int64_t max_id = -1;
    for (size_t i = 0; i < count; i++) {
        const json_value *v = root->u.obj.values[i];
        if (v->type != JSON_NUMBER || !v->u.num.is_integer || v->u.num.integer < 0 ||
            v->u.num.integer >= (int64_t)1 << 22)
            return coh_errf(COH_ERR_INVALID,
                            "'%s': token '%s' at line %d has id that is not an integer in "
                            "0..4194303", name, root->u.obj.keys[i], v->line);
        if (v->u.num.integer > max_id)
            max_id = v->u.num.integer;
        total += root->u.obj.key_lens[i];
    }
    b->vocab = (size_t)max_id + 1;
    b->tok_off = calloc(b->vocab + 1, sizeof *b->tok_off);
    b->tok_bytes = malloc(total + 1);
    int64_t *lens = malloc(b->vocab * sizeof *lens);
    if (!b->tok_off || !b->tok_bytes || !lens) {
        free(lens);
        return coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", name);
    }
    for (size_t i = 0; i < b->vocab; i++)
        lens[i] = -1;
    /* First pass: bytes of each token into a scratch area, indexed by id. */
    char *scratch = malloc(total + 1);
    uint64_t *start = malloc(b->vocab * sizeof *start);
    coh_status st = (scratch && start) ? COH_OK : coh_errf(COH_ERR_NOMEM, "out of memory");
    size_t used = 0;
    for (size_t i = 0; st == COH_OK && i < count; i++) {
        const char *key = root->u.obj.keys[i];
        int64_t id = root->u.obj.values[i]->u.num.integer;
        uint32_t bad = 0;
        long n = unmap_token(cp_to_byte, key, root->u.obj.key_lens[i], scratch + used, &bad);
        if (n < 0)
            st = coh_errf(COH_ERR_INVALID,
                          "'%s': token '%s' has character U+%04X outside GPT-2's byte alphabet",
                          name, key, (unsigned)(bad == UCLASS_INVALID_CP ? 0xFFFD : bad));
        else if (n == 0)
            st = coh_errf(COH_ERR_INVALID, "'%s': empty token with id %lld", name,
                          (long long)id);
        else if (lens[id] >= 0)
            st = coh_errf(COH_ERR_INVALID, "'%s': id %lld is used by two tokens (second: '%s')",
                          name, (long long)id, key);
        else if (strmap_put(ids, scratch + used, (size_t)n, id) != 0)
            st = coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", name);
        else {
            start[id] = used;
            lens[id] = n;
            used += (size_t)n;
        }
    }
    /* Second pass: pack in id order (ids without a token are empty). */
    size_t off = 0;
    for (size_t id = 0; st == COH_OK && id < b->vocab; id++) {
        b->tok_off[id] = off;
        if (lens[id] > 0) {
            memcpy(b->tok_bytes + off, scratch + start[id], (size_t)lens[id]);
            off += (size_t)lens[id];
        }
    }
    if (st == COH_OK)
        b->tok_off[b->vocab] = off;
    free(scratch);
    free(start);
    free(lens);
    return st;
}

static coh_status find_bytes_and_eot(bpe *b, const strmap *ids, const char *name)
{
    for (int c = 0; c < 256; c++) {
        char ch = (char)c;
        const int64_t *id = strmap_get(ids, &ch, 1);
        if (!id)
            return coh_errf(COH_ERR_INVALID,
                            "'%s': no token for byte 0x%02X (a byte-level BPE needs all 256)",
                            name, c);
        b->byte_id[c] = (int32_t)*id;
    }
    const int64_t *eot = strmap_get(ids, "<|endoftext|>", 13);
    b->eot = eot ? (int32_t)*eot : -1;
    return COH_OK;
}

static size_t merge_slot(const bpe *b, uint64_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    size_t mask = b->mcap - 1;
    size_t i = (size_t)(h >> 20) & mask;
    while (b->mkeys[i] != UINT64_MAX && b->mkeys[i] != key)
        i = (i + 1) & mask;
    return i;
}

int bpe_merge_lookup(const bpe *b, int32_t left, int32_t right, uint32_t *rank, int32_t *result)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = merge_slot(b, key);
    if (b->mkeys[i] == UINT64_MAX)
        return 0;
    *rank = b->mrank[i];
    *result = b->mresult[i];
    return 1;
}

/* Lines of vocab.bpe between the first (a version comment) and the text after the last newline,
 * as GPT-2's encoder.py reads them: bpe_data.split('\n')[1:-1]. */
static size_t count_merge_lines(const char *s, size_t n)
{
    size_t lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += s[i] == '\n';
    return lines ? lines - 1 : 0;
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* Split one line into two fields; returns the number of fields found (stops counting at 3). */
static int split_fields(const char *s, size_t n, const char *f[2], size_t fl[2])
{
    int k = 0;
    size_t i = 0;
    while (i < n) {
        while (i < n && is_blank(s[i]))
            i++;
        if (i == n)
            break;
        size_t j = i;
        while (j < n && !is_blank(s[j]))
            j++;
        if (k == 2)
            return 3;
        f[k] = s + i;
        fl[k++] = j - i;
        i = j;
    }
    return k;
}

/* Id of a token written in the byte alphabet, or -1. */
static int32_t token_id(const strmap *ids, const int16_t cp_to_byte[324], const char *s, size_t n)
{
    char buf[1024];
    uint32_t bad;
    if (n > sizeof buf)
        return -1;
    long len = unmap_token(cp_to_byte, s, n, buf, &bad);
    const int64_t *id = len > 0 ? strmap_get(ids, buf, (size_t)len) : NULL;
    return id ? (int32_t)*id : -1;
}

static coh_status add_merge(bpe *b, const strmap *ids, const int16_t cp_to_byte[324],
                            const char *line, size_t n, size_t lineno, uint32_t rank,
                            const char *name)
{
    const char *f[2];
    size_t fl[2];
    int k = split_fields(line, n, f, fl);
    if (k == 0)
        return COH_OK; /* a blank line merges nothing */
    if (k != 2)
        return coh_errf(COH_ERR_INVALID, "'%s' line %zu: expected two tokens 'left right', got "
                        "'%.*s'", name, lineno, (int)(n > 80 ? 80 : n), line);
    int32_t left = token_id(ids, cp_to_byte, f[0], fl[0]);
    int32_t right = token_id(ids, cp_to_byte, f[1], fl[1]);
    char joined[2048];
    int32_t result = -1;
    if (fl[0] + fl[1] <= sizeof joined) {
        memcpy(joined, f[0], fl[0]);
        memcpy(joined + fl[0], f[1], fl[1]);
        result = token_id(ids, cp_to_byte, joined, fl[0] + fl[1]);
    }
    if (left < 0 || right < 0 || result < 0)
        return coh_errf(COH_ERR_INVALID,
                        "'%s' line %zu: merge '%.*s %.*s' uses or makes a token that is not in "
                        "the encoder", name, lineno, (int)fl[0], f[0], (int)fl[1], f[1]);
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t slot = merge_slot(b, key);
    /* A repeated pair keeps its last rank, as dict(zip(merges, ranks)) does. */
    b->mkeys[slot] = key;
    b->mrank[slot] = rank;
    b->mresult[slot] = result;
    return COH_OK;
}

static coh_status load_merges(bpe *b, const strmap *ids, const char *s, size_t n,
                              const char *name)
{
    size_t lines = count_merge_lines(s, n);
    b->mcap = 64;
    while (b->mcap < lines * 2 + 2)
        b->mcap *= 2;
    b->mkeys = malloc(b->mcap * sizeof *b->mkeys);
    b->mrank = malloc(b->mcap * sizeof *b->mrank);
    b->mresult = malloc(b->mcap * sizeof *b->mresult);
    if (!b->mkeys || !b->mrank || !b->mresult)
        return coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", name);
    memset(b->mkeys, 0xFF, b->mcap * sizeof *b->mkeys);
    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[324];
    byte_alphabet(byte_to_cp, cp_to_byte);
    const char *p = lines ? memchr(s, '\n', n) : NULL;
    for (size_t i = 0; i < lines; i++) {
        const char *line = p + 1;
        p = memchr(line, '\n', (size_t)(s + n - line));
        coh_status st = add_merge(b, ids, cp_to_byte, line, (size_t)(p - line), i + 2,
                                  (uint32_t)i, name);
        if (st != COH_OK)
            return st;
    }
    return COH_OK;
}

coh_status bpe_load(const char *enc, size_t enc_len, const char *enc_name, const char *merges,
                    size_t merges_len, const char *merges_name, bpe **out)
{
    *out = NULL;
    if (merges_len > UINT32_MAX)
        return coh_errf(COH_ERR_INVALID, "'%s': too large", merges_name);
    bpe *b = calloc(1, sizeof *b);
    if (!b)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    strmap_init(&b->cache);
    json_doc *doc = NULL;
    strmap ids;
    strmap_init(&ids);
    coh_status st = json_parse(enc, enc_len, &doc);
    if (st != COH_OK)
        st = coh_err_prefix(st, "'%s'", enc_name);
    if (st == COH_OK)
        st = load_vocab(b, json_root(doc), enc_name, &ids);
    json_free(doc);
    if (st == COH_OK)
        st = find_bytes_and_eot(b, &ids, enc_name);
    if (st == COH_OK)
        st = load_merges(b, &ids, merges, merges_len, merges_name);
    strmap_release(&ids);
    if (st != COH_OK) {
        bpe_free(b);
        return st;
    }
    *out = b;
    return COH_OK;
}

void bpe_free(bpe *b)
{
    if (!b)
        return;
    free(b->tok_off);
    free(b->tok_bytes);
    free(b->mkeys);
    free(b->mrank);
    free(b->mresult);
    strmap_release(&b->cache);
    free(b->cache_ids);
    free(b->ids);
    free(b->next);
    free(b->prev);
    free(b->heap);
    free(b->batch);
    free(b);
}
