/* fuzz_bpe_tables.c: libFuzzer target for the encoder.json + vocab.bpe readers. The input is the
 * encoder text, a NUL byte, then the merges text. Tables are loaded or refused cleanly; loaded
 * tables encode and decode a sample exactly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t enc_len = nul ? (size_t)(nul - data) : size;
    const char *merges = nul ? (const char *)nul + 1 : "";
    size_t merges_len = nul ? size - enc_len - 1 : 0;
    coh_tokenizer *t;
    if (coh_tokenizer_gpt2_create_from_memory((const char *)data, enc_len, merges, merges_len,
                                              &t) != COH_OK)
        return 0;
    static const char sample[] = "Hello world, aaa bc 'll 123\n\n \xff\xc3\xa9";
    coh_tokens v;
    coh_tokens_init(&v);
    char *back;
    size_t len;
    if (coh_tokenizer_encode(t, sample, sizeof sample - 1, &v) != COH_OK ||
        coh_tokenizer_decode(t, v.ids, v.count, &back, &len) != COH_OK ||
        len != sizeof sample - 1 || memcmp(back, sample, len) != 0)
        abort();
    free(back);
    coh_tokens_release(&v);
    coh_tokenizer_destroy(t);
    return 0;
}
