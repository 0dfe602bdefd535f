/* error_report.c: error reports in PyTorch's TORCHELASTIC_ERROR_FILE form: the failure time a
 * worker's report gives. */
#include <stdlib.h>
#include <string.h>

#include "launch/agent.h"
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
