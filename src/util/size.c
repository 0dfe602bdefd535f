/* size.c: parsing and printing of byte sizes. */
#include "cohort/size.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    double factor;
} units[] = {
    {"", 1.0},
    {"b", 1.0},
    {"k", 1024.0},
    {"kib", 1024.0},
    {"kb", 1e3},
    {"m", 1048576.0},
    {"mib", 1048576.0},
    {"mb", 1e6},
    {"g", 1073741824.0},
    {"gib", 1073741824.0},
    {"gb", 1e9},
    {"t", 1099511627776.0},
    {"tib", 1099511627776.0},
    {"tb", 1e12},
    {"p", 1125899906842624.0},
    {"pib", 1125899906842624.0},
    {"pb", 1e15},
    {"e", 1152921504606846976.0},
    {"eib", 1152921504606846976.0},
    {"eb", 1e18},
};

static coh_status bad_size(const char *text, const char *why)
{
    return coh_errf(COH_ERR_INVALID,
                    "invalid size '%s': %s (expected a number with an optional unit: B, KiB, "
                    "MiB, GiB, TiB, PiB, EiB, KB, MB, GB, TB, PB, EB, or K, M, G, T, P, E for the binary units)",
                    text, why);
}

coh_status coh_size_parse(const char *text, uint64_t *out_bytes)
{
    if (!text)
        return coh_errf(COH_ERR_INVALID, "invalid size: no text");
    const char *p = text;
    double whole = 0.0, frac = 0.0, scale = 1.0;
    int digits = 0;
    while (isdigit((unsigned char)*p)) {
        whole = whole * 10.0 + (*p - '0');
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            scale /= 10.0;
            frac += (*p - '0') * scale;
            p++;
            digits++;
        }
    }
    if (digits == 0)
        return bad_size(text, *text == '-' ? "negative sizes are not allowed" : "no number");
    if (*p == ' ')
        p++;
    char unit[8] = {0};
    size_t n = strnlen(p, sizeof unit);
    if (n >= sizeof unit)
        return bad_size(text, "unknown unit");
    for (size_t i = 0; i < n; i++)
        unit[i] = (char)tolower((unsigned char)p[i]);
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(unit, units[i].name) == 0) {
            double v = floor((whole + frac) * units[i].factor);
            /* Exactly 2^64 ("16 EiB", what the largest sizes print as) saturates. */
            if (v == 18446744073709551616.0) {
                *out_bytes = UINT64_MAX;
                return COH_OK;
            }
            if (!(v < 18446744073709551616.0))
                return bad_size(text, "too large");
            *out_bytes = (uint64_t)v;
            return COH_OK;
        }
    }
    return bad_size(text, "unknown unit");
}

/* Largest unit of `base` that keeps the value >= 1, two decimals. */
static char *format_in(uint64_t bytes, double base, const char *const names[6], char *buf,
                       size_t cap)
{
    if ((double)bytes < base) {
        snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
        return buf;
    }
    double v = (double)bytes / base;
    int u = 0;
    while (v >= base && u < 5) {
        v /= base;
        u++;
    }
    snprintf(buf, cap, "%.2f %s", v, names[u]);
    return buf;
}

char *coh_size_format(uint64_t bytes, char *buf, size_t cap)
{
    static const char *const names[6] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    return format_in(bytes, 1024.0, names, buf, cap);
}

char *coh_size_format_si(uint64_t bytes, char *buf, size_t cap)
{
    static const char *const names[6] = {"kB", "MB", "GB", "TB", "PB", "EB"};
    return format_in(bytes, 1000.0, names, buf, cap);
}
