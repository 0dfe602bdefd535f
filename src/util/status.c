/* status.c: status names and the per-thread error message. */
#include "cohort/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define COH_ERRMSG_MAX 1024

static _Thread_local char errmsg[COH_ERRMSG_MAX];

const char *coh_status_name(coh_status s)
{
    switch (s) {
    case COH_OK: return "ok";
    case COH_ERR_INVALID: return "invalid argument";
    case COH_ERR_NOMEM: return "out of memory";
    case COH_ERR_SYSTEM: return "system error";
    case COH_ERR_IO: return "i/o error";
    case COH_ERR_NOT_FOUND: return "not found";
    case COH_ERR_TIMEOUT: return "timeout";
    case COH_ERR_PEER_LOST: return "peer lost";
    case COH_ERR_MISMATCH: return "collective mismatch";
    case COH_ERR_UNSUPPORTED: return "unsupported";
    case COH_ERR_BUSY: return "busy";
    case COH_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *coh_last_error(void) { return errmsg; }

void coh_err_clear(void) { errmsg[0] = '\0'; }

coh_status coh_errf(coh_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    return s;
}

coh_status coh_err_prefix(coh_status s, const char *fmt, ...)
{
    char prev[COH_ERRMSG_MAX], ctx[COH_ERRMSG_MAX];
    va_list ap;
    memcpy(prev, errmsg, sizeof prev);
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    /* Truncation of an overlong message is acceptable; it is for people. */
    size_t n = strnlen(ctx, sizeof errmsg - 1);
    memcpy(errmsg, ctx, n);
    if (prev[0] && n + 2 < sizeof errmsg) {
        memcpy(errmsg + n, ": ", 2);
        n += 2;
        size_t m = strnlen(prev, sizeof errmsg - 1 - n);
        memcpy(errmsg + n, prev, m);
        n += m;
    }
    errmsg[n] = '\0';
    return s;
}

const char *coh_version(void) { return COH_VERSION_STRING; }

int coh_version_number(void) { return COH_VERSION_NUMBER; }
