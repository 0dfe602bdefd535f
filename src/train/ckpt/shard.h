/* shard.h: the sharded checkpoint layout. Every rank writes the slices it holds (weights and
 * AdamW moments, as ranges of the whole model's arena) to its own file; the commit file at the
 * checkpoint's path holds the config and an index of which file holds which ranges, and is
 * written last. Readers take any range of the whole model from the pieces (or from a plain
 * weights/state pair), so any mesh reads only its slices. Internal. */
#ifndef COHORT_CKPT_SHARD_H
#define COHORT_CKPT_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/checkpoint.h"
#include "cohort/train.h"

/* One contiguous run: `len` elements at `src` of a rank's buffer (its arena or its optimizer's
 * back-to-back ranges) are elements [whole, whole + len) of the whole model's arena. */
typedef struct ckpt_run {
    size_t src, whole, len;
} ckpt_run;
typedef struct ckpt_runs {
    ckpt_run *r;
    size_t n, cap;
} ckpt_runs;

/* Append the runs of local arena range [lb, le) of tensor-parallel shard tp_rank of c (the whole
 * arena when c->tp <= 1), src = local offset + shift, adjacent runs merged. skip_rep leaves out
 * the replicated tensors (a shard other than the first does not write them) and the padding is
 * never in a run. COH_ERR_NOMEM. */
coh_status ckpt_runs_add(ckpt_runs *rs, const coh_gpt_config *c, int tp_rank, size_t lb,
                         size_t le, long long shift, int skip_rep);
void ckpt_runs_free(ckpt_runs *rs);
/* Bytes a save of a rank of model c (one shard's config) holds besides the model's state: the
 * stream and write buffers, its runs' lists (weights and moments) and, on the rank that
 * commits (counted for every rank: an upper bound), the index of the `world` ranks' lists. */
uint64_t ckpt_save_bytes(const coh_gpt_config *c, int world);

/* "<path>.shard<step>-<r>-of-<n>": the file of world rank r of n. */
void ckpt_shard_name(char *b, size_t cap, const char *path, long step, int r, int n);
/* The commit file of the sharded layout (metadata "layout" = "shards"). */
int ckpt_is_sharded(const coh_st_file *f);

typedef enum ckpt_what { CKPT_W, CKPT_M, CKPT_V } ckpt_what;

/* What a shard file holds: its ranges of weights (w, kw x 2) and of moments (m, km x 2), sorted
 * and checked inside nparams and non-overlapping, and their tensors. */
typedef struct ckpt_shard {
    int64_t *w, *m; /* begin, end; the element offset of each range in the file's tensor */
    int64_t *woff, *moff;
    int64_t kw, km;
    const coh_st_tensor *weights, *adam_m, *adam_v;
} ckpt_shard;
/* Parse an open shard file `name` of step `step` (-1: any). COH_ERR_INVALID naming the file and
 * what is wrong. */
coh_status ckpt_shard_parse(const coh_st_file *f, const char *name, size_t nparams, long step,
                            ckpt_shard *out);
void ckpt_shard_free(ckpt_shard *s);

typedef struct ckpt_src ckpt_src;
/* The source of checkpoint `path` whose commit (or weights) file f is open (borrowed): the
 * sharded layout's pieces, or the plain pair's weights and sf, its state (NULL: weights only).
 * f32_only refuses bf16 weights (a resume needs the master weights). */
coh_status ckpt_src_open(const coh_st_file *f, const char *path, const coh_st_file *sf,
                         int f32_only, ckpt_src **out);
/* The checkpoint's model (tp 1). */
const coh_gpt_config *ckpt_src_config(const ckpt_src *s);
/* Elements [whole, whole + len) of the whole arena's weights or moments into dst (f32).
 * COH_ERR_INVALID when the checkpoint does not hold all of them, naming the range. */
coh_status ckpt_src_read(ckpt_src *s, ckpt_what w, size_t whole, size_t len, float *dst);
/* Every run into base + run.src. */
coh_status ckpt_src_read_runs(ckpt_src *s, ckpt_what w, const ckpt_runs *rs, float *base);
void ckpt_src_close(ckpt_src *s); /* NULL-safe */

#endif
