/* fuzz_ckpt_shards.c: libFuzzer target for what a sharded checkpoint's files hold (a rank's
 * shard file: HF-named pieces and their boxes; the commit file: config and index, and reads
 * through it), piece names, and the --strategy parser: accept or fail cleanly, and what is
 * accepted lies inside the model. First byte: 0 strategy name, 1 shard file (of the model of
 * the corpus: 2 layers, 2 heads, dim 8, vocabulary 256, context 8), 2 a piece name, else a
 * commit (or plain weights) file. */
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

/* An accepted piece name is the canonical name of a non-empty box inside its tensor. */
static void check_name(const ckpt_model *m, const char *name)
{
    ckpt_box b;
    char again[CKPT_NAME_MAX];
    int64_t R, C;
    if (ckpt_piece_parse(m, name, &b) != COH_OK)
        return;
    ckpt_model_dims(m, b.tensor, &R, &C);
    if (b.r0 < 0 || b.r0 >= b.r1 || b.r1 > R || b.c0 < 0 || b.c0 >= b.c1 || b.c1 > C)
        abort();
    ckpt_piece_name(m, &b, again, sizeof again);
    if (strcmp(again, name))
        abort();
}

static void piece_name(const ckpt_model *m, const uint8_t *data, size_t size)
{
    char text[CKPT_NAME_MAX];
    if (size >= sizeof text)
        return;
    memcpy(text, data, size);
    text[size] = '\0';
    check_name(m, text);
}

/* An accepted shard file holds only pieces: canonical names of boxes inside their tensors,
 * each of its box's shape. */
static void shard(const ckpt_model *m, const coh_st_file *f)
{
    if (ckpt_shard_check(f, "fuzz.shard", m, -1) != COH_OK)
        return;
    for (size_t i = 0; i < coh_st_count(f); i++) {
        const coh_st_tensor *t = coh_st_at(f, i);
        ckpt_box b;
        if (ckpt_piece_parse(m, t->name, &b) != COH_OK)
            abort();
        int64_t n = t->ndim == 2 ? t->shape[0] * t->shape[1] : t->shape[0];
        if (n != (b.r1 - b.r0) * (b.c1 - b.c0))
            abort();
        check_name(m, t->name);
    }
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
    for (int w = CKPT_W; w <= CKPT_V; w++)
        if (ckpt_src_read(s, (ckpt_what)w, 0, n < 64 ? n : 64, buf) == COH_OK &&
            ckpt_is_sharded(f))
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
    const coh_gpt_config c = {.layers = 2, .heads = 2, .dim = 8, .vocab = 256, .seq = 8};
    ckpt_model m;
    if (ckpt_model_init(&m, &c) != COH_OK)
        abort();
    coh_st_file *f;
    if (data[0] == 2)
        piece_name(&m, data + 1, size - 1);
    else if (coh_st_open_memory(data + 1, size - 1, "fuzz.ckpt", &f) == COH_OK) {
        if (data[0] == 1)
            shard(&m, f);
        else
            commit(f);
        coh_st_close(f);
    }
    ckpt_model_free(&m);
    return 0;
}
