/* st_read.c: reads safetensors files: maps them, validates every byte of the layout and the
 * checksum, and copies tensors into caller buffers with dtype and shape checks. */
#define _GNU_SOURCE /* qsort_r */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/ckpt/ckpt_int.h"
#include "train/data/file_map.h"
#include "train/data/strmap.h"
#include "util/json.h"
#include "util/strutil.h"

struct coh_st_file {
    char *name;
    file_map map;           /* when opened from a path */
    const unsigned char *data; /* the data section */
    uint64_t data_len;
    coh_st_tensor *tensors;
    uint64_t *begin;        /* data offset of each tensor */
    size_t count;
    coh_st_meta *meta;
    size_t nmeta;
    strmap index;           /* name -> tensor index */
    json_doc *doc;          /* the header: names and metadata point into it */
    int has_checksum;
};

static coh_status bad(const coh_st_file *f, const char *tensor, const char *fmt, const char *a,
                      long long x, long long y)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, a, x, y);
    if (tensor)
        return coh_errf(COH_ERR_INVALID, "'%s': tensor '%s': %s", f->name, tensor, msg);
    return coh_errf(COH_ERR_INVALID, "'%s': %s", f->name, msg);
}

static coh_status read_meta(coh_st_file *f, const json_value *v)
{
    if (v->type != JSON_OBJECT)
        return bad(f, NULL, "__metadata__ is %s, expected an object of strings",
                   json_type_name(v->type), 0, 0);
    f->meta = calloc(v->u.obj.count + 1, sizeof *f->meta);
    if (!f->meta)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < v->u.obj.count; i++) {
        const json_value *s = v->u.obj.values[i];
        if (s->type != JSON_STRING)
            return bad(f, NULL, "__metadata__ value of '%s' is not a string",
                       v->u.obj.keys[i], 0, 0);
        f->meta[i].key = v->u.obj.keys[i];
        f->meta[i].value = s->u.str.chars;
        f->nmeta++;
    }
    return COH_OK;
}

static coh_status read_shape(coh_st_file *f, const char *name, const json_value *v,
                             coh_st_tensor *t)
{
    if (!v || v->type != JSON_ARRAY)
        return bad(f, name, "missing or non-array 'shape'", NULL, 0, 0);
    if (v->u.arr.count > COH_ST_MAX_DIMS)
        return bad(f, name, "%s%lld dimensions, at most %lld are supported", "",
                   (long long)v->u.arr.count, COH_ST_MAX_DIMS);
    t->ndim = (int)v->u.arr.count;
    for (int i = 0; i < t->ndim; i++) {
        const json_value *d = v->u.arr.items[i];
        if (d->type != JSON_NUMBER || !d->u.num.is_integer || d->u.num.integer < 0)
            return bad(f, name, "%sdimension %lld of 'shape' is not a non-negative integer", "",
                       i, 0);
        t->shape[i] = d->u.num.integer;
    }
    return COH_OK;
}

static coh_status read_offsets(coh_st_file *f, const char *name, const json_value *v,
                               uint64_t *b, uint64_t *e)
{
    if (!v || v->type != JSON_ARRAY || v->u.arr.count != 2)
        return bad(f, name, "missing 'data_offsets' [begin, end]", NULL, 0, 0);
    for (int i = 0; i < 2; i++) {
        const json_value *d = v->u.arr.items[i];
        if (d->type != JSON_NUMBER || !d->u.num.is_integer || d->u.num.integer < 0)
            return bad(f, name, "%s'data_offsets' entry %lld is not a non-negative integer", "",
                       i, 0);
    }
    *b = (uint64_t)v->u.arr.items[0]->u.num.integer;
    *e = (uint64_t)v->u.arr.items[1]->u.num.integer;
    if (*b > *e || *e > f->data_len)
        return bad(f, name, "%sdata_offsets [%lld, %lld] out of range of the data section", "",
                   (long long)*b, (long long)*e);
    return COH_OK;
}

