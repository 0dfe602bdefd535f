/* strutil.c: small string helpers shared by the library's modules (see strutil.h). */
#include "util/strutil.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void coh_str_append(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    if (*len >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (n > 0)
        *len = (*len + (size_t)n < cap) ? *len + (size_t)n : cap - 1;
}

void coh_str_trim(const char **s, size_t *len)
{
    const char *p = *s;
    size_t n = *len;
    while (n && isspace((unsigned char)*p))
        p++, n--;
    while (n && isspace((unsigned char)p[n - 1]))
        n--;
    *s = p;
    *len = n;
}

int coh_str_starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

int coh_str_uint(const char *s, long max, long *out)
{
    if (!s || !*s || max < 0)
        return 0;
    long v = 0;
    for (const char *p = s; *p; p++) {
        int d = *p - '0';
        if (d < 0 || d > 9 || d > max || v > (max - d) / 10) /* v * 10 + d > max */
            return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}
