/* st_write.c: writes safetensors files atomically, with a checksum in the metadata. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/json_writer.h"
#include "train/ckpt/atomic_file.h"
#include "train/ckpt/ckpt_int.h"
#include "train/data/strmap.h"

/* Bytes of a tensor, or an error naming it (bad dtype, rank, dimension, or an overflow; no
 * data when `need_data`). */
static coh_status tensor_bytes(const coh_st_tensor *t, int need_data, uint64_t *out)
{
    size_t es = coh_st_dtype_size(t->dtype);
    if (!es)
        return coh_errf(COH_ERR_INVALID, "tensor '%s': invalid dtype %d", t->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > COH_ST_MAX_DIMS)
        return coh_errf(COH_ERR_INVALID, "tensor '%s': invalid rank '%d': valid are 0..%d",
                        t->name, t->ndim, COH_ST_MAX_DIMS);
    uint64_t n = es;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return coh_errf(COH_ERR_INVALID, "tensor '%s': negative dimension '%lld'", t->name,
                            (long long)t->shape[i]);
        if (t->shape[i] > 0 && n > (UINT64_MAX >> 2) / (uint64_t)t->shape[i])
            return coh_errf(COH_ERR_INVALID, "tensor '%s': too large", t->name);
        n *= (uint64_t)t->shape[i];
    }
    if (n > 0 && need_data && !t->data)
        return coh_errf(COH_ERR_INVALID, "tensor '%s': no data", t->name);
    *out = n;
    return COH_OK;
}

static coh_status check_names(const coh_st_tensor *t, size_t nt, const coh_st_meta *m,
                              size_t nm)
{
    strmap seen;
    strmap_init(&seen);
    coh_status st = COH_OK;
    for (size_t i = 0; st == COH_OK && i < nt; i++) {
        const char *name = t[i].name;
        if (!name || !*name || !strcmp(name, "__metadata__"))
            st = coh_errf(COH_ERR_INVALID, "invalid tensor name '%s' (entry %zu)",
                          name ? name : "", i);
        else if (strmap_get(&seen, name, strlen(name)))
            st = coh_errf(COH_ERR_INVALID, "duplicate tensor name '%s'", name);
        else if (strmap_put(&seen, name, strlen(name), 1) != 0)
            st = coh_errf(COH_ERR_NOMEM, "out of memory");
    }
    strmap_clear(&seen);
    for (size_t i = 0; st == COH_OK && i < nm; i++) {
        const char *k = m[i].key;
        if (!k || !*k || !m[i].value || !strcmp(k, COH_ST_CHECKSUM_KEY))
            st = coh_errf(COH_ERR_INVALID, "invalid metadata key '%s' (entry %zu)", k ? k : "",
                          i);
        else if (strmap_get(&seen, k, strlen(k)))
            st = coh_errf(COH_ERR_INVALID, "duplicate metadata key '%s'", k);
        else if (strmap_put(&seen, k, strlen(k), 1) != 0)
            st = coh_errf(COH_ERR_NOMEM, "out of memory");
    }
    strmap_release(&seen);
    return st;
}

/* The JSON header, padded with spaces so that 8 + its length is a multiple of 8. */
static coh_status build_header(const coh_st_tensor *t, size_t nt, const uint64_t *off,
                               const coh_st_meta *m, size_t nm, const char *sum, char **out,
                               size_t *len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    coh_jw w;
    coh_jw_init(&w, f, 0);
    coh_jw_object_begin(&w);
    coh_jw_key(&w, "__metadata__");
    coh_jw_object_begin(&w);
    for (size_t i = 0; i < nm; i++) {
        coh_jw_key(&w, m[i].key);
        coh_jw_string(&w, m[i].value);
    }
    coh_jw_key(&w, COH_ST_CHECKSUM_KEY);
    coh_jw_string(&w, sum);
    coh_jw_object_end(&w);
    for (size_t i = 0; i < nt; i++) {
        coh_jw_key(&w, t[i].name);
        coh_jw_object_begin(&w);
        coh_jw_key(&w, "dtype");
        coh_jw_string(&w, coh_st_dtype_name(t[i].dtype));
        coh_jw_key(&w, "shape");
        coh_jw_array_begin(&w);
        for (int d = 0; d < t[i].ndim; d++)
            coh_jw_int(&w, t[i].shape[d]);
        coh_jw_array_end(&w);
        coh_jw_key(&w, "data_offsets");
        coh_jw_array_begin(&w);
        coh_jw_uint(&w, off[i]);
        coh_jw_uint(&w, off[i + 1]);
        coh_jw_array_end(&w);
        coh_jw_object_end(&w);
    }
    coh_jw_object_end(&w);
    while ((8 + (size_t)ftell(f)) % 8)
        fputc(' ', f);
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    }
    *out = buf;
    *len = n;
    return COH_OK;
}

static coh_status write_file(const char *path, const char *header, size_t hlen,
                             const coh_st_tensor *t, size_t nt, const uint64_t *off)
{
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    atomic_file f;
    coh_status st = atomic_file_open(&f, path);
    if (st != COH_OK)
        return st;
    st = atomic_file_write(&f, lenbuf, 8);
    if (st == COH_OK)
        st = atomic_file_write(&f, header, hlen);
    for (size_t i = 0; st == COH_OK && i < nt; i++)
        if (off[i + 1] > off[i])
            st = atomic_file_write(&f, t[i].data, off[i + 1] - off[i]);
    if (st != COH_OK) {
        atomic_file_abort(&f);
        return st;
    }
    return atomic_file_commit(&f);
}

