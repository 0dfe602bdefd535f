/* bpe_encode.c: GPT-2 encoding of text: pre-split, then per pre-token the byte ids are merged
 * by rank (lowest first, every occurrence of that pair left to right, as encoder.py's bpe()
 * does) using a heap over a linked list, so long pre-tokens cost O(n log n), not O(n^2). */
#include <stdlib.h>
#include <string.h>

#include "train/data/bpe.h"

/* Pre-tokens up to this many bytes are cached (nearly all words); the cache is emptied when it
 * grows past the limits, which keeps memory bounded on any input. */
#define CACHE_MAX_KEY 64
#define CACHE_MAX_ENTRIES (1u << 18)
#define CACHE_MAX_IDS (1u << 22)

static int grow_scratch(bpe *b, size_t n)
{
    if (n <= b->scratch_cap)
        return 0;
    size_t cap = b->scratch_cap ? b->scratch_cap : 256;
    while (cap < n)
        cap *= 2;
    int32_t *ids = realloc(b->ids, cap * sizeof *ids);
    if (ids)
        b->ids = ids;
    uint32_t *next = realloc(b->next, cap * sizeof *next);
    if (next)
        b->next = next;
    uint32_t *prev = realloc(b->prev, cap * sizeof *prev);
    if (prev)
        b->prev = prev;
    bpe_cand *heap = realloc(b->heap, 2 * cap * sizeof *heap);
    if (heap)
        b->heap = heap;
    bpe_cand *batch = realloc(b->batch, cap * sizeof *batch);
    if (batch)
        b->batch = batch;
    if (!ids || !next || !prev || !heap || !batch)
        return -1;
    b->scratch_cap = cap;
    return 0;
}

static int cand_less(bpe_cand a, bpe_cand c)
{
    return a.rank < c.rank || (a.rank == c.rank && a.pos < c.pos);
}

static void heap_push(bpe_cand *h, size_t *n, bpe_cand c)
{
    size_t i = (*n)++;
    while (i > 0 && cand_less(c, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static bpe_cand heap_pop(bpe_cand *h, size_t *n)
{
    bpe_cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && cand_less(h[c + 1], h[c]))
            c++;
        if (!cand_less(h[c], last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

#define NONE UINT32_MAX

/* Push the pair starting at node i, if it is a merge. */
static void push_pair(bpe *b, size_t *hn, uint32_t i)
{
    uint32_t rank;
    int32_t result;
    if (i != NONE && b->next[i] != NONE &&
        bpe_merge_lookup(b, b->ids[i], b->ids[b->next[i]], &rank, &result))
        heap_push(b->heap, hn, (bpe_cand){rank, i});
}

/* Merge node i with its successor into `result`, and offer the two new pairs. */
static void merge_at(bpe *b, size_t *hn, uint32_t i, int32_t result)
{
    uint32_t gone = b->next[i];
    b->ids[i] = result;
    b->next[i] = b->next[gone];
    if (b->next[i] != NONE)
        b->prev[b->next[i]] = i;
    b->prev[gone] = b->next[gone] = i; /* marks `gone` dead: it points at itself's merger */
    b->ids[gone] = -1;
    push_pair(b, hn, b->prev[i]);
    push_pair(b, hn, i);
}

/* Merge the byte ids in b->ids[0..n) in place; returns the head node (always 0). */
static void merge_word(bpe *b, size_t n)
{
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        b->next[i] = i + 1 < n ? (uint32_t)(i + 1) : NONE;
        b->prev[i] = i > 0 ? (uint32_t)(i - 1) : NONE;
    }
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(b, &hn, (uint32_t)i);
    while (hn > 0) {
        /* All candidates of the lowest rank are one pair type; take them in position order
         * before any pair they create is considered, as one pass of encoder.py's loop. */
        uint32_t rank = b->heap[0].rank;
        size_t nb = 0;
        while (hn > 0 && b->heap[0].rank == rank)
            b->batch[nb++] = heap_pop(b->heap, &hn);
        for (size_t k = 0; k < nb; k++) {
            uint32_t i = b->batch[k].pos, r2;
            int32_t result;
            if (b->ids[i] < 0 || b->next[i] == NONE ||
                !bpe_merge_lookup(b, b->ids[i], b->ids[b->next[i]], &r2, &result) || r2 != rank)
                continue; /* stale: a merge in this pass already used one of its tokens */
            merge_at(b, &hn, i, result);
        }
    }
}

static coh_status cache_put(bpe *b, const unsigned char *key, size_t klen, const int32_t *ids,
                            size_t n)
{
    if (b->cache.count >= CACHE_MAX_ENTRIES || b->cache_len + n > CACHE_MAX_IDS) {
        strmap_clear(&b->cache);
        b->cache_len = 0;
    }
    if (b->cache_len + n > b->cache_cap) {
        size_t cap = b->cache_cap ? b->cache_cap * 2 : 4096;
        while (cap < b->cache_len + n)
            cap *= 2;
        int32_t *p = realloc(b->cache_ids, cap * sizeof *p);
        if (!p)
            return coh_errf(COH_ERR_NOMEM, "out of memory in the tokenizer cache");
        b->cache_ids = p;
        b->cache_cap = cap;
    }
    memcpy(b->cache_ids + b->cache_len, ids, n * sizeof *ids);
    if (strmap_put(&b->cache, key, klen, (int64_t)b->cache_len << 24 | (int64_t)n) != 0)
        return coh_errf(COH_ERR_NOMEM, "out of memory in the tokenizer cache");
    b->cache_len += n;
    return COH_OK;
}

static coh_status encode_pretoken(bpe *b, const unsigned char *s, size_t n, coh_tokens *out)
{
    if (n == 1)
        return coh_tokens_push(out, b->byte_id[s[0]]);
    const int64_t *hit = n <= CACHE_MAX_KEY ? strmap_get(&b->cache, s, n) : NULL;
    if (hit) {
        size_t start = (size_t)(*hit >> 24), count = (size_t)(*hit & 0xFFFFFF);
        for (size_t i = 0; i < count; i++) {
            coh_status st = coh_tokens_push(out, b->cache_ids[start + i]);
            if (st != COH_OK)
                return st;
        }
        return COH_OK;
    }
    if (n >= NONE || grow_scratch(b, n) != 0)
        return coh_errf(COH_ERR_NOMEM, "out of memory encoding a %zu-byte pre-token", n);
    for (size_t i = 0; i < n; i++)
        b->ids[i] = b->byte_id[s[i]];
    merge_word(b, n);
    size_t first = out->count;
    for (uint32_t i = 0; i != NONE; i = b->next[i]) {
        coh_status st = coh_tokens_push(out, b->ids[i]);
        if (st != COH_OK)
            return st;
    }
    if (n <= CACHE_MAX_KEY)
        return cache_put(b, s, n, out->ids + first, out->count - first);
    return COH_OK;
}

coh_status bpe_encode(bpe *b, const unsigned char *text, size_t len, coh_tokens *out)
{
    for (size_t i = 0; i < len;) {
        size_t n = pretok_next(text, len, i);
        coh_status st = encode_pretoken(b, text + i, n, out);
        if (st != COH_OK)
            return st;
        i += n;
    }
    return COH_OK;
}
