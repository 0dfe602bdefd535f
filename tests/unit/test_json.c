/* test_json.c: the JSON reader against RFC 8259 cases, error positions, and the json writer. */
#include <stdlib.h>

#include "check.h"
#include "cohort/json_writer.h"
#include "util/json.h"

static const json_value *parse_ok(const char *text, json_doc **doc)
{
    coh_status s = json_parse(text, strlen(text), doc);
    if (s != COH_OK) {
        fprintf(stderr, "parse of '%s' failed: %s\n", text, coh_last_error());
        check_failures++;
        return NULL;
    }
    return json_root(*doc);
}

static void test_values(void)
{
    json_doc *doc;
    const json_value *v = parse_ok(" {\"a\": [1, -2.5e3, \"x\\u00e9\\ud83d\\ude00\\n\", true, false, null],"
                                   " \"big\": 9007199254740993, \"neg\": -0}",
                                   &doc);
    if (!v)
        return;
    CHECK_INT(v->type, JSON_OBJECT);
    CHECK_INT(v->u.obj.count, 3);
    const json_value *a = json_get(v, "a");
    CHECK(a && a->type == JSON_ARRAY && a->u.arr.count == 6);
    CHECK(a->u.arr.items[0]->u.num.is_integer && a->u.arr.items[0]->u.num.integer == 1);
    CHECK(!a->u.arr.items[1]->u.num.is_integer && a->u.arr.items[1]->u.num.value == -2500.0);
    CHECK_STR(a->u.arr.items[2]->u.str.chars, "x\xc3\xa9\xf0\x9f\x98\x80\n");
    CHECK_INT(a->u.arr.items[2]->u.str.len, 8);
    CHECK(a->u.arr.items[3]->type == JSON_BOOL && a->u.arr.items[3]->u.boolean == 1);
    CHECK(a->u.arr.items[4]->type == JSON_BOOL && a->u.arr.items[4]->u.boolean == 0);
    CHECK(a->u.arr.items[5]->type == JSON_NULL);
    /* Integers beyond 2^53 stay exact. */
    CHECK(json_get(v, "big")->u.num.integer == 9007199254740993LL);
    CHECK(json_get(v, "missing") == NULL);
    CHECK_INT(a->line, 1);
    CHECK_INT(a->col, 8);
    json_free(doc);
}

static void test_errors(void)
{
    json_doc *doc;
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"", "expected a value"},
        {"{\"a\":1,}", "expected a string key"},
        {"[1 2]", "expected ',' or ']'"},
        {"{\"a\":1,\"a\":2}", "duplicate key 'a'"},
        {"\"abc", "unterminated string"},
        {"\"\\x\"", "invalid escape"},
        {"\"\\ud800\"", "unpaired surrogate"},
        {"01", "unexpected text after the value"},
        {"1.", "digit expected after '.'"},
        {"tru", "invalid literal"},
        {"{} x", "unexpected text"},
        {"\"a\tb\"", "control character"},
        {"{\n\n  \"k\": nul}", "line 3 column 8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        coh_err_clear();
        coh_status s = json_parse(bad[i].text, strlen(bad[i].text), &doc);
        if (s != COH_ERR_INVALID || doc != NULL || !strstr(coh_last_error(), bad[i].needle)) {
            fprintf(stderr, "case %zu '%s': status %s, message '%s', expected '%s'\n", i,
                    bad[i].text, coh_status_name(s), coh_last_error(), bad[i].needle);
            check_failures++;
        }
    }
    /* Depth limit: 300 nested arrays are refused, 200 accepted. */
    char deep[701];
    memset(deep, '[', 300);
    memset(deep + 300, ']', 300);
    deep[600] = '\0';
    CHECK_FAILS(json_parse(deep, 600, &doc), COH_ERR_INVALID, "nesting deeper than 256");
    CHECK_OK(json_parse(deep + 100, 400, &doc));
    json_free(doc);
}

static void test_large_object(void)
{
    /* 50k keys, as in a tokenizer table: parsing must stay fast (hash-based duplicate check). */
    size_t cap = 50000 * 24 + 16, n = 0;
    char *text = malloc(cap);
    text[n++] = '{';
    for (int i = 0; i < 50000; i++)
        n += (size_t)snprintf(text + n, cap - n, "%s\"k%d\":%d", i ? "," : "", i, i);
    text[n++] = '}';
    json_doc *doc;
    CHECK_OK(json_parse(text, n, &doc));
    CHECK_INT(json_root(doc)->u.obj.count, 50000);
    CHECK_INT(json_get(json_root(doc), "k49999")->u.num.integer, 49999);
    json_free(doc);
    text[n - 1] = ',';
    n += (size_t)snprintf(text + n - 0, cap - n, "\"k17\":0}");
    CHECK_FAILS(json_parse(text, n, &doc), COH_ERR_INVALID, "duplicate key 'k17'");
    free(text);
}

static void test_writer_roundtrip(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    coh_jw w;
    coh_jw_init(&w, f, 1);
    coh_jw_object_begin(&w);
    coh_jw_field_string(&w, "name", "q\"uote\\ \n\x01");
    coh_jw_key(&w, "list");
    coh_jw_array_begin(&w);
    coh_jw_int(&w, -3);
    coh_jw_uint(&w, 18446744073709551615ull);
    coh_jw_double(&w, 0.1);
    coh_jw_double(&w, NAN);
    coh_jw_bool(&w, 1);
    coh_jw_null(&w);
    coh_jw_array_end(&w);
    coh_jw_key(&w, "empty");
    coh_jw_object_begin(&w);
    coh_jw_object_end(&w);
    coh_jw_field_int(&w, "i", -7);
    coh_jw_field_uint(&w, "u", 9007199254740993ull);
    coh_jw_field_double(&w, "d", 2.5);
    coh_jw_field_bool(&w, "b", 0);
    coh_jw_object_end(&w);
    coh_jw_finish(&w);
    fclose(f);
    json_doc *doc;
    const json_value *v = parse_ok(buf, &doc);
    if (v) {
        CHECK_STR(json_get(v, "name")->u.str.chars, "q\"uote\\ \n\x01");
        const json_value *l = json_get(v, "list");
        CHECK_INT(l->u.arr.count, 6);
        CHECK(l->u.arr.items[2]->u.num.value == 0.1);
        CHECK(l->u.arr.items[3]->type == JSON_NULL);
        CHECK(json_get(v, "empty")->type == JSON_OBJECT);
        CHECK(json_get(v, "i")->u.num.value == -7);
        CHECK(json_get(v, "d")->u.num.value == 2.5);
        CHECK(json_get(v, "b")->type == JSON_BOOL && json_get(v, "b")->u.boolean == 0);
        json_free(doc);
    }
    CHECK(strstr(buf, "\"u\": 9007199254740993") != NULL); /* exact beyond 2^53 */
    CHECK(strstr(buf, "0.1,") != NULL); /* shortest exact form, not 0.10000000000000001 */
    free(buf);
}

int main(void)
{
    RUN(test_values);
    RUN(test_errors);
    RUN(test_large_object);
    RUN(test_writer_roundtrip);
    return CHECK_REPORT();
}
