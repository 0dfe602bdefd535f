/* error_report.c: error reports in PyTorch's TORCHELASTIC_ERROR_FILE form: the failure time a
 * worker's report gives, the report cohort run writes to the file its own parent named (the root
 * cause worker's report with its exit code, or the launcher's own failure), written atomically. */
#define _GNU_SOURCE /* open_memstream */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch/agent.h"
#include "train/ckpt/atomic_file.h"
#include "util/json.h"

/* A timestamp as PyTorch's error handler writes it (str(int(time.time()))) or an integer: whole
 * seconds, at most 18 digits; -1 for anything else. */
static double seconds_of(const json_value *v)
{
    if (v && v->type == JSON_NUMBER && v->u.num.is_integer && v->u.num.integer >= 0 &&
        v->u.num.integer < 1000000000000000000LL) /* 18 digits, as the text form */
        return (double)v->u.num.integer;
    if (!v || v->type != JSON_STRING || v->u.str.len == 0 || v->u.str.len > 18 ||
        strspn(v->u.str.chars, "0123456789") != v->u.str.len)
        return -1;
    return strtod(v->u.str.chars, NULL);
}

double error_report_time(const json_value *root)
{
    const json_value *m = json_get(root, "message");
    if (m && m->type == JSON_OBJECT) /* {"message": {..., "extraInfo": {"timestamp": ...}}} */
        return seconds_of(json_get(json_get(m, "extraInfo"), "timestamp"));
    if (m && m->type == JSON_STRING) /* {"message": "...", "timestamp": ...} */
        return seconds_of(json_get(root, "timestamp"));
    return -1;
}

static void put_string(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* A number as read: an integer exactly; else the shortest of %.15g and %.17g that reads back,
 * with ".0" when that looks like an integer (so it reads back as a fraction, as written), and
 * an overflow to infinity as 1e999, which reads back as one. */
static void put_number(FILE *f, const json_value *v)
{
    char buf[48];
    double d = v->u.num.value;
    if (v->u.num.is_integer) {
        fprintf(f, "%lld", (long long)v->u.num.integer);
        return;
    }
    if (!isfinite(d)) {
        fputs(d < 0 ? "-1e999" : "1e999", f);
        return;
    }
    snprintf(buf, sizeof buf, "%.15g", d);
    if (strtod(buf, NULL) != d)
        snprintf(buf, sizeof buf, "%.17g", d);
    if (strspn(buf, "-0123456789") == strlen(buf))
        strcat(buf, ".0");
    fputs(buf, f);
}

static int is_key(const json_value *obj, size_t i, const char *key)
{
    return obj->u.obj.key_lens[i] == strlen(key) && !strcmp(obj->u.obj.keys[i], key);
}

/* v as JSON text (", " and ": " between items, as Python's json.dumps); the object message gets
 * "errorCode": code last, in place of one it had. Nesting is bounded by the reader's limit. */
static void put_value(FILE *f, const json_value *v, const json_value *message, int code)
{
    size_t k = 0;
    switch (v->type) {
    case JSON_NULL: fputs("null", f); break;
    case JSON_BOOL: fputs(v->u.boolean ? "true" : "false", f); break;
    case JSON_NUMBER: put_number(f, v); break;
    case JSON_STRING: put_string(f, v->u.str.chars, v->u.str.len); break;
    case JSON_ARRAY:
        fputc('[', f);
        for (size_t i = 0; i < v->u.arr.count; i++) {
            fputs(i ? ", " : "", f);
            put_value(f, v->u.arr.items[i], message, code);
        }
        fputc(']', f);
        break;
    case JSON_OBJECT:
        fputc('{', f);
        for (size_t i = 0; i < v->u.obj.count; i++) {
            if (v == message && is_key(v, i, "errorCode"))
                continue;
            fputs(k++ ? ", " : "", f);
            put_string(f, v->u.obj.keys[i], v->u.obj.key_lens[i]);
            fputs(": ", f);
            put_value(f, v->u.obj.values[i], message, code);
        }
        if (v == message)
            fprintf(f, "%s\"errorCode\": %d", k ? ", " : "", code);
        fputc('}', f);
        break;
    }
}

char *error_report_rewrite(const char *text, size_t len, int code, size_t *out_len)
{
    json_doc *doc = NULL;
    if (json_parse(text, len, &doc) != COH_OK)
        return NULL;
    const json_value *root = json_root(doc);
    char *out = NULL;
    *out_len = 0;
    if (root->type == JSON_OBJECT) {
        /* PyTorch sets the code only in the object form of the message, and only when it is
         * not 0: a worker killed by a signal could not write it itself */
        const json_value *m = json_get(root, "message");
        if (!m || m->type != JSON_OBJECT || code == 0)
            m = NULL;
        FILE *f = open_memstream(&out, out_len);
        if (f) {
            put_value(f, root, m, code);
            if (ferror(f)) {
                fclose(f);
                free(out);
                out = NULL;
            } else if (fclose(f) != 0) {
                free(out);
                out = NULL;
            }
        }
    }
    json_free(doc);
    return out;
}

char *error_report_own(const char *message, double when, size_t *out_len)
{
    char *out = NULL;
    *out_len = 0;
    FILE *f = open_memstream(&out, out_len);
    if (!f)
        return NULL;
    fputs("{\"message\": {\"message\": ", f);
    put_string(f, message, strlen(message));
    fprintf(f, ", \"extraInfo\": {\"timestamp\": \"%lld\"}}}", (long long)when);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        free(out);
        return NULL;
    }
    return out;
}

coh_status error_report_write(const char *path, const char *text, size_t len)
{
    atomic_file af;
    coh_status st = atomic_file_open(&af, path);
    if (st == COH_OK && (st = atomic_file_write(&af, text, len)) != COH_OK)
        atomic_file_abort(&af);
    else if (st == COH_OK)
        st = atomic_file_commit(&af);
    return st;
}
