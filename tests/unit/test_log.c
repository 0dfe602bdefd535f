/* test_log.c: COHORT_LOG's levels by name, and a value that names none: said in one warning on
 * the first message (the library has no caller to refuse it to), the default level kept. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cohort/log.h"

static void test_parse(void)
{
    static const char *const names[] = {"quiet", "error", "warn", "info", "debug"};
    for (int i = 0; i < 5; i++) {
        coh_log_level l = (coh_log_level)-1;
        CHECK_OK(coh_log_level_parse(names[i], &l));
        CHECK_INT(l, i);
    }
    coh_log_level l = COH_LOG_WARN;
    CHECK_FAILS(coh_log_level_parse("verbose", &l), COH_ERR_INVALID,
                "invalid COHORT_LOG 'verbose': expected quiet, error, warn, info or debug");
    CHECK_FAILS(coh_log_level_parse("Debug", &l), COH_ERR_INVALID, "invalid COHORT_LOG 'Debug'");
    CHECK_FAILS(coh_log_level_parse(" warn", &l), COH_ERR_INVALID, "invalid COHORT_LOG ' warn'");
    CHECK_INT(l, COH_LOG_WARN); /* untouched by a refusal */
}

/* What a fresh process writes on stderr with COHORT_LOG=value when it logs a debug line, then
 * two info lines. */
static void stderr_of(const char *value, char *out, size_t cap)
{
    int fds[2];
    out[0] = 0;
    if (pipe(fds))
        return;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        setenv("COHORT_LOG", value, 1);
        coh_debug("hidden at info");
        coh_info("first");
        coh_info("second");
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t n;
    while (len + 1 < cap && (n = read(fds[0], out + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = 0;
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
}

static void test_env_typo(void)
{
    char err[1024];
    stderr_of("verbose", err, sizeof err);
    CHECK_STR(err, "cohort: warning: invalid COHORT_LOG 'verbose': expected quiet, error, warn, "
                   "info or debug; using info\ncohort: first\ncohort: second\n");
    stderr_of("debug", err, sizeof err);
    CHECK_STR(err, "cohort: debug: hidden at info\ncohort: first\ncohort: second\n");
    stderr_of("", err, sizeof err); /* set but empty: the default, as unset */
    CHECK_STR(err, "cohort: first\ncohort: second\n");
}

int main(void)
{
    RUN(test_parse);
    RUN(test_env_typo);
    return CHECK_REPORT();
}
