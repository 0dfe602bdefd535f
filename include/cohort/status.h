/* status.h: cohort's one status enum and the thread-local error message behind it. */
#ifndef COHORT_STATUS_H
#define COHORT_STATUS_H

#include "cohort/version.h" /* coh_version(), which every program can name */

#ifdef __cplusplus
extern "C" {
#endif

/* Every fallible library function returns a coh_status. On failure it also leaves a readable
 * message for the calling thread (coh_last_error), set where the error was found. */
typedef enum coh_status {
    COH_OK = 0,
    COH_ERR_INVALID,     /* bad argument, spec, variable or file content */
    COH_ERR_NOMEM,       /* allocation failed */
    COH_ERR_SYSTEM,      /* a system call failed (errno is in the message) */
    COH_ERR_IO,          /* reading or writing a file failed */
    COH_ERR_NOT_FOUND,   /* a named thing (file, device, key) does not exist */
    COH_ERR_TIMEOUT,     /* a deadline expired */
    COH_ERR_PEER_LOST,   /* another rank of the job died */
    COH_ERR_MISMATCH,    /* ranks called a collective with different arguments */
    COH_ERR_UNSUPPORTED, /* not available on this machine or build */
    COH_ERR_BUSY,        /* a resource is held by someone else (e.g. a device reservation) */
    COH_ERR_INTERNAL     /* a bug in cohort */
} coh_status;

/* Short constant name of a status ("invalid argument", ...). Never NULL. */
const char *coh_status_name(coh_status s);

/* Message of the last error set on this thread; "" when none. Valid until the next call that
 * sets an error on this thread. */
const char *coh_last_error(void);

/* Set this thread's error message (printf-style) and return s, so that callers can write
 * `return coh_errf(COH_ERR_INVALID, "invalid spec '%s'", s);`. */
coh_status coh_errf(coh_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Prefix the current message with more context: "context: previous message". Returns s. */
coh_status coh_err_prefix(coh_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Clear this thread's message. */
void coh_err_clear(void);

#ifdef __cplusplus
}
#endif
#endif
