/* dev_io.h: checkpoint tensors between device memory and files through the backend's copies
 * (dev_io.c). Internal. */
#ifndef COHORT_CKPT_DEV_IO_H
#define COHORT_CKPT_DEV_IO_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/checkpoint.h"

/* coh_st_save of tensors whose data are f32 device memory: F32 tensors as they are, BF16 ones
 * rounded to nearest even on the way, streamed through bounded host buffers. */
coh_status ckpt_save_device(const char *path, const coh_st_tensor *tensors, size_t ntensors,
                            const coh_st_meta *meta, size_t nmeta);
/* coh_st_read of tensor `name` as F32 into device memory dst (F16/BF16 widened). */
coh_status ckpt_read_device(const coh_st_file *f, const char *name, int ndim,
                            const int64_t *shape, float *dst);
/* coh_state_save of tensors in device memory (state.c). */
coh_status ckpt_state_save_device(const char *path, const coh_train_state *state,
                                  const coh_st_tensor *tensors, size_t ntensors,
                                  const coh_st_meta *meta, size_t nmeta);
/* n floats of device memory src into host buf: as they are, or (bf16) rounded to n bf16. */
void ckpt_from_device(void *buf, const float *src, size_t n, int bf16);
/* f32 -> bf16, nearest even, on the host (the CPU backend's rounding). */
void ckpt_round_bf16(uint16_t *dst, const float *src, size_t n);

#endif
