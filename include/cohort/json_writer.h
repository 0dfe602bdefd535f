/* json_writer.h: streaming JSON output for --json modes, metrics lines and trace files. */
#ifndef COHORT_JSON_WRITER_H
#define COHORT_JSON_WRITER_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COH_JW_MAX_DEPTH 32

/* Caller-owned writer state. Values are written in call order; commas and (when pretty)
 * indentation are inserted automatically. Not thread-safe; one writer per stream. */
typedef struct coh_jw {
    FILE *out;
    int pretty;
    int depth;
    int count[COH_JW_MAX_DEPTH]; /* values written at each level */
    int after_key;
} coh_jw;

void coh_jw_init(coh_jw *w, FILE *out, int pretty);
void coh_jw_object_begin(coh_jw *w);
void coh_jw_object_end(coh_jw *w);
void coh_jw_array_begin(coh_jw *w);
void coh_jw_array_end(coh_jw *w);
void coh_jw_key(coh_jw *w, const char *key);
void coh_jw_string(coh_jw *w, const char *s); /* NULL writes null */
void coh_jw_int(coh_jw *w, int64_t v);
void coh_jw_uint(coh_jw *w, uint64_t v);
void coh_jw_double(coh_jw *w, double v);       /* NaN and infinities write null */
void coh_jw_bool(coh_jw *w, int v);
void coh_jw_null(coh_jw *w);
/* A key and its value in one call, for the common case inside an object. */
void coh_jw_field_string(coh_jw *w, const char *key, const char *s);
void coh_jw_field_int(coh_jw *w, const char *key, int64_t v);
void coh_jw_field_uint(coh_jw *w, const char *key, uint64_t v);
void coh_jw_field_double(coh_jw *w, const char *key, double v);
void coh_jw_field_bool(coh_jw *w, const char *key, int v);
/* Ends the top-level value with a newline. */
void coh_jw_finish(coh_jw *w);

#ifdef __cplusplus
}
#endif
#endif
