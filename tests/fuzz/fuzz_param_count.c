/* fuzz_param_count.c: libFuzzer target for the parameter counts `cohort estimate --params` and
 * --largest-layer take (coh_count_parse): parse or fail with a message naming the text. A count
 * written as a decimal with an optional suffix (K, M, B or G, T) is held to exact arithmetic:
 * it parses, to exactly its value, if and only if that value is a whole number from 1 to 2^50;
 * any accepted text is one of the documented forms (digits, a point, an exponent, a suffix). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/plan.h"
#include "cohort/status.h"

#define MAX_COUNT ((int64_t)1 << 50)

/* The value of "<digits>[.<digits>][suffix]" when it is a whole number from 1 to 2^50, else 0;
 * -1 when the text is not of that form (or too long to compute here). */
static int64_t exact_decimal(const char *s)
{
    size_t whole = strspn(s, "0123456789"), frac = 0;
    const char *p = s + whole;
    if (*p == '.') {
        frac = strspn(p + 1, "0123456789");
        p += 1 + frac;
    }
    int thousands = 0;
    if (*p && !p[1]) {
        const char *at = strchr("kKmMbBgGtT", *p);
        if (!at)
            return -1;
        int i = (int)(at - "kKmMbBgGtT") / 2;
        thousands = i < 2 ? i + 1 : i == 2 || i == 3 ? 3 : 4;
        p++;
    }
    if (*p || whole + frac == 0 || whole + frac > 24 || frac > 12)
        return -1;
    unsigned __int128 n = 0, den = 1, mul = 1;
    for (size_t i = 0; i < whole + frac + (frac ? 1 : 0); i++)
        if (s[i] != '.')
            n = n * 10 + (unsigned)(s[i] - '0');
    for (size_t i = 0; i < frac; i++)
        den *= 10;
    for (int i = 0; i < thousands; i++)
        mul *= 1000;
    n *= mul; /* below 10^24 * 10^12: no overflow */
    if (n % den)
        return 0;
    n /= den;
    return n >= 1 && n <= (unsigned __int128)MAX_COUNT ? (int64_t)n : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[64];
    if (size >= sizeof text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    int64_t n = -7;
    coh_err_clear();
    coh_status st = coh_count_parse(text, &n);
    if (strlen(text) == size) { /* a NUL inside ends the text for the parser, not the oracle */
        int64_t want = exact_decimal(text);
        if (want > 0 && (st != COH_OK || n != want))
            abort();
        if (want == 0 && st == COH_OK)
            abort();
    }
    if (st == COH_OK) {
        if (n < 1 || n > MAX_COUNT)
            abort();
        if (strspn(text, "0123456789.eE+-kKmMbBgGtT") != strlen(text))
            abort(); /* hexadecimal floats, "inf" and the like are not counts */
    } else if (!strstr(coh_last_error(), "invalid parameter count")) {
        abort();
    }
    return 0;
}
