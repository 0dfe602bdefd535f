/* test_data_gpt2.c: the GPT-2 tokenizer on GPT-2's own tables: known ids, and exact round trips
 * of the WikiText-2 files and of arbitrary bytes. (Exactness against an independent encoder is
 * test_data_bpe_oracle.sh.) The tables are the ones scripts/setup.sh installs (COHORT_GPT2_DIR),
 * else COHORT_DATA_DIR's; the WikiText-2 case is skipped without COHORT_DATA_DIR. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "test_files.h"
#include "cohort/data.h"

static coh_tokenizer *tok;
static char data_dir[1024];

static int round_trips(const char *s, size_t n, size_t *ntokens)
{
    coh_tokens v;
    coh_tokens_init(&v);
    char *back = NULL;
    size_t len = 0;
    int ok = coh_tokenizer_encode(tok, s, n, &v) == COH_OK &&
             coh_tokenizer_decode(tok, v.ids, v.count, &back, &len) == COH_OK && len == n &&
             !memcmp(back, s, n);
    for (size_t i = 0; i < v.count; i++)
        ok &= v.ids[i] >= 0 && v.ids[i] < 50257;
    if (ntokens)
        *ntokens = v.count;
    free(back);
    coh_tokens_release(&v);
    return ok;
}

static void test_known_ids(void)
{
    CHECK_INT(coh_tokenizer_vocab_size(tok), 50257);
    CHECK_INT(coh_tokenizer_eot(tok), 50256);
    coh_tokens v;
    coh_tokens_init(&v);
    CHECK_OK(coh_tokenizer_encode(tok, "Hello world", 11, &v));
    CHECK_INT(v.count, 2);
    if (v.count == 2) {
        CHECK_INT(v.ids[0], 15496);
        CHECK_INT(v.ids[1], 995);
    }
    const char *bytes;
    size_t len;
    CHECK_OK(coh_tokenizer_token_bytes(tok, 50256, &bytes, &len));
    CHECK(len == 13 && !memcmp(bytes, "<|endoftext|>", 13));
    coh_tokens_release(&v);
}

static void test_wikitext_round_trip(void)
{
    const char *files[] = {"valid.txt", "test.txt"};
    char probe[1200];
    struct stat st;
    snprintf(probe, sizeof probe, "%s/wikitext-2/valid.txt", data_dir);
    if (!*data_dir || stat(probe, &st) != 0)
        SKIP_CASE("no WikiText-2 at '%s' (set COHORT_DATA_DIR)", probe);
    for (int i = 0; i < 2; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/wikitext-2/%s", data_dir, files[i]);
        size_t n = 0, ntok = 0;
        char *s = test_slurp(path, &n);
        CHECK(s != NULL);
        if (!s)
            continue;
        CHECK(round_trips(s, n, &ntok));
        CHECK(ntok > n / 6 && ntok < n / 3); /* English: about 4 bytes per token */
        printf("%s: %zu bytes, %zu tokens\n", files[i], n, ntok);
        free(s);
    }
}

static void test_arbitrary_bytes(void)
{
    size_t n = 1 << 16;
    char *s = malloc(n);
    unsigned x = 12345;
    for (int rep = 0; rep < 4; rep++) {
        for (size_t i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            /* rep 0: any byte; 1: ASCII; 2: mostly spaces; 3: UTF-8 lead/continuation bytes */
            unsigned r = x >> 16;
            s[i] = rep == 0 ? (char)r : rep == 1 ? (char)(r % 128) : rep == 2 ? " \n\t a1'"[r % 7]
                                                               : (char)(0x80 | (r % 0x70));
        }
        CHECK(round_trips(s, n, NULL));
    }
    free(s);
}

int main(void)
{
    /* the tables scripts/setup.sh installs, else COHORT_DATA_DIR's copy */
    const char *d = getenv("COHORT_DATA_DIR"), *g = getenv("COHORT_GPT2_DIR");
    struct stat st;
    char enc[1200] = "", vocab[1200] = "";
    if (g) {
        snprintf(enc, sizeof enc, "%s/encoder.json", g);
        snprintf(vocab, sizeof vocab, "%s/vocab.bpe", g);
    }
    if ((!g || stat(enc, &st) != 0) && d) {
        snprintf(enc, sizeof enc, "%s/gpt2-bpe/encoder.json", d);
        snprintf(vocab, sizeof vocab, "%s/gpt2-bpe/vocab.bpe", d);
    }
    if (stat(enc, &st) != 0) {
        printf("skipped: no GPT-2 tables (run scripts/setup.sh, or set COHORT_DATA_DIR)\n");
        return 77;
    }
    snprintf(data_dir, sizeof data_dir, "%s", d ? d : "");
    CHECK_OK(coh_tokenizer_gpt2_create(enc, vocab, &tok));
    if (!tok)
        return CHECK_REPORT();
    RUN(test_known_ids);
    RUN(test_wikitext_round_trip);
    RUN(test_arbitrary_bytes);
    coh_tokenizer_destroy(tok);
    return CHECK_REPORT();
}
