/* test_data_tokenizer.c: the byte tokenizer, GPT-2's pre-split rule by rule, BPE merge order on
 * small hand-made tables, round trips on arbitrary bytes, and table errors. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cohort/data.h"
#include "train/data/bpe.h"

/* ---- pre-split ------------------------------------------------------------------------------ */

/* The pre-tokens of s joined with '|'. */
static const char *split(const char *s, size_t n)
{
    static char out[1024];
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = pretok_next((const unsigned char *)s, n, i);
        if (i)
            out[o++] = '|';
        memcpy(out + o, s + i, k);
        o += k;
        i += k;
    }
    out[o] = 0;
    return out;
}

#define SPLIT(s, want) CHECK_STR(split(s, sizeof(s) - 1), want)

static void test_presplit(void)
{
    SPLIT("Hello world", "Hello| world");
    SPLIT("Hello  world", "Hello| | world");
    SPLIT("don't stop", "don|'t| stop");
    SPLIT("we've they're you'll I'm he'd it's", "we|'ve| they|'re| you|'ll| I|'m| he|'d| it|'s");
    SPLIT("I'M", "I|'|M"); /* contractions are lower case only */
    SPLIT("'s's", "'s|'s");
    SPLIT("hello!!'s", "hello|!!'|s");
    SPLIT("a\n\nb", "a|\n|\n|b");
    SPLIT("\t\tx", "\t|\t|x");
    SPLIT("x   ", "x|   ");
    SPLIT("   ", "   ");
    SPLIT("  x", " | x");
    SPLIT("123abc 4.5", "123|abc| 4|.|5");
    SPLIT(" 42!!", " 42|!!");
    SPLIT(" !x", " !|x");
    SPLIT("h\xc3\xa9llo w\xc3\xb6rld", "h\xc3\xa9llo| w\xc3\xb6rld");       /* héllo wörld */
    SPLIT("\xe6\x97\xa5\xe6\x9c\xac x", "\xe6\x97\xa5\xe6\x9c\xac| x");       /* 日本 x */
    SPLIT("x\xd9\xa3\xd9\xa4", "x|\xd9\xa3\xd9\xa4");                         /* Arabic-Indic 34 */
    SPLIT("x\xc2\xbd", "x|\xc2\xbd");                                         /* ½ is \p{N} */
    SPLIT("e\xcc\x81z", "e|\xcc\x81|z");                                      /* combining acute */
    SPLIT("a\xc2\xa0" "b", "a|\xc2\xa0|b");                                   /* no-break space */
    SPLIT(" \xc2\xa0" "b", " |\xc2\xa0|b");
    SPLIT("a\xe3\x80\x80\xe3\x80\x80" "b", "a|\xe3\x80\x80|\xe3\x80\x80|b");     /* ideographic spaces */
    SPLIT("a\xff\xfe" "b", "a|\xff\xfe|b");                                   /* invalid bytes */
    SPLIT("\xed\xa0\x80", "\xed\xa0\x80");                                   /* a surrogate */
    SPLIT("x\xf0\x9f\x8e\x89!", "x|\xf0\x9f\x8e\x89!");                       /* emoji is So */
    CHECK_STR(split("", 0), "");
}

/* ---- hand-made tables ----------------------------------------------------------------------- */

/* GPT-2's byte alphabet, written independently of the library: printable Latin-1 bytes stand
 * for themselves, the rest map to U+0100 + their index among the non-printable bytes. */
