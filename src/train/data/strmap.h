/* strmap.h: a hash map from byte strings to int64 values (keys copied into an arena), for the
 * BPE vocabulary and the encoder cache. Internal. */
#ifndef COHORT_DATA_STRMAP_H
#define COHORT_DATA_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct strmap_entry {
    uint64_t key_off;
    uint32_t key_len;
    uint32_t hash;
    int64_t value;
} strmap_entry;

typedef struct strmap {
    uint32_t *slots; /* entry index + 1; 0 = empty */
    size_t cap;      /* slots, a power of two */
    strmap_entry *entries;
    size_t count, entries_cap;
    char *keys;
    size_t keys_len, keys_cap;
} strmap;

void strmap_init(strmap *m);
void strmap_release(strmap *m);
/* Drop every entry, keeping the memory. */
void strmap_clear(strmap *m);
/* The value of key, or NULL. */
const int64_t *strmap_get(const strmap *m, const void *key, size_t len);
/* Insert or replace. Returns 0, or -1 when out of memory. */
int strmap_put(strmap *m, const void *key, size_t len, int64_t value);

#endif
