/* check.h: the assertions of cohort's C tests. A test program runs its cases with RUN(), prints
 * one line per case, and returns non-zero when any check failed.
 *
 * A case that cannot run here (a cpu feature, a program or data missing) calls SKIP_CASE(), which
 * prints "SKIP <case>: <reason>" and leaves the case. It is never counted as passed: when nothing
 * failed, CHECK_REPORT() returns 77, which cmake/tests.cmake registers as ctest's
 * SKIP_RETURN_CODE, so the whole program is reported as skipped; a failure anywhere still
 * returns 1. */
#ifndef COHORT_TESTS_CHECK_H
#define COHORT_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cohort/status.h"

static int check_failures;
static int check_cases, check_cases_failed, check_cases_skipped;
static int check_case_skipped; /* the running case called SKIP_CASE() */

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);           \
            check_failures++;                                                                  \
        }                                                                                      \
    } while (0)

#define CHECK_INT(a, b)                                                                        \
    do {                                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                                    \
        if (a_ != b_) {                                                                        \
            fprintf(stderr, "%s:%d: check failed: %s == %s (%lld != %lld)\n", __FILE__,        \
                    __LINE__, #a, #b, a_, b_);                                                 \
            check_failures++;                                                                  \
        }                                                                                      \
    } while (0)

#define CHECK_STR(a, b)                                                                        \
    do {                                                                                       \
        const char *a_ = (a), *b_ = (b);                                                       \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                               \
            fprintf(stderr, "%s:%d: check failed: %s == %s ('%s' != '%s')\n", __FILE__,        \
                    __LINE__, #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");                 \
            check_failures++;                                                                  \
        }                                                                                      \
    } while (0)

#define CHECK_NEAR(a, b, rel)                                                                  \
    do {                                                                                       \
        double a_ = (double)(a), b_ = (double)(b);                                             \
        double d_ = fabs(a_ - b_), s_ = fmax(fabs(a_), fabs(b_));                              \
        if (!(d_ <= (rel) * (s_ > 1e-30 ? s_ : 1e-30))) {                                      \
            fprintf(stderr, "%s:%d: check failed: %s ~ %s (%.9g vs %.9g, rel %.3g)\n",         \
                    __FILE__, __LINE__, #a, #b, a_, b_, d_ / (s_ > 0 ? s_ : 1));               \
            check_failures++;                                                                  \
        }                                                                                      \
    } while (0)

/* The call must succeed; on failure the library's message is printed. */
#define CHECK_OK(expr)                                                                         \
    do {                                                                                       \
        coh_status s_ = (expr);                                                                \
        if (s_ != COH_OK) {                                                                    \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #expr,           \
                    coh_status_name(s_), coh_last_error());                                    \
            check_failures++;                                                                  \
        }                                                                                      \
    } while (0)

/* The call must fail with `code`, and its message must contain `needle`. */
#define CHECK_FAILS(expr, code, needle)                                                        \
    do {                                                                                       \
        coh_err_clear();                                                                       \
        coh_status s_ = (expr);                                                                \
        if (s_ != (code)) {                                                                    \
            fprintf(stderr, "%s:%d: %s returned '%s', expected '%s'\n", __FILE__, __LINE__,    \
                    #expr, coh_status_name(s_), coh_status_name(code));                        \
            check_failures++;                                                                  \
        } else if (!strstr(coh_last_error(), (needle))) {                                      \
            fprintf(stderr, "%s:%d: %s: message '%s' lacks '%s'\n", __FILE__, __LINE__, #expr, \
                    coh_last_error(), (needle));                                               \
            check_failures++;                                                                  \
        }                                                                                      \
    } while (0)

/* Leaves the running case (called in its own function, whose name it prints) as skipped, with
 * a printf-style reason. */
#define SKIP_CASE(...)                                                                         \
    do {                                                                                       \
        printf("SKIP %s: ", __func__);                                                         \
        printf(__VA_ARGS__);                                                                   \
        printf("\n");                                                                          \
        check_case_skipped = 1;                                                                \
        return;                                                                                \
    } while (0)

#define RUN(test)                                                                              \
    do {                                                                                       \
        int before_ = check_failures;                                                          \
        check_case_skipped = 0;                                                                \
        test();                                                                                \
        check_cases++;                                                                         \
        if (check_failures != before_)                                                         \
            check_cases_failed++;                                                              \
        else if (check_case_skipped)                                                           \
            check_cases_skipped++;                                                             \
        printf("%s %s\n", check_failures != before_ ? "FAIL"                                   \
                          : check_case_skipped     ? "skip" : "ok  ", #test);                  \
    } while (0)

/* Last statement of main(): 1 when a check failed, else 77 (skipped) when a case was skipped. */
#define CHECK_REPORT()                                                                         \
    (printf("%d passed, %d failed, %d skipped\n",                                              \
            check_cases - check_cases_failed - check_cases_skipped, check_cases_failed,        \
            check_cases_skipped),                                                              \
     check_failures ? 1 : check_cases_skipped ? 77 : 0)

#endif
