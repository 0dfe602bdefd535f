/* state.c: the training-state companion file: a safetensors file whose metadata carries the
 * step, RNG words and loader position, and whose tensors are the trainer's (optimizer state). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/ckpt/ckpt_int.h"
#include "train/ckpt/dev_io.h"

#define STATE_FORMAT "train-state"
#define STATE_VERSION "1"
#define STATE_KEYS 10 /* format, version, step, rng, 5 loader fields, spare */

typedef struct state_text {
    char step[24], rng[COH_STATE_RNG_WORDS * 17 + 1], epoch[24], dstep[24], seed[24],
        windows[24], rows[24];
} state_text;

static size_t state_meta(const coh_train_state *s, state_text *t, coh_st_meta *m)
{
    snprintf(t->step, sizeof t->step, "%" PRIu64, s->step);
    size_t n = 0;
    for (int i = 0; i < COH_STATE_RNG_WORDS; i++)
        n += (size_t)snprintf(t->rng + n, sizeof t->rng - n, "%s%016" PRIx64, i ? "," : "",
                              s->rng[i]);
    snprintf(t->epoch, sizeof t->epoch, "%" PRIu64, s->data.epoch);
    snprintf(t->dstep, sizeof t->dstep, "%" PRIu64, s->data.step);
    snprintf(t->seed, sizeof t->seed, "%" PRIu64, s->data.seed);
    snprintf(t->windows, sizeof t->windows, "%" PRIu64, s->data.windows);
    snprintf(t->rows, sizeof t->rows, "%" PRIu64, s->data.global_rows);
    const coh_st_meta fields[] = {
        {"cohort.format", STATE_FORMAT},     {"cohort.version", STATE_VERSION},
        {"cohort.step", t->step},            {"cohort.rng", t->rng},
        {"cohort.data.epoch", t->epoch},     {"cohort.data.step", t->dstep},
        {"cohort.data.seed", t->seed},       {"cohort.data.windows", t->windows},
        {"cohort.data.global_rows", t->rows},
    };
    memcpy(m, fields, sizeof fields);
    return sizeof fields / sizeof fields[0];
}

static coh_status state_save(const char *path, const coh_train_state *state,
                             const coh_st_tensor *tensors, size_t ntensors,
                             const coh_st_meta *meta, size_t nmeta, int device)
{
    for (size_t i = 0; i < nmeta; i++)
        if (meta[i].key && !strncmp(meta[i].key, "cohort.", 7))
            return coh_errf(COH_ERR_INVALID, "metadata key '%s' is reserved (keys starting "
                            "with 'cohort.' belong to the state file)", meta[i].key);
    coh_st_meta *all = malloc((STATE_KEYS + nmeta) * sizeof *all);
    if (!all)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    state_text text;
    size_t n = state_meta(state, &text, all);
    if (nmeta)
        memcpy(all + n, meta, nmeta * sizeof *meta);
    coh_status st = device ? ckpt_save_device(path, tensors, ntensors, all, n + nmeta)
                           : coh_st_save(path, tensors, ntensors, all, n + nmeta);
    free(all);
    return st;
}

coh_status coh_state_save(const char *path, const coh_train_state *state,
                          const coh_st_tensor *tensors, size_t ntensors,
                          const coh_st_meta *meta, size_t nmeta)
{
    return state_save(path, state, tensors, ntensors, meta, nmeta, 0);
}

coh_status ckpt_state_save_device(const char *path, const coh_train_state *state,
                                  const coh_st_tensor *tensors, size_t ntensors,
                                  const coh_st_meta *meta, size_t nmeta)
{
    return state_save(path, state, tensors, ntensors, meta, nmeta, 1);
}

static coh_status get_u64(const coh_st_file *f, const char *path, const char *key, int base,
                          uint64_t *out)
{
    const char *v = coh_st_meta_get(f, key);
    if (!v)
        return coh_errf(COH_ERR_INVALID, "'%s': not a cohort state file: no '%s' in its metadata",
                        path, key);
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, base);
    if (errno || end == v || *end || v[0] == '-' || v[0] == '+' || v[0] == ' ')
        return coh_errf(COH_ERR_INVALID, "'%s': invalid '%s' value '%s'", path, key, v);
    *out = x;
    return COH_OK;
}

