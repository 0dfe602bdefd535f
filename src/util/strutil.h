/* strutil.h: small string helpers shared by the library's modules: bounded appending, trimming,
 * prefix tests and strict whole numbers. Internal to libcohort. */
#ifndef COHORT_UTIL_STRUTIL_H
#define COHORT_UTIL_STRUTIL_H

#include <stddef.h>

/* Append printf-style text to buf[cap] at *len. buf stays NUL-terminated: what does not fit is
 * cut, and *len then stops at cap - 1; nothing is written once *len >= cap. Start with
 * *len = 0 (buf need not be initialised). */
void coh_str_append(char *buf, size_t cap, size_t *len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Narrow the span (*s, *len) to leave out white space (isspace) at both ends; an all-blank
 * span becomes empty (*len = 0). The text itself is not changed. */
void coh_str_trim(const char **s, size_t *len);

/* The strict reader of a whole number that the environment's and files' knobs share: 1 when s
 * is decimal digits alone (no blank, no sign, not empty) worth at most max (>= 0), stored in
 * *out; 0 otherwise, *out untouched. strtol would take " 4" and "+4" as 4. */
int coh_str_uint(const char *s, long max, long *out);

/* 1 when s begins with prefix (every string begins with ""), 0 otherwise. */
int coh_str_starts(const char *s, const char *prefix);

#endif