/* Bytes the dtype and shape need, or UINT64_MAX on overflow. */
static uint64_t shape_bytes(const coh_st_tensor *t)
{
    uint64_t n = coh_st_dtype_size(t->dtype);
    for (int i = 0; i < t->ndim; i++) {
        uint64_t d = (uint64_t)t->shape[i];
        if (d && n > UINT64_MAX / d)
            return UINT64_MAX;
        n *= d;
    }
    return n;
}

static coh_status read_tensor(coh_st_file *f, const char *name, const json_value *v,
                              size_t idx)
{
    if (v->type != JSON_OBJECT)
        return bad(f, name, "entry is %s, expected an object", json_type_name(v->type), 0, 0);
    for (size_t i = 0; i < v->u.obj.count; i++) {
        const char *k = v->u.obj.keys[i];
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return bad(f, name, "unknown field '%s' (valid: dtype, shape, data_offsets)", k, 0,
                       0);
    }
    coh_st_tensor *t = &f->tensors[idx];
    t->name = name;
    const json_value *dt = json_get(v, "dtype");
    if (!dt || dt->type != JSON_STRING)
        return bad(f, name, "missing 'dtype'", NULL, 0, 0);
    if (coh_st_dtype_parse(dt->u.str.chars, &t->dtype) != COH_OK)
        return coh_err_prefix(COH_ERR_INVALID, "'%s': tensor '%s'", f->name, name);
    coh_status st = read_shape(f, name, json_get(v, "shape"), t);
    uint64_t b = 0, e = 0;
    if (st == COH_OK)
        st = read_offsets(f, name, json_get(v, "data_offsets"), &b, &e);
    if (st != COH_OK)
        return st;
    uint64_t need = shape_bytes(t);
    if (need == UINT64_MAX)
        return bad(f, name, "%sits shape holds too many elements", "", 0, 0);
    if (need != e - b)
        return bad(f, name, "its dtype %s and shape need %lld bytes but its data_offsets span "
                   "%lld", coh_st_dtype_name(t->dtype), (long long)need, (long long)(e - b));
    f->begin[idx] = b;
    t->nbytes = e - b;
    t->data = f->data + b;
    if (strmap_put(&f->index, name, strlen(name), (int64_t)idx) != 0)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    return COH_OK;
}

static int cmp_span(const void *a, const void *b, void *ctx)
{
    const coh_st_file *f = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    if (f->begin[i] != f->begin[j])
        return f->begin[i] < f->begin[j] ? -1 : 1;
    uint64_t ei = f->begin[i] + f->tensors[i].nbytes, ej = f->begin[j] + f->tensors[j].nbytes;
    return ei < ej ? -1 : ei > ej;
}

/* The tensors must tile the data section exactly: no overlap, no gap, nothing after. */
static coh_status check_tiling(coh_st_file *f)
{
    size_t *order = malloc((f->count + 1) * sizeof *order);
    if (!order)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < f->count; i++)
        order[i] = i;
    qsort_r(order, f->count, sizeof *order, cmp_span, f);
    uint64_t at = 0;
    const char *prev = NULL;
    coh_status st = COH_OK;
    for (size_t k = 0; st == COH_OK && k < f->count; k++) {
        const coh_st_tensor *t = &f->tensors[order[k]];
        uint64_t b = f->begin[order[k]];
        if (b < at)
            st = coh_errf(COH_ERR_INVALID, "'%s': tensors '%s' and '%s' overlap in the data",
                          f->name, prev, t->name);
        else if (b > at)
            st = coh_errf(COH_ERR_INVALID,
                          "'%s': bytes %llu..%llu of the data belong to no tensor (before '%s')",
                          f->name, (unsigned long long)at, (unsigned long long)b, t->name);
        at = b + t->nbytes > at ? b + t->nbytes : at;
        prev = t->name;
    }
    if (st == COH_OK && at != f->data_len)
        st = coh_errf(COH_ERR_INVALID,
                      "'%s': %llu bytes of data after the last tensor (the data section has "
                      "%llu bytes, the tensors %llu)", f->name,
                      (unsigned long long)(f->data_len - at), (unsigned long long)f->data_len,
                      (unsigned long long)at);
    free(order);
    return st;
}

