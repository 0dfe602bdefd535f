/* gpt_ckpt_int.h: checkpoint reading over an already opened safetensors file (for fuzzing), and
 * the weights' dtype for the trainers' checkpoints. */
#ifndef COHORT_GPT_CKPT_INT_H
#define COHORT_GPT_CKPT_INT_H

#include "cohort/train_ckpt.h"

/* As coh_gpt_checkpoint_config and coh_gpt_load, on an open file; `path` names it in errors. */
coh_status gpt_config_from_file(const coh_st_file *f, const char *path, int heads_hint,
                                coh_gpt_config *out, char *tokenizer, size_t cap);
coh_status gpt_load_from_file(coh_gpt *g, const coh_st_file *f, const char *path);
/* COH_ERR_INVALID naming the file when its weights are not fp32 (--save-dtype bf16): a resume
 * needs the master weights. */
coh_status gpt_check_resumable(const coh_st_file *f, const char *path);
/* coh_gpt_save in the dtype the trainer's config asks for (save_bf16). */
coh_status gpt_save_trainer_weights(const coh_trainer_config *tc, coh_gpt *g, const char *path,
                                    const char *tokenizer, long step);

#endif
