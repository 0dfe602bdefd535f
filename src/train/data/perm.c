/* perm.c: a Feistel-network permutation of 0..n-1 with cycle walking. */
#include "cohort/train.h"
#include "train/data/perm.h"

uint64_t perm_mix64(uint64_t x)
{
    return coh_splitmix64(&x);
}

void perm_init(perm *p, uint64_t n, uint64_t seed, uint64_t epoch)
{
    p->n = n;
    p->half_bits = 1;
    while (p->half_bits < 32 && ((uint64_t)1 << (2 * p->half_bits)) < n)
        p->half_bits++;
    p->half_mask = ((uint64_t)1 << p->half_bits) - 1;
    uint64_t k = perm_mix64(seed ^ perm_mix64(epoch + 0x5EEDull));
    for (int r = 0; r < PERM_ROUNDS; r++) {
        k = perm_mix64(k + (uint64_t)r);
        p->keys[r] = k;
    }
}

static uint64_t feistel(const perm *p, uint64_t x)
{
    uint64_t left = x >> p->half_bits, right = x & p->half_mask;
    for (int r = 0; r < PERM_ROUNDS; r++) {
        uint64_t f = perm_mix64(right ^ p->keys[r]) & p->half_mask;
        uint64_t t = left ^ f;
        left = right;
        right = t;
    }
    return left << p->half_bits | right;
}

uint64_t perm_apply(const perm *p, uint64_t x)
{
    /* The network permutes a power-of-four range; walking the cycle until the value falls in
     * 0..n-1 restricts it to a permutation of that range (fewer than 4 steps on average). */
    do
        x = feistel(p, x);
    while (x >= p->n);
    return x;
}