static coh_status verify_checksum(coh_st_file *f)
{
    const char *stored = coh_st_meta_get(f, COH_ST_CHECKSUM_KEY);
    if (!stored)
        return COH_OK;
    f->has_checksum = 1;
    uint32_t crc = 0;
    for (size_t i = 0; i < f->count; i++) {
        const coh_st_tensor *t = &f->tensors[i];
        crc = st_sum_tensor(crc, t->name, t->dtype, t->ndim, t->shape, f->begin[i],
                            f->begin[i] + t->nbytes);
    }
    for (size_t i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta[i].key, COH_ST_CHECKSUM_KEY))
            crc = st_sum_meta(crc, f->meta[i].key, f->meta[i].value);
    crc = crc32c(crc, f->data, f->data_len);
    char sum[16];
    st_format_checksum(crc, sum);
    if (strcmp(sum, stored))
        return coh_errf(COH_ERR_INVALID,
                        "'%s': checksum mismatch (stored '%s', computed '%s'): the file is "
                        "corrupt", f->name, stored, sum);
    return COH_OK;
}

static coh_status parse_header(coh_st_file *f, const unsigned char *p, size_t size)
{
    if (size < 8)
        return coh_errf(COH_ERR_INVALID, "'%s': truncated safetensors file: %zu bytes, shorter "
                        "than the 8-byte header length", f->name, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | p[i];
    if (hlen > size - 8)
        return coh_errf(COH_ERR_INVALID, "'%s': header length %llu goes beyond the end of the "
                        "file (%zu bytes): truncated or not a safetensors file", f->name,
                        (unsigned long long)hlen, size);
    if (hlen > ST_MAX_HEADER)
        return coh_errf(COH_ERR_INVALID, "'%s': header length %llu exceeds the limit of %llu",
                        f->name, (unsigned long long)hlen, ST_MAX_HEADER);
    if (hlen < 2 || p[8] != '{')
        return coh_errf(COH_ERR_INVALID, "'%s': the header is not a JSON object", f->name);
    f->data = p + 8 + hlen;
    f->data_len = size - 8 - hlen;
    coh_status st = json_parse((const char *)p + 8, (size_t)hlen, &f->doc);
    if (st != COH_OK)
        return coh_err_prefix(st, "'%s': bad header", f->name);
    const json_value *root = json_root(f->doc);
    if (root->type != JSON_OBJECT)
        return coh_errf(COH_ERR_INVALID, "'%s': the header is not a JSON object", f->name);
    size_t n = root->u.obj.count;
    f->tensors = calloc(n + 1, sizeof *f->tensors);
    f->begin = calloc(n + 1, sizeof *f->begin);
    if (!f->tensors || !f->begin)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == COH_OK && i < n; i++) {
        const char *key = root->u.obj.keys[i];
        if (strlen(key) != root->u.obj.key_lens[i])
            st = coh_errf(COH_ERR_INVALID, "'%s': a tensor name holds a NUL character", f->name);
        else if (!strcmp(key, "__metadata__"))
            st = read_meta(f, root->u.obj.values[i]);
        else
            st = read_tensor(f, key, root->u.obj.values[i], f->count++);
    }
    if (st == COH_OK)
        st = check_tiling(f);
    if (st == COH_OK)
        st = verify_checksum(f);
    return st;
}

coh_status coh_st_open_memory(const void *data, size_t size, const char *name, coh_st_file **out)
{
    *out = NULL;
    coh_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->name = strdup(name))) {
        free(f);
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    }
    strmap_init(&f->index);
    coh_status st = parse_header(f, data, size);
    if (st != COH_OK) {
        coh_st_close(f);
        return st;
    }
    *out = f;
    return COH_OK;
}

coh_status coh_st_open(const char *path, coh_st_file **out)
{
    *out = NULL;
    file_map m;
    coh_status st = file_map_open(&m, path);
    if (st != COH_OK)
        return st;
    st = coh_st_open_memory(m.data, m.size, path, out);
    if (st != COH_OK) {
        file_map_close(&m);
        return st;
    }
    (*out)->map = m;
    return COH_OK;
}

