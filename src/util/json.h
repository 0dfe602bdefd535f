/* json.h: a strict JSON (RFC 8259) reader into a read-only tree, for inventory files, model
 * configs, tokenizer tables and safetensors headers. Internal to libcohort. */
#ifndef COHORT_UTIL_JSON_H
#define COHORT_UTIL_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/status.h"

/* For readers that check a document value by value: return the first status that is not
 * COH_OK (JSON_TRY(get_int(...));). */
#define JSON_TRY(x)                                                                            \
    do {                                                                                       \
        coh_status json_try_ = (x);                                                            \
        if (json_try_ != COH_OK)                                                               \
            return json_try_;                                                                  \
    } while (0)

typedef enum json_type {
    JSON_NULL,
    JSON_BOOL,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT
} json_type;

typedef struct json_value json_value;

/* One value of the tree. Strings are NUL-terminated UTF-8 (len excludes the NUL; a string may
 * hold an escaped NUL, so use len when that matters). Objects keep their keys in file order. */
struct json_value {
    json_type type;
    int line, col;            /* where the value starts in the text, 1-based */
    union {
        int boolean;
        struct {
            double value;     /* the number as a double */
            int is_integer;   /* written without fraction or exponent and fits int64 */
            int64_t integer;  /* exact value when is_integer */
        } num;
        struct {
            char *chars;
            size_t len;
        } str;
        struct {
            json_value **items;
            size_t count;
        } arr;
        struct {
            char **keys;
            size_t *key_lens;
            json_value **values;
            size_t count;
        } obj;
    } u;
};

typedef struct json_doc json_doc;

/* Parse text[0..len). Nesting deeper than 256 levels, trailing garbage, duplicate keys and
 * invalid UTF-8 escapes are errors. On error *out is NULL and the message names the line and
 * column. */
coh_status json_parse(const char *text, size_t len, json_doc **out);

/* Read and parse a whole file; errors name the file. */
coh_status json_parse_file(const char *path, json_doc **out);

const json_value *json_root(const json_doc *doc);
void json_free(json_doc *doc);

/* Member of an object by key, or NULL (also when v is not an object). */
const json_value *json_get(const json_value *v, const char *key);

/* "object", "array", ... for error messages. */
const char *json_type_name(json_type t);

#endif