coh_status coh_st_save(const char *path, const coh_st_tensor *tensors, size_t ntensors,
                       const coh_st_meta *meta, size_t nmeta)
{
    coh_status st = check_names(tensors, ntensors, meta, nmeta);
    uint64_t *off = st == COH_OK ? malloc((ntensors + 1) * sizeof *off) : NULL;
    if (st == COH_OK && !off)
        st = coh_errf(COH_ERR_NOMEM, "out of memory");
    if (st == COH_OK)
        off[0] = 0;
    for (size_t i = 0; st == COH_OK && i < ntensors; i++) {
        uint64_t nb = 0;
        st = tensor_bytes(&tensors[i], 1, &nb);
        off[i + 1] = off[i] + nb;
    }
    if (st != COH_OK) {
        free(off);
        return coh_err_prefix(st, "cannot save '%s'", path);
    }
    uint32_t crc = 0;
    for (size_t i = 0; i < ntensors; i++)
        crc = st_sum_tensor(crc, tensors[i].name, tensors[i].dtype, tensors[i].ndim,
                            tensors[i].shape, off[i], off[i + 1]);
    for (size_t i = 0; i < nmeta; i++)
        crc = st_sum_meta(crc, meta[i].key, meta[i].value);
    for (size_t i = 0; i < ntensors; i++)
        if (off[i + 1] > off[i])
            crc = crc32c(crc, tensors[i].data, off[i + 1] - off[i]);
    char sum[16], *header = NULL;
    size_t hlen = 0;
    st_format_checksum(crc, sum);
    st = build_header(tensors, ntensors, off, meta, nmeta, sum, &header, &hlen);
    if (st == COH_OK)
        st = write_file(path, header, hlen, tensors, ntensors, off);
    free(header);
    free(off);
    return st;
}


/* Every tensor's bytes through `fill`, chunk by chunk: into the checksum (f NULL) or the file. */
static coh_status stream_pass(const coh_st_tensor *t, size_t nt, const uint64_t *off,
                              st_fill_fn fill, void *ctx, char *buf, uint32_t *crc,
                              atomic_file *f)
{
    coh_status st = COH_OK;
    for (size_t i = 0; !st && i < nt; i++)
        for (uint64_t at = 0; !st && at < off[i + 1] - off[i]; at += ST_STREAM_BUF) {
            uint64_t left = off[i + 1] - off[i] - at;
            size_t n = left < ST_STREAM_BUF ? (size_t)left : ST_STREAM_BUF;
            if (!(st = fill(ctx, i, at, buf, n)))
                st = f ? atomic_file_write(f, buf, n) : (*crc = crc32c(*crc, buf, n), COH_OK);
        }
    return st;
}

static coh_status stream_write(const char *path, const char *header, size_t hlen,
                               const coh_st_tensor *t, size_t nt, const uint64_t *off,
                               st_fill_fn fill, void *ctx, char *buf)
{
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    atomic_file f;
    coh_status st = atomic_file_open(&f, path);
    if (st)
        return st;
    if (!(st = atomic_file_write(&f, lenbuf, 8)) && !(st = atomic_file_write(&f, header, hlen)))
        st = stream_pass(t, nt, off, fill, ctx, buf, NULL, &f);
    if (st) {
        atomic_file_abort(&f);
        return st;
    }
    return atomic_file_commit(&f);
}

coh_status st_save_stream(const char *path, const coh_st_tensor *tensors, size_t ntensors,
                          const coh_st_meta *meta, size_t nmeta, st_fill_fn fill, void *ctx)
{
    coh_status st = check_names(tensors, ntensors, meta, nmeta);
    uint64_t *off = st ? NULL : malloc((ntensors + 1) * sizeof *off);
    char *buf = st ? NULL : malloc(ST_STREAM_BUF), *header = NULL;
    if (!st && (!off || !buf))
        st = coh_errf(COH_ERR_NOMEM, "out of memory");
    if (!st)
        off[0] = 0;
    for (size_t i = 0; !st && i < ntensors; i++) {
        uint64_t nb = 0;
        st = tensor_bytes(&tensors[i], 0, &nb);
        off[i + 1] = off[i] + nb;
    }
    uint32_t crc = 0;
    for (size_t i = 0; !st && i < ntensors; i++)
        crc = st_sum_tensor(crc, tensors[i].name, tensors[i].dtype, tensors[i].ndim,
                            tensors[i].shape, off[i], off[i + 1]);
    for (size_t i = 0; !st && i < nmeta; i++)
        crc = st_sum_meta(crc, meta[i].key, meta[i].value);
    if (!st) /* the checksum comes first in the header: one pass for it, one for the file */
        st = stream_pass(tensors, ntensors, off, fill, ctx, buf, &crc, NULL);
    char sum[16];
    size_t hlen = 0;
    st_format_checksum(crc, sum);
    if (!st && !(st = build_header(tensors, ntensors, off, meta, nmeta, sum, &header, &hlen)))
        st = stream_write(path, header, hlen, tensors, ntensors, off, fill, ctx, buf);
    free(header);
    free(buf);
    free(off);
    return st ? coh_err_prefix(st, "cannot save '%s'", path) : COH_OK;
}
