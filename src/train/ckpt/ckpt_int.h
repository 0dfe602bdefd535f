/* ckpt_int.h: pieces shared by the safetensors writer, reader and state file: CRC-32C and the
 * checksum's canonical form of a header. Internal. */
#ifndef COHORT_CKPT_INT_H
#define COHORT_CKPT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/checkpoint.h"

/* Stream buffer of st_save_stream and write buffer of atomic_file: what a streamed save holds
 * besides its caller's state (the memory estimate counts both). */
#define ST_STREAM_BUF ((size_t)1 << 20)
#define CKPT_ATOMIC_BUF ((size_t)1 << 20)

/* Largest header accepted (the reference implementation's limit). */
#define ST_MAX_HEADER 100000000ull

/* The header's metadata pairs (the checksum's included), in file order, for readers that look
 * many keys up (coh_st_meta_get is a linear search). */
size_t st_meta_count(const coh_st_file *f);
const coh_st_meta *st_meta_at(const coh_st_file *f, size_t i);

/* CRC-32C (Castagnoli) continued from crc (start with 0). */
uint32_t crc32c(uint32_t crc, const void *data, size_t n);

/* The checksum covers, in header order, each tensor (name, dtype, shape, data offsets), each
 * metadata pair except the checksum itself, and then the data bytes. These add one item. */
uint32_t st_sum_tensor(uint32_t crc, const char *name, coh_st_dtype dtype, int ndim,
                       const int64_t *shape, uint64_t begin, uint64_t end);
uint32_t st_sum_meta(uint32_t crc, const char *key, const char *value);

/* "crc32c:%08x" into buf (>= 16 bytes). */
void st_format_checksum(uint32_t crc, char *buf);

/* Bytes [at, at + n) of tensor i into buf; a streamed save calls it twice per chunk (the
 * checksum, then the file), in tensor order, and it must give the same bytes both times. */
typedef coh_status (*st_fill_fn)(void *ctx, size_t i, uint64_t at, void *buf, size_t n);
/* coh_st_save with the tensors' bytes from `fill` instead of their data pointers (ignored),
 * through one buffer of ST_STREAM_BUF: a file of any size in bounded memory. */
coh_status st_save_stream(const char *path, const coh_st_tensor *tensors, size_t ntensors,
                          const coh_st_meta *meta, size_t nmeta, st_fill_fn fill, void *ctx);

/* coh_st_read's checks: tensor `name` exists in f with this shape and is `dtype` or widens to
 * it (F16/BF16 to F32); *out is the tensor (NULL when missing). */
coh_status st_check_tensor(const coh_st_file *f, const char *name, coh_st_dtype dtype, int ndim,
                           const int64_t *shape, const coh_st_tensor **out);

/* coh_state_open's reading of an open file (`path` names it in messages): the state into *s,
 * and the trainer's keys (threads, micro_batch, grad_accum, seq) checked when present. */
coh_status ckpt_state_parse(const coh_st_file *f, const char *path, coh_train_state *s);

#endif
