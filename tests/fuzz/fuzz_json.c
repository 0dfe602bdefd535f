/* fuzz_json.c: libFuzzer target for the JSON reader: any bytes parse or fail cleanly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"

static size_t walk(const json_value *v)
{
    size_t n = 1;
    if (v->type == JSON_ARRAY)
        for (size_t i = 0; i < v->u.arr.count; i++)
            n += walk(v->u.arr.items[i]);
    if (v->type == JSON_OBJECT)
        for (size_t i = 0; i < v->u.obj.count; i++) {
            n += walk(v->u.obj.values[i]);
            if (json_get(v, v->u.obj.keys[i]) == NULL && strlen(v->u.obj.keys[i]) == v->u.obj.key_lens[i])
                abort(); /* every key without an embedded NUL must be found */
        }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_doc *doc;
    if (json_parse((const char *)data, size, &doc) == COH_OK) {
        walk(json_root(doc));
        json_free(doc);
    }
    return 0;
}
