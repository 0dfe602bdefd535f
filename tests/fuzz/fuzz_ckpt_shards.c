/* fuzz_ckpt_shards.c: libFuzzer target for what a sharded checkpoint's files hold (a rank's
 * shard file: its range lists and tensors; the commit file: config and index, and reads through
 * it) and for the --strategy parser: accept or fail cleanly, and what is accepted lies inside
 * the model. First byte: 0 strategy name, 1 shard file, else commit (or plain weights) file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/checkpoint.h"
#include "cohort/parallel.h"
#include "train/ckpt/shard.h"

static void strategy(const uint8_t *data, size_t size)
{
    char text[32];
    if (size >= sizeof text)
        return;
    memcpy(text, data, size);
    text[size] = '\0';
    coh_strategy s;
    if (coh_strategy_parse(text, &s) == COH_OK && strcmp(coh_strategy_name(s), text))
        abort();
}

/* Accepted ranges are sorted, disjoint, inside the model and inside their tensor. */
static void check_ranges(const int64_t *r, const int64_t *off, int64_t k, size_t nparams,
                         const coh_st_tensor *t)
{
    for (int64_t i = 0; i < k; i++) {
        if (r[2 * i] < 0 || r[2 * i + 1] <= r[2 * i] || (uint64_t)r[2 * i + 1] > nparams ||
            (i && r[2 * i] < r[2 * i - 1]))
            abort();
        if (!t || off[i] < 0 || off[i] + r[2 * i + 1] - r[2 * i] > t->shape[0])
            abort();
    }
}

static void shard(const coh_st_file *f)
{
    const size_t nparams = 1000000;
    ckpt_shard s;
    if (ckpt_shard_parse(f, "fuzz.shard", nparams, -1, &s) != COH_OK)
        return;
    check_ranges(s.w, s.woff, s.kw, nparams, s.weights);
    check_ranges(s.m, s.moff, s.km, nparams, s.adam_m);
    if (s.km && (!s.adam_v || s.adam_v->shape[0] != s.adam_m->shape[0]))
        abort();
    ckpt_shard_free(&s);
}

/* Open the commit and read its first elements: the pieces' files do not exist (a clean
 * error); a plain weights file is read from memory. */
static void commit(const coh_st_file *f)
{
    ckpt_src *s;
    float buf[64];
    if (ckpt_src_open(f, "fuzz-no-dir/ck", NULL, 0, &s) != COH_OK)
        return;
    const coh_gpt_config *c = ckpt_src_config(s);
    size_t n = coh_gpt_param_count(c);
    if (ckpt_src_read(s, CKPT_W, 0, n < 64 ? n : 64, buf) == COH_OK && ckpt_is_sharded(f))
        abort(); /* the pieces cannot have been read */
    if (ckpt_src_read(s, CKPT_W, n, 1, buf) == COH_OK) /* past the model */
        abort();
    ckpt_src_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] == 0) {
        strategy(data + 1, size - 1);
        return 0;
    }
    coh_st_file *f;
    if (coh_st_open_memory(data + 1, size - 1, "fuzz.ckpt", &f) != COH_OK)
        return 0;
    if (data[0] == 1)
        shard(f);
    else
        commit(f);
    coh_st_close(f);
    return 0;
}
