/* test_strutil.c: the library's small string helpers: bounded appending, trimming, prefixes,
 * strict whole numbers. */
#include <limits.h>
#include <string.h>

#include "check.h"
#include "util/strutil.h"

static void test_append(void)
{
    char buf[16];
    size_t len = 0;
    coh_str_append(buf, sizeof buf, &len, "%s=%d", "a", 1);
    CHECK_STR(buf, "a=1");
    CHECK_INT(len, 3);
    coh_str_append(buf, sizeof buf, &len, "%s", "");
    CHECK_STR(buf, "a=1");
    CHECK_INT(len, 3);
    coh_str_append(buf, sizeof buf, &len, ",%s", "bc");
    CHECK_STR(buf, "a=1,bc");
    CHECK_INT(len, 6);
}

static void test_append_cut(void)
{
    char big[16];
    memset(big, 'X', sizeof big);
    size_t len = 0;
    coh_str_append(big, 8, &len, "abc");
    coh_str_append(big, 8, &len, "defgh"); /* one too many: cut, still terminated */
    CHECK_STR(big, "abcdefg");
    CHECK_INT(len, 7);
    coh_str_append(big, 8, &len, "more"); /* full: nothing changes */
    CHECK_STR(big, "abcdefg");
    CHECK_INT(len, 7);
    for (size_t i = 8; i < sizeof big; i++)
        CHECK(big[i] == 'X'); /* nothing written past cap */

    char fit[4];
    len = 0;
    coh_str_append(fit, sizeof fit, &len, "abc"); /* exactly fills, with the NUL */
    CHECK_STR(fit, "abc");
    CHECK_INT(len, 3);

    char one[1] = {'X'};
    len = 0;
    coh_str_append(one, sizeof one, &len, "abc");
    CHECK(one[0] == '\0');
    CHECK_INT(len, 0);

    char past[4] = "ab";
    len = 5; /* a caller's length already past the end: no write at all */
    coh_str_append(past, sizeof past, &len, "x");
    CHECK_STR(past, "ab");
    CHECK_INT(len, 5);
}

/* The trimmed span of text[from, from + n), as a string. */
static const char *trimmed(const char *text, size_t from, size_t n, char *out, size_t *at)
{
    const char *s = text + from;
    coh_str_trim(&s, &n);
    *at = (size_t)(s - text);
    memcpy(out, s, n);
    out[n] = '\0';
    return out;
}

static void test_trim(void)
{
    char out[64];
    size_t at;
    const char *t = " \t a b \r\n";
    CHECK_STR(trimmed(t, 0, strlen(t), out, &at), "a b"); /* inner blanks stay */
    CHECK_INT(at, 3);
    CHECK_STR(trimmed("abc", 0, 3, out, &at), "abc");
    CHECK_INT(at, 0);
    CHECK_STR(trimmed("", 0, 0, out, &at), "");
    CHECK_STR(trimmed(" \t\n ", 0, 4, out, &at), "");
    /* the span ends where len says, not at the NUL: " ab " of "  ab  cd" */
    CHECK_STR(trimmed("  ab  cd", 1, 4, out, &at), "ab");
    CHECK_INT(at, 2);
    /* bytes above 0x7f are not white space, whatever their sign as char */
    CHECK_STR(trimmed("\xa0x\xa0", 0, 3, out, &at), "\xa0x\xa0");
    const char *s = "  x";
    size_t n = 0; /* an empty span stays empty and does not move */
    coh_str_trim(&s, &n);
    CHECK_INT(n, 0);
}

static void test_starts(void)
{
    CHECK(coh_str_starts("GPU-1234", "GPU-"));
    CHECK(coh_str_starts("GPU-", "GPU-"));
    CHECK(!coh_str_starts("GPU", "GPU-"));
    CHECK(!coh_str_starts("gpu-1234", "GPU-")); /* case matters */
    CHECK(!coh_str_starts("MIG-GPU-1", "GPU-"));
    CHECK(coh_str_starts("abc", ""));
    CHECK(coh_str_starts("", ""));
    CHECK(!coh_str_starts("", "a"));
}

/* The knobs' shared reader takes digits alone: no blank, sign or trailing text, nothing past
 * max, and no wrap-around near LONG_MAX. */
static void test_uint(void)
{
    long v = -7;
    CHECK(coh_str_uint("0", 5, &v) && v == 0);
    CHECK(coh_str_uint("29500", 65533, &v) && v == 29500);
    CHECK(coh_str_uint("0065533", 65533, &v) && v == 65533);
    CHECK(coh_str_uint("9223372036854775807", LONG_MAX, &v) && v == LONG_MAX);
    v = -7;
    static const char *const bad[] = {"", " 4", "4 ", "+4", "-4", "4x", "0x10", "\t4", "4.0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(!coh_str_uint(bad[i], 65535, &v));
    CHECK(!coh_str_uint(NULL, 65535, &v));
    CHECK(!coh_str_uint("65534", 65533, &v));
    CHECK(!coh_str_uint("5", 0, &v)); /* one digit above a max below 10 */
    CHECK(!coh_str_uint("9223372036854775808", LONG_MAX, &v));
    CHECK(!coh_str_uint("99999999999999999999999", LONG_MAX, &v));
    CHECK(v == -7); /* untouched by a refusal */
}

int main(void)
{
    RUN(test_append);
    RUN(test_append_cut);
    RUN(test_trim);
    RUN(test_starts);
    RUN(test_uint);
    return CHECK_REPORT();
}