static unsigned alphabet(int b)
{
    int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (printable)
        return (unsigned)b;
    unsigned n = 0;
    for (int c = 0; c < b; c++)
        n += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
    return 256 + n;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    o[0] = (char)(0xC0 | cp >> 6);
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* encoder.json: the 256 bytes as ids 0..255 (JSON-escaped), then `extra` ("key":id pairs). */
static char *mini_encoder(const char *extra, int skip_byte)
{
    char *s = malloc(16384);
    size_t o = 0;
    s[o++] = '{';
    for (int b = 0; b < 256; b++) {
        if (b == skip_byte)
            continue;
        char ch[4];
        size_t n = put_utf8(ch, alphabet(b));
        o += (size_t)sprintf(s + o, "%s\"", o > 1 ? "," : "");
        if (ch[0] == '"' || ch[0] == '\\')
            s[o++] = '\\';
        memcpy(s + o, ch, n);
        o += n;
        o += (size_t)sprintf(s + o, "\":%d", b);
    }
    o += (size_t)sprintf(s + o, "%s}", extra);
    s[o] = 0;
    return s;
}

/* "\xc4\xa0" is U+0120, the alphabet's space. */
static const char mini_extra[] = ",\"aa\":256,\"bc\":257,\"ab\":258,\"\xc4\xa0" "a\":259,"
                                 "\"\xc4\xa0" "aa\":260,\"<|endoftext|>\":261";
static const char mini_merges[] = "#version: 0.2\na a\nb c\na b\n\xc4\xa0 a\n\xc4\xa0" "a a\n";

static coh_tokenizer *mini(void)
{
    char *enc = mini_encoder(mini_extra, -1);
    coh_tokenizer *t = NULL;
    CHECK_OK(coh_tokenizer_gpt2_create_from_memory(enc, strlen(enc), mini_merges,
                                                   strlen(mini_merges), &t));
    free(enc);
    return t;
}

/* Encode s and compare with the expected ids; also check the round trip. */
static int encodes_to(coh_tokenizer *t, const char *s, const int32_t *want, size_t n)
{
    coh_tokens v;
    coh_tokens_init(&v);
    int ok = coh_tokenizer_encode(t, s, strlen(s), &v) == COH_OK && v.count == n &&
             !memcmp(v.ids, want, n * sizeof *want);
    if (!ok) {
        fprintf(stderr, "encode('%s') gave", s);
        for (size_t i = 0; i < v.count; i++)
            fprintf(stderr, " %d", v.ids[i]);
        fprintf(stderr, "\n");
    }
    char *back = NULL;
    size_t len = 0;
    ok &= coh_tokenizer_decode(t, v.ids, v.count, &back, &len) == COH_OK && len == strlen(s) &&
          !memcmp(back, s, len);
    free(back);
    coh_tokens_release(&v);
    return ok;
}

#define ENC(t, s, ...) CHECK(encodes_to(t, s, (int32_t[]){__VA_ARGS__}, \
                                        sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t)))

static void test_merge_order(void)
{
    coh_tokenizer *t = mini();
    if (!t)
        return;
    CHECK_INT(coh_tokenizer_vocab_size(t), 262);
    CHECK_INT(coh_tokenizer_eot(t), 261);
    CHECK_STR(coh_tokenizer_name(t), "gpt2");
    ENC(t, "ab", 258);
    ENC(t, "aaa", 256, 'a');           /* left to right, no overlap */
    ENC(t, "aaaa", 256, 256);
    ENC(t, "abc", 'a', 257);           /* "b c" has the lower rank: it wins over "a b" */
    ENC(t, " a", 259);
    ENC(t, " aa", ' ', 256);           /* "a a" (rank 0) before "Ġ a" (rank 3) */
    ENC(t, " ab", ' ', 258);          /* "a b" (rank 2) before "Ġ a" (rank 3) */
    ENC(t, "x aaa\n", 'x', ' ', 256, 'a', '\n');
    ENC(t, "<|endoftext|>", '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>');
    const char *bytes;
    size_t len;
    CHECK_OK(coh_tokenizer_token_bytes(t, 259, &bytes, &len));
    CHECK(len == 2 && !memcmp(bytes, " a", 2));
    CHECK_OK(coh_tokenizer_token_bytes(t, 0, &bytes, &len));
    CHECK(len == 1 && bytes[0] == 0);
    CHECK_FAILS(coh_tokenizer_token_bytes(t, 262, &bytes, &len), COH_ERR_INVALID,
                "token id '262' is out of range: valid ids are 0..261");
    char *text;
    CHECK_FAILS(coh_tokenizer_decode(t, (int32_t[]){1, -5}, 2, &text, &len), COH_ERR_INVALID,
                "token id '-5'");
    coh_tokenizer_destroy(t);
}

/* Long runs of one pre-token and arbitrary bytes: round trip, and the same ids as when the
 * cache is warm. */
