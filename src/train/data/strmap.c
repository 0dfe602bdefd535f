/* strmap.c: open-addressing hash map from byte strings to int64 (FNV-1a, linear probing). */
#include "train/data/strmap.h"

#include <stdlib.h>
#include <string.h>

static uint32_t hash_bytes(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

void strmap_init(strmap *m)
{
    memset(m, 0, sizeof *m);
}

void strmap_release(strmap *m)
{
    free(m->slots);
    free(m->entries);
    free(m->keys);
    strmap_init(m);
}

void strmap_clear(strmap *m)
{
    if (m->slots)
        memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->count = 0;
    m->keys_len = 0;
}

static size_t find_slot(const strmap *m, const void *key, size_t len, uint32_t h)
{
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t s = m->slots[i];
        if (s == 0)
            return i;
        const strmap_entry *e = &m->entries[s - 1];
        if (e->hash == h && e->key_len == len && memcmp(m->keys + e->key_off, key, len) == 0)
            return i;
    }
}

const int64_t *strmap_get(const strmap *m, const void *key, size_t len)
{
    if (m->cap == 0)
        return NULL;
    uint32_t h = hash_bytes(key, len);
    uint32_t s = m->slots[find_slot(m, key, len, h)];
    return s ? &m->entries[s - 1].value : NULL;
}

static int grow_slots(strmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    for (size_t i = 0; i < m->count; i++) {
        size_t j = m->entries[i].hash & (cap - 1);
        while (slots[j])
            j = (j + 1) & (cap - 1);
        slots[j] = (uint32_t)(i + 1);
    }
    return 0;
}

static int reserve(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

int strmap_put(strmap *m, const void *key, size_t len, int64_t value)
{
    if ((m->count + 1) * 2 > m->cap && grow_slots(m) != 0)
        return -1;
    uint32_t h = hash_bytes(key, len);
    size_t i = find_slot(m, key, len, h);
    if (m->slots[i]) {
        m->entries[m->slots[i] - 1].value = value;
        return 0;
    }
    if (m->count >= UINT32_MAX - 1 || len > UINT32_MAX ||
        reserve((void **)&m->entries, &m->entries_cap, m->count + 1, sizeof *m->entries) ||
        reserve((void **)&m->keys, &m->keys_cap, m->keys_len + len + 1, 1))
        return -1;
    memcpy(m->keys + m->keys_len, key, len);
    m->entries[m->count] = (strmap_entry){m->keys_len, (uint32_t)len, h, value};
    m->keys_len += len;
    m->count++;
    m->slots[i] = (uint32_t)m->count;
    return 0;
}
