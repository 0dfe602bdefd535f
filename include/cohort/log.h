/* log.h: cohort's one-line diagnostics on stderr ("cohort: note: ..."), with a level set by
 * COHORT_LOG=quiet|error|warn|info|debug (default info). */
#ifndef COHORT_LOG_H
#define COHORT_LOG_H

#include "cohort/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum coh_log_level {
    COH_LOG_QUIET = 0,
    COH_LOG_ERROR,
    COH_LOG_WARN,
    COH_LOG_INFO,
    COH_LOG_DEBUG
} coh_log_level;

/* A level by name: quiet, error, warn, info or debug. COH_ERR_INVALID naming the text and the
 * valid names otherwise. */
coh_status coh_log_level_parse(const char *text, coh_log_level *out);

/* Current level (read from COHORT_LOG on first use unless set; a value that is not a level's
 * name is said in one warning and the default, info, is used). */
coh_log_level coh_log_get_level(void);
void coh_log_set_level(coh_log_level level);

/* Write "cohort: <kind>: message\n" to stderr in one write() so lines of concurrent processes
 * never interleave. Thread-safe. */
void coh_log(coh_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define coh_error(...) coh_log(COH_LOG_ERROR, __VA_ARGS__)
#define coh_warn(...) coh_log(COH_LOG_WARN, __VA_ARGS__)
#define coh_info(...) coh_log(COH_LOG_INFO, __VA_ARGS__)
#define coh_debug(...) coh_log(COH_LOG_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