void coh_st_close(coh_st_file *f)
{
    if (!f)
        return;
    file_map_close(&f->map);
    json_free(f->doc);
    strmap_release(&f->index);
    free(f->tensors);
    free(f->begin);
    free(f->meta);
    free(f->name);
    free(f);
}

size_t coh_st_count(const coh_st_file *f)
{
    return f->count;
}

const coh_st_tensor *coh_st_at(const coh_st_file *f, size_t i)
{
    return i < f->count ? &f->tensors[i] : NULL;
}

const coh_st_tensor *coh_st_find(const coh_st_file *f, const char *name)
{
    const int64_t *i = strmap_get(&f->index, name, strlen(name));
    return i ? &f->tensors[*i] : NULL;
}

const char *coh_st_meta_get(const coh_st_file *f, const char *key)
{
    for (size_t i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta[i].key, key))
            return f->meta[i].value;
    return NULL;
}

size_t st_meta_count(const coh_st_file *f)
{
    return f->nmeta;
}

const coh_st_meta *st_meta_at(const coh_st_file *f, size_t i)
{
    return i < f->nmeta ? &f->meta[i] : NULL;
}

int coh_st_has_checksum(const coh_st_file *f)
{
    return f->has_checksum;
}

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t cap)
{
    size_t n = 0;
    coh_str_append(buf, cap, &n, "[");
    for (int i = 0; i < ndim; i++)
        coh_str_append(buf, cap, &n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    coh_str_append(buf, cap, &n, "]");
}

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0x1F)
        bits = sign | 0x7F800000u | man << 13;
    else if (exp)
        bits = sign | (exp + 112) << 23 | man << 13;
    else if (!man)
        bits = sign;
    else { /* subnormal: normalise */
        exp = 113;
        while (!(man & 0x400)) {
            man <<= 1;
            exp--;
        }
        bits = sign | exp << 23 | (man & 0x3FF) << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void convert_to_f32(const coh_st_tensor *t, float *dst)
{
    const unsigned char *p = t->data;
    uint64_t n = t->nbytes / 2;
    for (uint64_t i = 0; i < n; i++) {
        uint16_t v = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        if (t->dtype == COH_ST_F16)
            dst[i] = half_to_float(v);
        else {
            uint32_t bits = (uint32_t)v << 16;
            memcpy(&dst[i], &bits, 4);
        }
    }
}

coh_status st_check_tensor(const coh_st_file *f, const char *name, coh_st_dtype dtype, int ndim,
                           const int64_t *shape, const coh_st_tensor **out)
{
    const coh_st_tensor *t = coh_st_find(f, name);
    *out = t;
    if (!t)
        return coh_errf(COH_ERR_NOT_FOUND, "'%s': no tensor '%s'", f->name, name);
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        char have[256], want[256];
        shape_text(t->ndim, t->shape, have, sizeof have);
        shape_text(ndim, shape, want, sizeof want);
        return coh_errf(COH_ERR_MISMATCH, "'%s': tensor '%s' has shape %s, expected %s", f->name,
                        name, have, want);
    }
    int widen = dtype == COH_ST_F32 && (t->dtype == COH_ST_F16 || t->dtype == COH_ST_BF16);
    if (t->dtype != dtype && !widen)
        return coh_errf(COH_ERR_MISMATCH, "'%s': tensor '%s' is %s, expected %s", f->name, name,
                        coh_st_dtype_name(t->dtype), coh_st_dtype_name(dtype));
    return COH_OK;
}

coh_status coh_st_read(const coh_st_file *f, const char *name, coh_st_dtype dtype, int ndim,
                       const int64_t *shape, void *dst)
{
    const coh_st_tensor *t;
    coh_status st = st_check_tensor(f, name, dtype, ndim, shape, &t);
    if (st)
        return st;
    int widen = t->dtype != dtype;
    if (widen)
        convert_to_f32(t, dst);
    else if (t->nbytes)
        memcpy(dst, t->data, t->nbytes);
    return COH_OK;
}
