/* bpe.h: GPT-2 byte-level BPE: tables (from encoder.json and vocab.bpe), the regex pre-split
 * written out by hand, and merging by rank with a cache. Internal to the tokenizer. */
#ifndef COHORT_DATA_BPE_H
#define COHORT_DATA_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/data.h"
#include "train/data/strmap.h"

/* One heap entry of the merge loop: a candidate pair starting at node `pos`. */
typedef struct bpe_cand {
    uint32_t rank;
    uint32_t pos;
} bpe_cand;

typedef struct bpe {
    size_t vocab;        /* max id + 1 */
    uint64_t *tok_off;   /* (vocab + 1) offsets of each token's bytes in tok_bytes */
    char *tok_bytes;
    int32_t byte_id[256];
    int32_t eot;         /* "<|endoftext|>" or -1 */
    /* merges: key (left << 32 | right) -> rank, result id */
    uint64_t *mkeys;     /* UINT64_MAX = empty slot */
    uint32_t *mrank;
    int32_t *mresult;
    size_t mcap;
    /* encoder cache: pre-token bytes -> (start << 24 | count) in cache_ids */
    strmap cache;
    int32_t *cache_ids;
    size_t cache_len, cache_cap;
    /* scratch of the merge loop */
    int32_t *ids;
    uint32_t *next, *prev;
    bpe_cand *heap, *batch;
    size_t scratch_cap;
} bpe;

/* Load both tables; names appear in errors. On error *out is NULL. */
coh_status bpe_load(const char *enc, size_t enc_len, const char *enc_name, const char *merges,
                    size_t merges_len, const char *merges_name, bpe **out);
void bpe_free(bpe *b);

/* Rank and result of merging (left, right): 1 when the pair is a merge, else 0. */
int bpe_merge_lookup(const bpe *b, int32_t left, int32_t right, uint32_t *rank, int32_t *result);

/* Append the ids of text[0..len) (pre-split, then merged). */
coh_status bpe_encode(bpe *b, const unsigned char *text, size_t len, coh_tokens *out);

/* Length in bytes of the pre-token at s[i] (i < n): GPT-2's pattern
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
size_t pretok_next(const unsigned char *s, size_t n, size_t i);

#endif
