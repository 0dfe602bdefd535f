/* split_memo.c: the trainer's pipeline split of each shape, remembered over one search. The split
 * (par_pipe_split: a search of its own that simulates the schedule up to thousands of times)
 * depends on the model's shape, tp, sequence parallelism, the schedule's shape and recompute,
 * not on the ZeRO stage, the data-parallel width or the micro-batch's memory, so the many
 * configurations of a search that differ only there share one. A pure function remembered:
 * a lookup gives exactly what the split would compute again. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/planner_int.h"

typedef struct entry {
    int key[PLAN_SPLIT_KEY];
    int u, shards;
    int *bounds; /* u + 1; NULL: the slot is free */
} entry;

struct plan_split_memo {
    entry *slot;
    size_t cap, used; /* cap a power of two; used at most half of it */
    long searched, reused;
};

plan_split_memo *plan_split_memo_new(void)
{
    return calloc(1, sizeof(plan_split_memo));
}

void plan_split_memo_free(plan_split_memo *memo)
{
    if (!memo)
        return;
    for (size_t i = 0; i < memo->cap; i++)
        free(memo->slot[i].bounds);
    free(memo->slot);
    free(memo);
}

static size_t hash(const int *key)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the key's ints */
    for (int i = 0; i < PLAN_SPLIT_KEY; i++) {
        h ^= (uint32_t)key[i];
        h *= 1099511628211ull;
    }
    return (size_t)(h ^ (h >> 29));
}

/* The slot holding key, or the free one where it would go. */
static entry *find(const plan_split_memo *memo, const int *key)
{
    size_t mask = memo->cap - 1;
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
        entry *e = &memo->slot[i];
        if (!e->bounds || !memcmp(e->key, key, sizeof e->key))
            return e;
    }
}

int plan_split_memo_get(plan_split_memo *memo, const int *key, int u, int *bounds, int *shards)
{
    entry *e = memo->cap ? find(memo, key) : NULL;
    if (!e || !e->bounds || e->u != u) {
        memo->searched++;
        return 0;
    }
    memcpy(bounds, e->bounds, sizeof(int) * (size_t)(u + 1));
    *shards = e->shards;
    memo->reused++;
    return 1;
}

/* Doubles the table; 0 when there is no memory (the old table stays). */
static int grow(plan_split_memo *memo)
{
    size_t cap = memo->cap ? memo->cap * 2 : 64;
    entry *old = memo->slot, *slot = calloc(cap, sizeof *slot);
    if (!slot)
        return 0;
    size_t old_cap = memo->cap;
    memo->slot = slot;
    memo->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].bounds)
            *find(memo, old[i].key) = old[i];
    free(old);
    return 1;
}

void plan_split_memo_put(plan_split_memo *memo, const int *key, int u, const int *bounds,
                         int shards)
{
    if ((memo->used + 1) * 2 > memo->cap && !grow(memo))
        return; /* not remembered: the next search of this shape computes it again */
    entry *e = find(memo, key);
    if (e->bounds)
        return; /* already there */
    int *copy = malloc(sizeof(int) * (size_t)(u + 1));
    if (!copy)
        return;
    memcpy(copy, bounds, sizeof(int) * (size_t)(u + 1));
    memcpy(e->key, key, sizeof e->key);
    e->u = u;
    e->shards = shards;
    e->bounds = copy;
    memo->used++;
}

void plan_split_memo_counts(const plan_split_memo *memo, long *searched, long *reused)
{
    *searched = memo ? memo->searched : 0;
    *reused = memo ? memo->reused : 0;
}
