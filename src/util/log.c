/* log.c: leveled one-line diagnostics on stderr. */
#include "cohort/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int level = -1;

coh_status coh_log_level_parse(const char *text, coh_log_level *out)
{
    static const char *const names[] = {"quiet", "error", "warn", "info", "debug"};
    for (int i = 0; text && i < (int)(sizeof names / sizeof *names); i++)
        if (!strcmp(text, names[i])) {
            *out = (coh_log_level)i;
            return COH_OK;
        }
    return coh_errf(COH_ERR_INVALID, "invalid COHORT_LOG '%s': expected quiet, error, warn, info "
                    "or debug", text ? text : "(null)");
}

/* Read on the first message, where no caller is left to refuse a typo to: it is said once, in
 * a line of its own, and the default is kept (the CLI refuses it before anything logs). */
static coh_log_level level_from_env(void)
{
    const char *e = getenv("COHORT_LOG");
    coh_log_level l = COH_LOG_INFO;
    if (!e || !*e || coh_log_level_parse(e, &l) == COH_OK)
        return l;
    char line[320];
    int n = snprintf(line, sizeof line, "cohort: warning: invalid COHORT_LOG '%.200s': expected "
                     "quiet, error, warn, info or debug; using info\n", e);
    ssize_t w = write(2, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    (void)w;
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
