/* checkpoint.h: safetensors files (write atomically, read with strict validation) and the
 * training-state companion file (optimizer state, step, RNG and data position). */
#ifndef COHORT_CHECKPOINT_H
#define COHORT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/data.h"
#include "cohort/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of the safetensors format that cohort reads and writes. */
typedef enum coh_st_dtype {
    COH_ST_F32 = 0,
    COH_ST_F16,
    COH_ST_BF16,
    COH_ST_F64,
    COH_ST_I64,
    COH_ST_I32,
    COH_ST_I16,
    COH_ST_I8,
    COH_ST_U8,
    COH_ST_BOOL,
    COH_ST_COUNT
} coh_st_dtype;

/* "F32", "BF16", ... (the format's names); bytes per element. */
const char *coh_st_dtype_name(coh_st_dtype d);
size_t coh_st_dtype_size(coh_st_dtype d);
/* Parse a format name ("F32"); COH_ERR_INVALID naming it and the valid names. */
coh_status coh_st_dtype_parse(const char *name, coh_st_dtype *out);

#define COH_ST_MAX_DIMS 8

/* One tensor to write, or one found in a file. `data` points at shape-product elements of
 * `dtype`, row major (C order), little-endian. */
typedef struct coh_st_tensor {
    const char *name;
    coh_st_dtype dtype;
    int ndim; /* 0 (a scalar) .. COH_ST_MAX_DIMS */
    int64_t shape[COH_ST_MAX_DIMS];
    const void *data;
    uint64_t nbytes; /* filled by the reader; ignored by the writer (derived from the shape) */
} coh_st_tensor;

/* One string pair of the header's "__metadata__". */
typedef struct coh_st_meta {
    const char *key;
    const char *value;
} coh_st_meta;

/* Metadata key holding "crc32c:XXXXXXXX" over the tensor table, the other metadata and the data
 * bytes; written by cohort, verified by the reader whenever present. */
#define COH_ST_CHECKSUM_KEY "cohort.checksum"

/* Write a safetensors file atomically: a temporary file in the same folder, fsync, rename over
 * `path`, fsync of the folder; on any failure the previous file at `path` is untouched and the
 * temporary removed. Tensors are stored in the given order without gaps; the header is padded
 * with spaces so data starts 8-byte aligned; a checksum entry is added to the metadata.
 * Errors: COH_ERR_INVALID (empty or duplicate names, bad shape, metadata key
 * "cohort.checksum", naming the tensor), COH_ERR_IO / COH_ERR_SYSTEM naming the file.
 * Thread-safe (saves of different paths may run at once). Hugging Face `transformers` expects
 * the metadata pair {"format", "pt"}. */
coh_status coh_st_save(const char *path, const coh_st_tensor *tensors, size_t ntensors,
                       const coh_st_meta *meta, size_t nmeta);

typedef struct coh_st_file coh_st_file;

/* Map and validate a whole safetensors file: header length, JSON, every entry's dtype, shape
 * and data_offsets (in range, size = product * dtype size, no overlap, no gaps), the checksum
 * when present. Errors: COH_ERR_INVALID with a message naming the file (and the tensor) for
 * any malformed or corrupt content; COH_ERR_NOT_FOUND / COH_ERR_IO for unreadable files.
 * An open file is read-only: any number of threads may query and read it at once. */
coh_status coh_st_open(const char *path, coh_st_file **out);
/* The same over bytes in memory (not copied: data must outlive the handle). */
coh_status coh_st_open_memory(const void *data, size_t size, const char *name, coh_st_file **out);
/* NULL-safe. */
void coh_st_close(coh_st_file *f);

/* Tensors in header order; each entry's data points into the mapping (valid until close). */
size_t coh_st_count(const coh_st_file *f);
const coh_st_tensor *coh_st_at(const coh_st_file *f, size_t i);
/* By name, or NULL. */
const coh_st_tensor *coh_st_find(const coh_st_file *f, const char *name);
/* A "__metadata__" value, or NULL. */
const char *coh_st_meta_get(const coh_st_file *f, const char *key);
/* Whether the file carried a cohort checksum (and so was verified). */
int coh_st_has_checksum(const coh_st_file *f);

/* Copy tensor `name` into dst, which holds a tensor of `dtype` and the given shape. F16 and BF16
 * tensors are converted when dtype is F32; otherwise the dtype must match. Errors:
 * COH_ERR_NOT_FOUND naming the tensor and file, COH_ERR_MISMATCH naming the stored and expected
 * dtype or shape. */
coh_status coh_st_read(const coh_st_file *f, const char *name, coh_st_dtype dtype, int ndim,
                       const int64_t *shape, void *dst);

/* ---- training state companion file ---------------------------------------------------------- */
/* A safetensors file whose metadata holds "cohort.format" = "train-state", "cohort.version" =
 * "1", the step, the RNG state words and the loader position, and whose tensors are whatever
 * the trainer passes (e.g. AdamW's m and v arenas); the checksum covers all of it. */
#define COH_STATE_RNG_WORDS 4

typedef struct coh_train_state {
    uint64_t step;                       /* optimizer steps taken */
    uint64_t rng[COH_STATE_RNG_WORDS];   /* the trainer's RNG state, opaque words */
    coh_loader_pos data;                 /* the training loader's position */
} coh_train_state;

/* Save atomically (as coh_st_save). `meta` adds the caller's own string pairs (keys must not
 * start with "cohort."). */
coh_status coh_state_save(const char *path, const coh_train_state *state,
                          const coh_st_tensor *tensors, size_t ntensors,
                          const coh_st_meta *meta, size_t nmeta);

/* Open a state file: validates it as coh_st_open does and parses the state; the returned file
 * gives the tensors (coh_st_read) and caller metadata. The trainer's own keys, when present,
 * are checked too: "threads" a whole number from 0, "micro_batch", "grad_accum" and "seq" from
 * 1, each at most INT_MAX. Errors: COH_ERR_INVALID naming the file and the missing or
 * malformed key and value (also for a safetensors file that is not a state file). */
coh_status coh_state_open(const char *path, coh_train_state *state, coh_st_file **out);

#ifdef __cplusplus
}
#endif
#endif