static coh_status parse_rng(const coh_st_file *f, const char *path, uint64_t *rng)
{
    const char *v = coh_st_meta_get(f, "cohort.rng");
    if (!v)
        return coh_errf(COH_ERR_INVALID, "'%s': not a cohort state file: no 'cohort.rng'", path);
    const char *p = v;
    for (int i = 0; i < COH_STATE_RNG_WORDS; i++) {
        char word[17];
        size_t len = strcspn(p, ",");
        if (len != 16 || strspn(p, "0123456789abcdef") != 16 || (i + 1 < COH_STATE_RNG_WORDS
                                                                  ? p[16] != ',' : p[16] != 0))
            return coh_errf(COH_ERR_INVALID, "'%s': invalid 'cohort.rng' value '%s': expected %d "
                            "comma-separated 16-digit hex words", path, v, COH_STATE_RNG_WORDS);
        memcpy(word, p, 16);
        word[16] = 0;
        rng[i] = strtoull(word, NULL, 16);
        p += 17;
    }
    return COH_OK;
}

/* The trainer's own keys (gpt_state_meta): absent in older files, else a whole number from `lo`
 * to INT_MAX, so that its readers (resume's checks, which divide and multiply by them) take it
 * as written. */
static coh_status check_trainer_key(const coh_st_file *f, const char *path, const char *key,
                                    long lo)
{
    const char *v = coh_st_meta_get(f, key);
    if (!v)
        return COH_OK;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || v[0] < '0' || v[0] > '9' || x < lo || x > INT_MAX)
        return coh_errf(COH_ERR_INVALID, "'%s': invalid '%s' value '%s': expected a whole number "
                        "from %ld to %d", path, key, v, lo, INT_MAX);
    return COH_OK;
}

coh_status ckpt_state_parse(const coh_st_file *f, const char *path, coh_train_state *s)
{
    const char *format = coh_st_meta_get(f, "cohort.format");
    const char *version = coh_st_meta_get(f, "cohort.version");
    if (!format || strcmp(format, STATE_FORMAT))
        return coh_errf(COH_ERR_INVALID, "'%s': not a cohort state file (metadata "
                        "'cohort.format' is '%s', expected '%s')", path, format ? format : "",
                        STATE_FORMAT);
    if (!version || strcmp(version, STATE_VERSION))
        return coh_errf(COH_ERR_INVALID, "'%s': unsupported state file version '%s' (supported: "
                        "%s)", path, version ? version : "", STATE_VERSION);
    if (!coh_st_has_checksum(f))
        return coh_errf(COH_ERR_INVALID, "'%s': the state file has no '%s'", path,
                        COH_ST_CHECKSUM_KEY);
    coh_status st = get_u64(f, path, "cohort.step", 10, &s->step);
    if (st == COH_OK)
        st = parse_rng(f, path, s->rng);
    if (st == COH_OK)
        st = get_u64(f, path, "cohort.data.epoch", 10, &s->data.epoch);
    if (st == COH_OK)
        st = get_u64(f, path, "cohort.data.step", 10, &s->data.step);
    if (st == COH_OK)
        st = get_u64(f, path, "cohort.data.seed", 10, &s->data.seed);
    if (st == COH_OK)
        st = get_u64(f, path, "cohort.data.windows", 10, &s->data.windows);
    if (st == COH_OK)
        st = get_u64(f, path, "cohort.data.global_rows", 10, &s->data.global_rows);
    /* threads may be 0: a trainer that did not know its count */
    if (st == COH_OK)
        st = check_trainer_key(f, path, "threads", 0);
    if (st == COH_OK)
        st = check_trainer_key(f, path, "micro_batch", 1);
    if (st == COH_OK)
        st = check_trainer_key(f, path, "grad_accum", 1);
    if (st == COH_OK)
        st = check_trainer_key(f, path, "seq", 1);
    return st;
}

coh_status coh_state_open(const char *path, coh_train_state *state, coh_st_file **out)
{
    *out = NULL;
    coh_st_file *f;
    coh_status st = coh_st_open(path, &f);
    if (st != COH_OK)
        return st;
    memset(state, 0, sizeof *state);
    st = ckpt_state_parse(f, path, state);
    if (st != COH_OK) {
        coh_st_close(f);
        return st;
    }
    *out = f;
    return COH_OK;
}
