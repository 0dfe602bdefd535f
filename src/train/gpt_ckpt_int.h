/* gpt_ckpt_int.h: checkpoint reading over an already opened safetensors file (for fuzzing). */
#ifndef COHORT_GPT_CKPT_INT_H
#define COHORT_GPT_CKPT_INT_H

#include "cohort/train_ckpt.h"

/* As coh_gpt_checkpoint_config and coh_gpt_load, on an open file; `path` names it in errors. */
coh_status gpt_config_from_file(const coh_st_file *f, const char *path, int heads_hint,
                                coh_gpt_config *out, char *tokenizer, size_t cap);
coh_status gpt_load_from_file(coh_gpt *g, const coh_st_file *f, const char *path);

#endif
