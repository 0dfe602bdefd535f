/* shard.h: the sharded checkpoint layout. Every rank writes the slices it holds (weights and
 * AdamW moments) to its own safetensors file as HF-named pieces: boxes of the whole model's HF
 * tensors in their own coordinates; the commit file at the checkpoint's path holds the config
 * and the index (every HF tensor, and its exp_avg and exp_avg_sq, to its pieces) and is written
 * last. Readers take any range of the whole model's arena from the pieces (or from a plain
 * weights/state pair), so any mesh reads only its slices. Internal. */
#ifndef COHORT_CKPT_SHARD_H
#define COHORT_CKPT_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/checkpoint.h"
#include "cohort/train.h"
#include "train/ckpt/commit.h"
#include "train/data/strmap.h"

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
/* The same for tensor i of c alone. */
coh_status ckpt_runs_add_tensor(ckpt_runs *rs, const coh_gpt_config *c, int i, int tp_rank,
                                size_t lb, size_t le, long long shift, int skip_rep);
void ckpt_runs_free(ckpt_runs *rs);

/* What a piece holds: the weights, or AdamW's exp_avg (m) or exp_avg_sq (v). */
typedef enum ckpt_what { CKPT_W, CKPT_M, CKPT_V } ckpt_what;

/* The whole model's HF tensors (tp 1): names, shapes, arena offsets and a name lookup. */
typedef struct ckpt_model {
    coh_gpt_config c;
    int n;
    coh_tensor_info *t;
    strmap names;
} ckpt_model;
coh_status ckpt_model_init(ckpt_model *m, const coh_gpt_config *c);
void ckpt_model_free(ckpt_model *m);
/* Tensor i as rows x cols (a 1-d tensor is one row). */
void ckpt_model_dims(const ckpt_model *m, int i, int64_t *rows, int64_t *cols);

/* A box of HF tensor `tensor`'s `what`: rows [r0, r1) and columns [c0, c1). */
typedef struct ckpt_box {
    int tensor;
    ckpt_what what;
    int64_t r0, r1, c0, c1;
} ckpt_box;

/* Longest piece name or box text written. */
#define CKPT_NAME_MAX 224
/* "r0:r1,c0:c1" (a 2-d tensor) or "c0:c1" (1-d). */
void ckpt_box_text(const ckpt_model *m, const ckpt_box *b, char *buf, size_t cap);
/* The piece's tensor name: "<hf name><state>" when the box is the whole tensor, else
 * "<hf name><state>[<box text>]"; <state> is "", ".exp_avg" or ".exp_avg_sq". */
void ckpt_piece_name(const ckpt_model *m, const ckpt_box *b, char *buf, size_t cap);
/* "<hf name><state>" (the index's key) into buf. */
void ckpt_state_key(const ckpt_model *m, int tensor, ckpt_what w, char *buf, size_t cap);
/* b->tensor, b->what from an index key. COH_ERR_INVALID naming it. */
coh_status ckpt_key_parse(const ckpt_model *m, const char *key, ckpt_box *b);
/* The box of b's tensor in `text` (ckpt_box_text's form, non-empty, inside the tensor).
 * COH_ERR_INVALID naming it. */
coh_status ckpt_box_parse(const ckpt_model *m, const char *text, ckpt_box *b);
/* A piece name in ckpt_piece_name's form (nothing else) into b. COH_ERR_INVALID. */
coh_status ckpt_piece_parse(const ckpt_model *m, const char *name, ckpt_box *b);

/* A piece as a writer holds it: its box, and where its rows lie in the rank's buffer (row
 * r0 + k at src + k * stride). */
typedef struct ckpt_piece {
    ckpt_box b;
    size_t src, stride;
} ckpt_piece;
typedef struct ckpt_pieces {
    ckpt_piece *p;
    size_t n, cap;
} ckpt_pieces;
/* The pieces of runs `rs` (in increasing arena order), appended as `what`: a run's part of a
 * tensor is at most a partial first row, whole rows and a partial last row, and a piece grows
 * by the rows that continue it (a tp shard's column block: one piece). COH_ERR_NOMEM. */
coh_status ckpt_pieces_add(ckpt_pieces *ps, const ckpt_model *m, const ckpt_runs *rs,
                           ckpt_what what);
void ckpt_pieces_free(ckpt_pieces *ps);

/* Bytes a save of a rank of model c (one shard's config) holds besides the model's state: the
 * stream and write buffers, one tensor's runs, its pieces (weights and moments, names and
 * header) and, on the rank that commits (counted for every rank: an upper bound), the index
 * of every piece of the checkpoint of a dp x pp x c->tp mesh. */
uint64_t ckpt_save_bytes(const coh_gpt_config *c, int dp, int pp);
/* The most pieces of one kind (weights, or moments) a rank of model c writes. */
uint64_t ckpt_pieces_bound(const coh_gpt_config *c);

/* "<path>.shard<tag>-<r>-of-<n>": the file of world rank r of n in the save tagged t. */
void ckpt_shard_name(char *b, size_t cap, const char *path, ckpt_tag t, int r, int n);
/* The commit file of the sharded layout (metadata "layout" = "shards"). */
int ckpt_is_sharded(const coh_st_file *f);

/* Check an open shard file `name` of step `step` (-1: any) of model m: every tensor is a piece
 * (a canonical name, a box inside its tensor, the box's shape, F32, or BF16 for weights) whose
 * box the metadata repeats under its name. COH_ERR_INVALID naming the file and the piece. */
coh_status ckpt_shard_check(const coh_st_file *f, const char *name, const ckpt_model *m,
                            long step);

typedef struct ckpt_src ckpt_src;
/* The source of checkpoint `path` whose commit (or weights) file f is open (borrowed): the
 * sharded layout's pieces, or the plain pair's weights and sf, its state (NULL: weights only).
 * f32_only refuses bf16 weights (a resume needs the master weights). The sharded layout of
 * arena ranges (before HF-named pieces) is refused naming it. */
coh_status ckpt_src_open(const coh_st_file *f, const char *path, const coh_st_file *sf,
                         int f32_only, ckpt_src **out);
/* The checkpoint's model (tp 1). */
const coh_gpt_config *ckpt_src_config(const ckpt_src *s);
/* Elements [whole, whole + len) of the whole arena's weights or moments into dst (f32).
 * COH_ERR_INVALID when the checkpoint does not hold all of them, naming the missing box. */
coh_status ckpt_src_read(ckpt_src *s, ckpt_what w, size_t whole, size_t len, float *dst);
/* ckpt_src_read (into host memory); every run into base + run.src, base in device memory
 * (a rank's arena or moments), staged through a bounded host buffer (dev_io.c). */
coh_status ckpt_src_read_runs(ckpt_src *s, ckpt_what w, const ckpt_runs *rs, float *base);
void ckpt_src_close(ckpt_src *s); /* NULL-safe */

#endif
