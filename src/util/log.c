/* log.c: leveled one-line diagnostics on stderr. */
#include "cohort/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int level = -1;

static coh_log_level level_from_env(void)
{
    const char *e = getenv("COHORT_LOG");
    if (!e || !*e)
        return COH_LOG_INFO;
    if (!strcmp(e, "quiet"))
        return COH_LOG_QUIET;
    if (!strcmp(e, "error"))
        return COH_LOG_ERROR;
    if (!strcmp(e, "warn"))
        return COH_LOG_WARN;
    if (!strcmp(e, "debug"))
        return COH_LOG_DEBUG;
    return COH_LOG_INFO;
}

coh_log_level coh_log_get_level(void)
{
    if (level < 0)
        level = (int)level_from_env();
    return (coh_log_level)level;
}

void coh_log_set_level(coh_log_level l) { level = (int)l; }

void coh_log(coh_log_level l, const char *fmt, ...)
{
    if (l > coh_log_get_level() || l == COH_LOG_QUIET)
        return;
    static const char *kind[] = {"", "error: ", "warning: ", "", "debug: "};
    char line[2048];
    int n = snprintf(line, sizeof line, "cohort: %s", kind[l]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(2, line, len);
    (void)w;
}
