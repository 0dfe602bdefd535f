/* dev_io.c: checkpoint tensors between device memory and files through the backend's copies:
 * a save streams each tensor through one bounded host buffer (rounding to bf16 on the host when
 * the file asks for it), a load copies each tensor from the mapped file to the device. On a GPU
 * the model's arena and the optimizer's moments are not host memory; nothing here reads them
 * any other way. */
#include <stdlib.h>
#include <string.h>

#include "train/backend/backend.h"
#include "train/ckpt/ckpt_int.h"
#include "train/ckpt/dev_io.h"

/* Floats of the host buffer a bf16 save rounds through (64 KiB). */
#define DEV_ROUND_FLOATS ((size_t)16384)

typedef struct dev_fill {
    const coh_st_tensor *t;
    float *tmp; /* DEV_ROUND_FLOATS */
} dev_fill;

void ckpt_round_bf16(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) { /* nearest even; a NaN keeps a mantissa bit */
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
        dst[i] = (u & 0x7FFFFFFFu) > 0x7F800000u ? (uint16_t)((u >> 16) | 0x40u) : (uint16_t)r;
    }
}

static coh_status fill_from_device(void *ctx, size_t i, uint64_t at, void *buf, size_t n)
{
    const dev_fill *d = ctx;
    const coh_st_tensor *t = &d->t[i];
    const coh_backend *be = coh_backend_current();
    if (t->dtype == COH_ST_F32) {
        be->copy(buf, (const char *)t->data + at, n, COH_COPY_D2H);
        return COH_OK;
    }
    /* BF16 from the f32 source: element at / 2 on, n / 2 of them */
    const float *src = (const float *)t->data + at / 2;
    uint16_t *out = buf;
    for (size_t done = 0, k = n / 2; done < k; done += DEV_ROUND_FLOATS) {
        size_t m = k - done < DEV_ROUND_FLOATS ? k - done : DEV_ROUND_FLOATS;
        be->copy(d->tmp, src + done, m * sizeof *src, COH_COPY_D2H);
        ckpt_round_bf16(out + done, d->tmp, m);
    }
    return COH_OK;
}

coh_status ckpt_save_device(const char *path, const coh_st_tensor *tensors, size_t ntensors,
                            const coh_st_meta *meta, size_t nmeta)
{
    for (size_t i = 0; i < ntensors; i++)
        if (tensors[i].dtype != COH_ST_F32 && tensors[i].dtype != COH_ST_BF16)
            return coh_errf(COH_ERR_INVALID, "cannot save '%s': tensor '%s' in %s from device "
                            "memory: F32 or BF16", path, tensors[i].name,
                            coh_st_dtype_name(tensors[i].dtype));
    dev_fill d = {tensors, malloc(DEV_ROUND_FLOATS * sizeof(float))};
    if (!d.tmp)
        return coh_errf(COH_ERR_NOMEM, "cannot save '%s': out of memory", path);
    coh_status st = st_save_stream(path, tensors, ntensors, meta, nmeta, fill_from_device, &d);
    free(d.tmp);
    return st;
}

coh_status ckpt_read_device(const coh_st_file *f, const char *name, int ndim,
                            const int64_t *shape, float *dst)
{
    const coh_st_tensor *t;
    coh_status st = st_check_tensor(f, name, COH_ST_F32, ndim, shape, &t);
    if (st || !t->nbytes)
        return st;
    const coh_backend *be = coh_backend_current();
    if (t->dtype == COH_ST_F32) { /* straight from the mapped file */
        be->copy(dst, t->data, t->nbytes, COH_COPY_H2D);
        return COH_OK;
    }
    size_t numel = (size_t)(t->nbytes / coh_st_dtype_size(t->dtype));
    float *host = malloc(numel * sizeof *host); /* widened on the host, then one copy */
    if (!host)
        return coh_errf(COH_ERR_NOMEM, "out of memory widening tensor '%s'", name);
    if (!(st = coh_st_read(f, name, COH_ST_F32, ndim, shape, host)))
        be->copy(dst, host, numel * sizeof *host, COH_COPY_H2D);
    free(host);
    return st;
}
