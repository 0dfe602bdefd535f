/* clip.h: the one gradient clipper of every trainer: a rank's ranges summed by the backend, the
 * sum completed over the ranks that split the parameters, every range scaled alike. */
#ifndef COHORT_TRAIN_CLIP_H
#define COHORT_TRAIN_CLIP_H

#include <stddef.h>

#include "train/backend/backend.h"

/* The ranges [b[k], e[k]) of `grads` a rank holds, in the order their squares are summed; a
 * range with counted[k] 0 is a copy another rank counts (a tied embedding, a tensor a tensor-
 * parallel shard holds whole): scaled, never summed. counted NULL: every range counts. */
typedef struct coh_clip_ranges {
    const size_t *b, *e;
    const unsigned char *counted;
    int n;
} coh_clip_ranges;

/* Completes this rank's sum of squares into the whole model's (in place), over the ranks that
 * hold the other parts; NULL when the rank holds every parameter. */
typedef coh_status (*coh_clip_reduce)(void *ctx, double *sum);

/* The global L2 norm of the gradients (each counted range's squares summed by the backend's
 * fixed-order sumsq, in range order, then completed by `reduce`); above max_norm > 0, every
 * range scaled by max_norm / (norm + 1e-6). Returns the norm before clipping; *err the reduce's
 * failure (the gradients then untouched). */
double coh_clip_grads(const coh_backend *be, float *grads, const coh_clip_ranges *r,
                      coh_clip_reduce reduce, void *ctx, double max_norm, coh_status *err);

#endif
