/* perm.h: a seeded pseudo-random permutation of 0..n-1 evaluated one index at a time (a Feistel
 * network with cycle walking), so shuffling needs no memory and resuming needs only the seed and
 * the epoch. Internal. */
#ifndef COHORT_DATA_PERM_H
#define COHORT_DATA_PERM_H

#include <stdint.h>

#define PERM_ROUNDS 6

typedef struct perm {
    uint64_t n;
    unsigned half_bits;        /* the network permutes 0 .. 4^half_bits - 1 >= n */
    uint64_t half_mask;
    uint64_t keys[PERM_ROUNDS];
} perm;

/* A permutation of 0..n-1 (n >= 1) that depends only on (n, seed, epoch). */
void perm_init(perm *p, uint64_t n, uint64_t seed, uint64_t epoch);
/* Image of x (x < n). */
uint64_t perm_apply(const perm *p, uint64_t x);
/* The splitmix64 finalizer: a good 64-bit mixing function. */
uint64_t perm_mix64(uint64_t x);

#endif
