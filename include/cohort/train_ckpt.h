/* train_ckpt.h: GPT checkpoints as Hugging Face GPT2LMHeadModel safetensors, and the training
 * state (AdamW moments, step, data position) beside them, for save and exact resume. */
#ifndef COHORT_TRAIN_CKPT_H
#define COHORT_TRAIN_CKPT_H

#include "cohort/checkpoint.h"
#include "cohort/data.h"
#include "cohort/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Write the weights to `path` (atomically) with HF names and [in, out] layouts, metadata
 * "format" = "pt" (so transformers loads it), the config (n_layer, n_head, n_embd, vocab_size,
 * n_positions), `tokenizer` ("byte"/"gpt2", may be NULL) and `step`. */
coh_status coh_gpt_save(coh_gpt *g, const char *path, const char *tokenizer, long step);
/* The same for parameters held outside a model (a full arena of coh_gpt_param_count(c) floats,
 * e.g. a pipeline's stages gathered). */
coh_status coh_gpt_save_arena(const coh_gpt_config *c, const float *params, const char *path,
                              const char *tokenizer, long step);
/* The same with the tensors in `dtype`: COH_ST_F32 (the master weights, what the others write)
 * or COH_ST_BF16 (each value rounded to the nearest bf16, ties to even, NaN kept NaN: half the
 * bytes, for inference; transformers loads it, coh_gpt_load widens it, and a training resume
 * refuses it). COH_ERR_INVALID for another dtype. */
coh_status coh_gpt_save_arena_dtype(const coh_gpt_config *c, const float *params,
                                    const char *path, const char *tokenizer, long step,
                                    coh_st_dtype dtype);

/* The config of a checkpoint: from its metadata when cohort wrote it, otherwise inferred from
 * the tensor shapes (GPT-2 files from elsewhere), heads = dim / 64 unless `heads_hint` > 0.
 * `tokenizer` (cap bytes, may be NULL) receives the metadata's tokenizer or "". Errors:
 * COH_ERR_INVALID naming the file and what is missing or inconsistent. */
coh_status coh_gpt_checkpoint_config(const char *path, int heads_hint, coh_gpt_config *out,
                                     char *tokenizer, size_t cap);

/* Copy every tensor of the checkpoint into the model (shapes must match its config). Errors:
 * as coh_st_open and coh_st_read, naming the file and tensor. */
coh_status coh_gpt_load(coh_gpt *g, const char *path);

/* Save the training state to `<path>.state<step>`, then the weights to `path`, whose metadata
 * "state_suffix" names that state file: the weights' atomic rename commits the checkpoint, and
 * only then are the other steps' state files removed, so a crash at any moment leaves the
 * previous or the new checkpoint whole. The weights are bf16 when the trainer's config says
 * save_bf16 (then the checkpoint cannot be resumed). */
coh_status coh_trainer_save(coh_trainer *t, const char *path, const char *tokenizer,
                            const coh_loader_pos *data, int threads);

/* The state file of checkpoint `path`: the one its weights' "state_suffix" names, or
 * `<path>.state` for a checkpoint written before the suffix. Errors: as coh_st_open. */
coh_status coh_ckpt_state_path(const char *path, char *buf, size_t cap);

/* 1 when `name`, a file name in checkpoint `path`'s folder, is one that a save of `path` writes
 * or removes: `path`'s own name, or that name followed by a state, shard or temporary suffix
 * (".state12", ".shard12-0-of-2", ".tmp.345"). */
int coh_ckpt_file_of(const char *path, const char *name);

/* Write checkpoint `ckpt`'s weights to `out` as the plain Hugging Face GPT-2 file (HF names,
 * the metadata coh_gpt_save_arena_dtype writes, no state file named) in `dtype` (COH_ST_F32 or
 * COH_ST_BF16, rounded as --save-dtype bf16 rounds): byte-identical to that function's file of
 * the same weights, from either layout (a sharded checkpoint's pieces read range by range).
 * Streamed tensor by tensor through a 1 MiB buffer; the checkpoint is mapped,
 * not read into memory. Errors: as coh_st_open, and COH_ERR_INVALID naming a missing or
 * misshapen tensor or another dtype. */
coh_status coh_ckpt_export(const char *ckpt, const char *out, coh_st_dtype dtype);

/* Restore weights, AdamW moments and step from `path` and its state file; *data receives the
 * loader position and *threads the thread count the run used (0 when unknown). Errors:
 * COH_ERR_INVALID / COH_ERR_MISMATCH naming the file for corrupt, truncated, mismatched or
 * torn checkpoints, and COH_ERR_INVALID for weights saved in bf16 (save_bf16: the fp32 master
 * weights are not in them; --init-from reads them as weights). The trainer is unchanged on error only for the weights' shape checks;
 * callers should discard it on any error. */
coh_status coh_trainer_resume(coh_trainer *t, const char *path, coh_loader_pos *data,
                              int *threads);

#ifdef __cplusplus
}
#endif
#endif
