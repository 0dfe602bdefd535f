/* data.h: tokenizers (byte-level, GPT-2 BPE), llm.c token shards, and the batch loader that
 * gives each data-parallel rank its disjoint rows of every global batch. */
#ifndef COHORT_DATA_H
#define COHORT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tokens ------------------------------------------------------------------------------- */

/* A growable array of token ids. init/release on a caller-owned struct; release frees ids and
 * leaves an empty array. */
typedef struct coh_tokens {
    int32_t *ids;
    size_t count;
    size_t cap;
} coh_tokens;

void coh_tokens_init(coh_tokens *v);
void coh_tokens_release(coh_tokens *v); /* NULL-safe */
/* Append one id. Errors: COH_ERR_NOMEM. */
coh_status coh_tokens_push(coh_tokens *v, int32_t id);

/* ---- tokenizers --------------------------------------------------------------------------- */

typedef struct coh_tokenizer coh_tokenizer;

/* Byte-level tokenizer: token id = byte value, 256 ids, no end-of-text token. */
coh_status coh_tokenizer_byte_create(coh_tokenizer **out);

/* GPT-2 byte-level BPE from its two tables: `encoder_json` (token string -> id, in GPT-2's
 * printable byte alphabet) and `vocab_bpe` (merges, first line a version comment, one
 * "left right" pair per line, rank = order). Errors name the file and the line or token:
 * COH_ERR_NOT_FOUND / COH_ERR_IO for unreadable files, COH_ERR_INVALID for bad content,
 * COH_ERR_NOMEM. */
coh_status coh_tokenizer_gpt2_create(const char *encoder_json, const char *vocab_bpe,
                                     coh_tokenizer **out);

/* The same from tables already in memory (used by the fuzz targets; names appear in errors). */
coh_status coh_tokenizer_gpt2_create_from_memory(const char *encoder_json, size_t encoder_len,
                                                 const char *vocab_bpe, size_t vocab_len,
                                                 coh_tokenizer **out);

/* NULL-safe. */
void coh_tokenizer_destroy(coh_tokenizer *t);

/* "byte" or "gpt2". */
const char *coh_tokenizer_name(const coh_tokenizer *t);

/* Number of ids (256 for byte, 50257 for GPT-2's tables): every id is < this. */
size_t coh_tokenizer_vocab_size(const coh_tokenizer *t);

/* The end-of-text id (50256 for GPT-2, "<|endoftext|>" in encoder.json), or -1 when the
 * tokenizer has none (byte). */
int32_t coh_tokenizer_eot(const coh_tokenizer *t);

/* Encode text[0..len) and append the ids to *out. Any bytes are accepted: bytes that are not
 * valid UTF-8 are pre-split as single non-letter, non-number characters, so
 * decode(encode(x)) == x for every x. "<|endoftext|>" in the text is ordinary text, as in
 * GPT-2's encode(). Not thread-safe for one tokenizer (it keeps a cache); use one tokenizer per
 * thread. Errors: COH_ERR_NOMEM. */
coh_status coh_tokenizer_encode(coh_tokenizer *t, const char *text, size_t len, coh_tokens *out);

/* The bytes of one token (not NUL-terminated), valid until the tokenizer is destroyed; for
 * streaming decode. Errors: COH_ERR_INVALID naming the id and the valid range. */
coh_status coh_tokenizer_token_bytes(const coh_tokenizer *t, int32_t id, const char **bytes,
                                     size_t *len);

/* Decode ids into a new NUL-terminated buffer (*text, caller frees; *len excludes the NUL).
 * Errors: COH_ERR_INVALID for an id out of range, COH_ERR_NOMEM. Thread-safe. */
coh_status coh_tokenizer_decode(const coh_tokenizer *t, const int32_t *ids, size_t n,
                                char **text, size_t *len);

/* ---- token shards (llm.c .bin format) ----------------------------------------------------- */
/* A shard is 256 little-endian int32 (magic 20240520, version 1, token count, zeros) followed
 * by `count` little-endian uint16 tokens. */
#define COH_SHARD_MAGIC 20240520
#define COH_SHARD_VERSION 1
#define COH_SHARD_HEADER_BYTES 1024

/* Validate a shard held in memory (data[0..size), e.g. a mapped file) and return its token
 * count. `name` (a path) appears in every error. Errors: COH_ERR_INVALID for a short header,
 * wrong magic, unsupported version, negative count, or a size that disagrees with the count
 * (truncated or trailing bytes). */
coh_status coh_shard_check(const void *data, size_t size, const char *name, uint64_t *ntokens);

/* Write a whole shard atomically (temporary file in the same folder, fsync, rename, fsync of
 * the folder). Ids must fit uint16: an id outside 0..65535 is refused (COH_ERR_INVALID naming
 * it and its position) and no file is written. Errors: COH_ERR_IO / COH_ERR_SYSTEM. */
coh_status coh_shard_write(const char *path, const int32_t *ids, size_t n);

