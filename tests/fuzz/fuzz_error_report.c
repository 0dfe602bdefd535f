/* fuzz_error_report.c: libFuzzer target for what cohort run does with a worker's error file
 * (TORCHELASTIC_ERROR_FILE, the worker's to write): the failure time it gives, and the report
 * rewritten for the launcher's own error file. A JSON object must come out as a JSON object
 * with the same time and, when its message is an object, that errorCode; anything else must
 * give no report; rewriting a rewritten report changes nothing. The launcher's own report of
 * any message must read back with that message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "launch/agent.h"
#include "util/json.h"

#define CODE (-11) /* a worker killed by SIGSEGV, as torchrun writes its exitcode */

/* The failure time text gives, or -2 when text is no JSON. */
static double time_of(const char *text, size_t len, int *is_object, int *message_is_object)
{
    json_doc *doc = NULL;
    if (json_parse(text, len, &doc) != COH_OK)
        return -2;
    const json_value *root = json_root(doc);
    double t = error_report_time(root);
    if (t != -1 && (t < 0 || t > 1e18 || t != (double)(long long)t))
        abort();
    const json_value *m = json_get(root, "message");
    *is_object = root->type == JSON_OBJECT;
    *message_is_object = m && m->type == JSON_OBJECT;
    if (*message_is_object) {
        const json_value *code = json_get(m, "errorCode");
        *message_is_object = code && code->type == JSON_NUMBER && code->u.num.is_integer &&
                             code->u.num.integer == CODE ? 2 : 1;
    }
    json_free(doc);
    return t;
}

static void check_own(const uint8_t *data, size_t size)
{
    char *message = malloc(size + 1);
    memcpy(message, data, size);
    message[size] = '\0';
    size_t len = 0;
    char *own = error_report_own(message, 1700000000.5, &len);
    json_doc *doc = NULL;
    if (!own || json_parse(own, len, &doc) != COH_OK)
        abort();
    const json_value *m = json_get(json_get(json_root(doc), "message"), "message");
    if (!m || m->type != JSON_STRING || strcmp(m->u.str.chars, message) ||
        error_report_time(json_root(doc)) != 1700000000)
        abort();
    json_free(doc);
    free(own);
    free(message);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    const char *text = (const char *)data;
    int is_object = 0, message_object = 0;
    double t = time_of(text, size, &is_object, &message_object);
    size_t len = 0;
    char *out = error_report_rewrite(text, size, CODE, &len);
    if (!out) {
        if (t != -2 && is_object)
            abort(); /* a JSON object is a report: it must be passed on */
        check_own(data, size);
        return 0;
    }
    if (t == -2 || !is_object)
        abort(); /* no report was made one */
    int out_object = 0, out_message = 0;
    double out_t = time_of(out, len, &out_object, &out_message);
    if (out_t != t || !out_object || (message_object && out_message != 2) ||
        (!message_object && out_message))
        abort();
    size_t again_len = 0;
    char *again = error_report_rewrite(out, len, CODE, &again_len);
    if (!again || again_len != len || memcmp(again, out, len))
        abort();
    free(again);
    free(out);
    check_own(data, size);
    return 0;
}