static void test_round_trip_bytes(void)
{
    coh_tokenizer *t = mini();
    if (!t)
        return;
    size_t n = 200000;
    char *s = malloc(n);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        s[i] = i < n / 2 ? (char)x : "aab c"[x % 5]; /* random bytes, then long a/b/space runs */
    }
    for (int rep = 0; rep < 2; rep++) {
        coh_tokens v;
        coh_tokens_init(&v);
        CHECK_OK(coh_tokenizer_encode(t, s, n, &v));
        char *back = NULL;
        size_t len = 0;
        CHECK_OK(coh_tokenizer_decode(t, v.ids, v.count, &back, &len));
        CHECK(len == n && back && !memcmp(back, s, n));
        free(back);
        coh_tokens_release(&v);
    }
    /* One pre-token of 100000 letters: merged in n log n, round trip exact. */
    memset(s, 'a', 100000);
    coh_tokens v;
    coh_tokens_init(&v);
    CHECK_OK(coh_tokenizer_encode(t, s, 100000, &v));
    CHECK_INT(v.count, 50000);
    CHECK(v.count > 0 && v.ids[0] == 256 && v.ids[v.count - 1] == 256);
    coh_tokens_release(&v);
    free(s);
    coh_tokenizer_destroy(t);
}

static void test_byte_tokenizer(void)
{
    coh_tokenizer *t = NULL;
    CHECK_OK(coh_tokenizer_byte_create(&t));
    if (!t)
        return;
    CHECK_INT(coh_tokenizer_vocab_size(t), 256);
    CHECK_INT(coh_tokenizer_eot(t), -1);
    CHECK_STR(coh_tokenizer_name(t), "byte");
    ENC(t, "A\xff\n", 65, 255, 10);
    coh_tokenizer_destroy(t);
}

static coh_status load(const char *enc, const char *merges)
{
    coh_tokenizer *t = NULL;
    coh_status st = coh_tokenizer_gpt2_create_from_memory(enc, strlen(enc), merges,
                                                          strlen(merges), &t);
    coh_tokenizer_destroy(t);
    return st;
}

static void test_table_errors(void)
{
    char *enc = mini_encoder(mini_extra, -1);
    CHECK_OK(load(enc, mini_merges));
    CHECK_OK(load(enc, "#version: 0.2\n"));
    CHECK_OK(load(enc, "#version: 0.2\na a\n\nb c\n")); /* a blank line merges nothing */
    CHECK_FAILS(load(enc, "#version: 0.2\na a\nb q\n"), COH_ERR_INVALID,
                "'vocab.bpe' line 3: merge 'b q' uses or makes a token that is not in the encoder");
    CHECK_FAILS(load(enc, "#version: 0.2\na a b\n"), COH_ERR_INVALID,
                "'vocab.bpe' line 2: expected two tokens");
    free(enc);
    enc = mini_encoder(mini_extra, 'q');
    CHECK_FAILS(load(enc, mini_merges), COH_ERR_INVALID, "no token for byte 0x71");
    free(enc);
    enc = mini_encoder(",\"a b\":300", -1);
    CHECK_FAILS(load(enc, mini_merges), COH_ERR_INVALID, "token 'a b' has character U+0020 "
                "outside GPT-2's byte alphabet");
    free(enc);
    enc = mini_encoder(",\"zz\":5", -1);
    CHECK_FAILS(load(enc, mini_merges), COH_ERR_INVALID, "id 5 is used by two tokens");
    free(enc);
    enc = mini_encoder(",\"zz\":-1", -1);
    CHECK_FAILS(load(enc, mini_merges), COH_ERR_INVALID, "token 'zz' at line 1 has id that is not");
    free(enc);
    CHECK_FAILS(load("{\"a\":", mini_merges), COH_ERR_INVALID, "'encoder.json'");
    CHECK_FAILS(load("[]", mini_merges), COH_ERR_INVALID, "expected a non-empty object");
    coh_tokenizer *t;
    CHECK_FAILS(coh_tokenizer_gpt2_create("/nonexistent/encoder.json", "/nonexistent/vocab.bpe",
                                          &t), COH_ERR_NOT_FOUND, "/nonexistent/encoder.json");
}

int main(void)
{
    RUN(test_presplit);
    RUN(test_merge_order);
    RUN(test_round_trip_bytes);
    RUN(test_byte_tokenizer);
    RUN(test_table_errors);
    return CHECK_REPORT();
}
