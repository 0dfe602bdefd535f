/* fuzz_bpe_encode.c: libFuzzer target for the GPT-2 encoder on arbitrary bytes: it never fails
 * or crashes, every id is in the vocabulary, and decode(encode(x)) == x. Uses GPT-2's tables
 * from COHORT_GPT2_DIR (what scripts/setup.sh installs) or COHORT_DATA_DIR/gpt2-bpe when present,
 * else a small built-in table. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe_mini_tables.h"
#include "cohort/data.h"

static coh_tokenizer *tok;

static void load(void)
{
    /* the tables scripts/setup.sh installs, else the data dir's copy */
    const char *g = getenv("COHORT_GPT2_DIR"), *d = getenv("COHORT_DATA_DIR");
    for (int i = 0; i < 2; i++) {
        const char *dir = i ? d : g, *sub = i ? "/gpt2-bpe" : "";
        if (!dir)
            continue;
        char enc[4096], vocab[4096];
        snprintf(enc, sizeof enc, "%s%s/encoder.json", dir, sub);
        snprintf(vocab, sizeof vocab, "%s%s/vocab.bpe", dir, sub);
        if (coh_tokenizer_gpt2_create(enc, vocab, &tok) == COH_OK)
            return;
        coh_err_clear();
    }
    static char enc[8192];
    const char *merges = mini_tables(enc);
    if (coh_tokenizer_gpt2_create_from_memory(enc, strlen(enc), merges, strlen(merges), &tok) !=
        COH_OK)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tok)
        load();
    coh_tokens v;
    coh_tokens_init(&v);
    if (coh_tokenizer_encode(tok, (const char *)data, size, &v) != COH_OK)
        abort();
    for (size_t i = 0; i < v.count; i++)
        if (v.ids[i] < 0 || (size_t)v.ids[i] >= coh_tokenizer_vocab_size(tok))
            abort();
    char *back;
    size_t len;
    if (coh_tokenizer_decode(tok, v.ids, v.count, &back, &len) != COH_OK || len != size ||
        (size && memcmp(back, data, size) != 0))
        abort();
    free(back);
    coh_tokens_release(&v);
    return 0;
}
