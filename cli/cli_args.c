/* cli_args.c: the one parser of numbers and sizes that the subcommands' options take, with one
 * phrasing of each error ("invalid --steps 'x': must be an integer from 1 to 1099511627776"). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cohort/planner.h"
#include "cohort/size.h"

int cli_parse_long(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    /* strtol would skip leading blanks: " 4" is no more a number here than "4 " is */
    if (errno || end == s || *end || isspace((unsigned char)*s) || v < lo || v > hi) {
        cli_usage_error(cmd, "invalid %s '%s': must be an integer from %ld to %ld", opt, s, lo,
                        hi);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out)
{
    long v;
    if (!cli_parse_long(cmd, opt, s, lo, hi, &v))
        return 0;
    *out = (int)v;
    return 1;
}

int cli_parse_double(const char *cmd, const char *opt, const char *s, double lo, double hi,
                     double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || isspace((unsigned char)*s) || !isfinite(v) || v < lo ||
        v > hi) {
        cli_usage_error(cmd, "invalid %s '%s': must be a number from %g to %g", opt, s, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_float(const char *cmd, const char *opt, const char *s, double lo, double hi,
                    float *out)
{
    double v;
    if (!cli_parse_double(cmd, opt, s, lo, hi, &v))
        return 0;
    *out = (float)v;
    return 1;
}

int cli_parse_size(const char *cmd, const char *opt, const char *s, uint64_t lo, uint64_t *out)
{
    uint64_t v;
    if (coh_size_parse(s, &v) != COH_OK) {
        cli_usage_error(cmd, "%s: %s", opt, coh_last_error()); /* "invalid size 'x': ..." */
        return 0;
    }
    if (v < lo) {
        cli_usage_error(cmd, "invalid %s '%s': must be at least %llu byte%s", opt, s,
                        (unsigned long long)lo, lo == 1 ? "" : "s");
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_memory(const char *cmd, const char *opt, const char *s, uint64_t *out)
{
    size_t n = strspn(s, "0123456789.");
    if (n && !s[n]) { /* "16": bytes to the size parser, never what a device holds */
        cli_usage_error(cmd, "invalid %s '%s': give a unit, e.g. %sGiB (binary), %sGB (decimal) "
                        "or %sMiB", opt, s, s, s, s);
        return 0;
    }
    return cli_parse_size(cmd, opt, s, 1, out);
}

/* One number of a link: all of `s` up to `stop` (a ':' or the end), without blanks, finite,
 * from 0 to hi. */
static int link_number(const char *s, const char *stop, double hi, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return end != s && end == stop && !errno && !isspace((unsigned char)*s) && isfinite(*out) &&
           *out >= 0 && *out <= hi;
}

int cli_parse_link(const char *cmd, const char *opt, const char *s, struct coh_link *out)
{
    /* strtod alone skipped leading blanks (" 25: 5" passed), unlike every other option value */
    const char *colon = strchr(s, ':');
    double gb, us = 5.0;
    if (!link_number(s, colon ? colon : s + strlen(s), 1e6, &gb) || !(gb > 0) ||
        (colon && !link_number(colon + 1, colon + 1 + strlen(colon + 1), 1e7, &us))) {
        cli_usage_error(cmd, "invalid %s '%s': need GB/S[:LATENCY_US], e.g. 25:5 (bandwidth "
                        "above 0 up to 1e6 GB/s, latency from 0 to 1e7 us)", opt, s);
        return 0;
    }
    out->bytes_per_s = gb * 1e9;
    out->alpha_s = us * 1e-6;
    return 1;
}