/* ---- batch loader ------------------------------------------------------------------------- */
/* The data set is the list of windows of T+1 tokens of every shard in the given order: shard f
 * with n tokens holds floor((n-1)/T) windows, window w covers tokens [w*T, w*T+T] (inputs are
 * the first T, targets the last T). An epoch visits the windows in file order (shuffle off) or
 * in a seeded pseudo-random permutation that depends only on (seed, epoch, window count).
 * Global batch g of an epoch is rows g*R*B .. (g+1)*R*B-1 of that order (R = world, B = batch),
 * and rank r takes rows r*B .. (r+1)*B-1 of it; so R ranks together see exactly what one rank
 * with batch R*B sees. The windows left over after the last full global batch of an epoch are
 * not used in that epoch. */

typedef enum coh_loader_mode {
    COH_LOADER_TRAIN = 0, /* epochs repeat forever; shuffle as configured */
    COH_LOADER_EVAL = 1   /* file order, one pass: the first N batches, then COH_ERR_NOT_FOUND */
} coh_loader_mode;

typedef struct coh_loader_config {
    const char *const *paths; /* shard files; an entry with * ? [ is expanded as a glob (sorted) */
    size_t npaths;
    int batch;          /* B: rows per rank per step, >= 1 */
    int seq;            /* T: tokens per row, >= 1 */
    int rank, world;    /* data-parallel rank and size: 0 <= rank < world */
    int shuffle;        /* 0 off, 1 on (ignored in eval mode) */
    uint64_t seed;      /* shuffle seed */
    coh_loader_mode mode;
    int64_t vocab;      /* > 0: refuse shards holding an id >= vocab (checked at open) */
} coh_loader_config;

/* Where a loader is: enough to continue exactly. `windows` and `global_rows` describe the data
 * set and batch shape it belongs to, so a resume with other data is refused, and one with
 * another R * B continues at the same row of the epoch's order (refused when that row does not
 * begin one of its batches). */
typedef struct coh_loader_pos {
    uint64_t epoch;       /* epochs completed */
    uint64_t step;        /* global batches taken in this epoch */
    uint64_t seed;        /* shuffle seed (the permutation state is derived from seed, epoch) */
    uint64_t windows;     /* windows in the data set */
    uint64_t global_rows; /* R * B */
} coh_loader_pos;

typedef struct coh_loader coh_loader;

/* Open (memory-map) and validate every shard. Errors: COH_ERR_INVALID for a bad config (naming
 * the field and value), a bad shard (naming the file), a glob matching nothing, or too few
 * tokens for one global batch; COH_ERR_NOT_FOUND / COH_ERR_IO for unreadable files. */
coh_status coh_loader_create(const coh_loader_config *cfg, coh_loader **out);

/* Each file a shard entry names, in the loader's order: the entry itself, or with * ? [ the files
 * its glob matches, sorted; each(ctx, file) until it returns an error, which is returned.
 * COH_ERR_NOT_FOUND for a glob matching nothing or a folder in it that cannot be read. */
coh_status coh_shard_files(const char *entry, coh_status (*each)(void *ctx, const char *file),
                           void *ctx);

/* The largest token id in the shards (paths as coh_loader_config's, globs expanded), -1 when
 * they hold no token: what the data needs of a model's vocabulary, and which tokenizer made it
 * (below 256: bytes). Errors: those of coh_loader_create's opening and validation. */
coh_status coh_shards_max_id(const char *const *paths, size_t n, int32_t *max_id);

/* NULL-safe; unmaps the shards. */
void coh_loader_destroy(coh_loader *l);

/* Fill this rank's rows of the next global batch: inputs and targets are (B, T) int32, row
 * major. Errors: COH_ERR_NOT_FOUND in eval mode once the pass is over (the message says how
 * many batches the data holds). Not thread-safe for one loader. */
coh_status coh_loader_next(coh_loader *l, int32_t *inputs, int32_t *targets);

/* Global batches per epoch (floor(windows / (R*B))), windows and tokens of the data set. */
uint64_t coh_loader_steps_per_epoch(const coh_loader *l);
uint64_t coh_loader_windows(const coh_loader *l);
uint64_t coh_loader_tokens(const coh_loader *l);
/* Number of shard files opened. */
size_t coh_loader_shards(const coh_loader *l);

/* The position before the next call of coh_loader_next. */
void coh_loader_position(const coh_loader *l, coh_loader_pos *pos);

/* Continue from a saved position (adopting its seed), saved with this R*B or another one (the
 * same row of the epoch; the caller checks that the optimizer's batch is the same). Errors:
 * COH_ERR_MISMATCH when the data set (windows) differs, or when the saved row does not begin a
 * batch of this R*B, naming the values; COH_ERR_INVALID for a step beyond the epoch. */
coh_status coh_loader_seek(coh_loader *l, const coh_loader_pos *pos);

/* Back to epoch 0, step 0 (for repeated evaluation passes). */
void coh_loader_rewind(coh_loader *l);

#ifdef __cplusplus
}
#endif
#endif
