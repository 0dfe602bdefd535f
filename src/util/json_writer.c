/* json_writer.c: streaming JSON writer with escaping and optional indentation. */
#include "cohort/json_writer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void coh_jw_init(coh_jw *w, FILE *out, int pretty)
{
    memset(w, 0, sizeof *w);
    w->out = out;
    w->pretty = pretty;
}

static void indent(coh_jw *w)
{
    if (!w->pretty)
        return;
    fputc('\n', w->out);
    for (int i = 0; i < w->depth; i++)
        fputs("  ", w->out);
}

/* Separator before a value (or a key) at the current level. */
static void before_value(coh_jw *w)
{
    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    if (w->depth > 0) {
        if (w->count[w->depth] > 0)
            fputc(',', w->out);
        indent(w);
    }
    w->count[w->depth]++;
}

static void open(coh_jw *w, char c)
{
    before_value(w);
    fputc(c, w->out);
    if (w->depth < COH_JW_MAX_DEPTH - 1)
        w->depth++;
    w->count[w->depth] = 0;
}

static void close_(coh_jw *w, char c)
{
    int had = w->count[w->depth] > 0;
    if (w->depth > 0)
        w->depth--;
    if (had)
        indent(w);
    fputc(c, w->out);
}

void coh_jw_object_begin(coh_jw *w) { open(w, '{'); }
void coh_jw_object_end(coh_jw *w) { close_(w, '}'); }
void coh_jw_array_begin(coh_jw *w) { open(w, '['); }
void coh_jw_array_end(coh_jw *w) { close_(w, ']'); }

static void write_escaped(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

void coh_jw_key(coh_jw *w, const char *key)
{
    before_value(w);
    write_escaped(w->out, key);
    fputs(w->pretty ? ": " : ":", w->out);
    w->after_key = 1;
}

void coh_jw_string(coh_jw *w, const char *s)
{
    before_value(w);
    if (s)
        write_escaped(w->out, s);
    else
        fputs("null", w->out);
}

void coh_jw_int(coh_jw *w, int64_t v)
{
    before_value(w);
    fprintf(w->out, "%lld", (long long)v);
}

void coh_jw_uint(coh_jw *w, uint64_t v)
{
    before_value(w);
    fprintf(w->out, "%llu", (unsigned long long)v);
}

void coh_jw_double(coh_jw *w, double v)
{
    before_value(w);
    if (isfinite(v)) {
        /* Shortest of %.15g and %.17g that reads back exactly. */
        char buf[40];
        snprintf(buf, sizeof buf, "%.15g", v);
        if (strtod(buf, NULL) != v)
            snprintf(buf, sizeof buf, "%.17g", v);
        fputs(buf, w->out);
    } else
        fputs("null", w->out);
}

void coh_jw_bool(coh_jw *w, int v)
{
    before_value(w);
    fputs(v ? "true" : "false", w->out);
}

void coh_jw_null(coh_jw *w)
{
    before_value(w);
    fputs("null", w->out);
}

void coh_jw_finish(coh_jw *w)
{
    fputc('\n', w->out);
    fflush(w->out);
}

void coh_jw_field_string(coh_jw *w, const char *key, const char *s)
{
    coh_jw_key(w, key);
    coh_jw_string(w, s);
}

void coh_jw_field_int(coh_jw *w, const char *key, int64_t v)
{
    coh_jw_key(w, key);
    coh_jw_int(w, v);
}

void coh_jw_field_uint(coh_jw *w, const char *key, uint64_t v)
{
    coh_jw_key(w, key);
    coh_jw_uint(w, v);
}

void coh_jw_field_double(coh_jw *w, const char *key, double v)
{
    coh_jw_key(w, key);
    coh_jw_double(w, v);
}

void coh_jw_field_bool(coh_jw *w, const char *key, int v)
{
    coh_jw_key(w, key);
    coh_jw_bool(w, v);
}
