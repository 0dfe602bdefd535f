/* cli_train.c: option parsing and engine setup shared by the train, eval and generate commands. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "cli.h"
#include "cli_train.h"

int cli_parse_long(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_usage_error(cmd, "invalid %s '%s': must be an integer from %ld to %ld", opt, s, lo,
                        hi);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_float(const char *cmd, const char *opt, const char *s, double lo, double hi,
                    float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        cli_usage_error(cmd, "invalid %s '%s': must be a number from %g to %g", opt, s, lo, hi);
        return 0;
    }
    *out = (float)v;
    return 1;
}

void cli_engine_setup(int threads)
{
    coh_blas_ensure_best_kernel();
    coh_set_threads(threads);
}

uint64_t cli_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru))
        return 0;
    return (uint64_t)ru.ru_maxrss * 1024u;
}
