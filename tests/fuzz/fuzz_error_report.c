/* fuzz_error_report.c: libFuzzer target for what cohort run reads of a worker's error file
 * (TORCHELASTIC_ERROR_FILE, the worker's to write): the failure time it gives is none (-1) or
 * whole seconds within the 18 digits it takes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "launch/agent.h"
#include "util/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    json_doc *doc = NULL;
    if (json_parse((const char *)data, size, &doc) != COH_OK)
        return 0;
    double t = error_report_time(json_root(doc));
    if (t != -1 && (t < 0 || t > 1e18 || t != (double)(long long)t))
        abort();
    json_free(doc);
    return 0;
}
