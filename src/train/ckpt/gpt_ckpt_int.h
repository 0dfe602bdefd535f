/* gpt_ckpt_int.h: checkpoint reading over an already opened safetensors file (for fuzzing), and
 * the weights' dtype for the trainers' checkpoints. */
#ifndef COHORT_GPT_CKPT_INT_H
#define COHORT_GPT_CKPT_INT_H

#include "cohort/train_ckpt.h"
#include "train/ckpt/commit.h"

/* As coh_gpt_checkpoint_config and coh_gpt_load, on an open file; `path` names it in errors. */
coh_status gpt_config_from_file(const coh_st_file *f, const char *path, int heads_hint,
                                coh_gpt_config *out, char *tokenizer, size_t cap);
coh_status gpt_load_from_file(coh_gpt *g, const coh_st_file *f, const char *path);
/* COH_ERR_INVALID naming the file when its weights are not fp32 (--save-dtype bf16): a resume
 * needs the master weights. */
coh_status gpt_check_resumable(const coh_st_file *f, const char *path);
/* The weights file's metadata (format, the config, step, tokenizer and, for a commit (its tag),
 * the state_suffix naming its save's state file): every writer of an HF file uses it, so that
 * files of the same weights are byte-identical. Returns the count of m->meta. */
typedef struct gpt_meta_text {
    char nums[6][24], suffix[48];
    coh_st_meta meta[9];
} gpt_meta_text;
size_t gpt_weights_meta(const coh_gpt_config *c, const char *tokenizer, long step,
                        const ckpt_tag *commit, gpt_meta_text *m);

/* The state file's metadata besides the step and loader position: the thread count (which
 * --deterministic checks) and the batch split of the run (micro_batch, grad_accum, seq), so
 * that a resume can name the flag that changed. Returns the count of m->meta. */
typedef struct gpt_state_meta_text {
    char nums[4][24];
    coh_st_meta meta[4];
} gpt_state_meta_text;
size_t gpt_state_meta(const coh_trainer_config *c, int threads, gpt_state_meta_text *m);

/* The weights file of a checkpoint's commit: coh_gpt_save_arena_dtype (F32, or BF16 when
 * `bf16`) of params in device memory (a model's arena) at the tag's step, with metadata
 * "state_suffix" naming the save's state file (ckpt_state_name). Written last: its rename
 * commits the checkpoint. */
coh_status gpt_save_commit(const coh_gpt_config *c, const float *params, const char *path,
                           const char *tokenizer, ckpt_tag tag, int bf16);
/* The state file that the open weights file `f` of checkpoint `path` names (its "state_suffix";
 * "<path>.state" for the older layout without one). */
coh_status gpt_state_path_of(const coh_st_file *f, const char *path, char *buf, size_t cap);

#endif
