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
#include "train/ckpt/shard.h"

/* Floats a bf16 copy out rounds at a time, through a buffer on the stack (8 KiB). */
#define DEV_ROUND_FLOATS ((size_t)2048)

void ckpt_round_bf16(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) { /* nearest even; a NaN keeps a mantissa bit */
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
        dst[i] = (u & 0x7FFFFFFFu) > 0x7F800000u ? (uint16_t)((u >> 16) | 0x40u) : (uint16_t)r;
    }
}

void ckpt_from_device(void *buf, const float *src, size_t n, int bf16)
{
    const coh_backend *be = coh_backend_current();
    if (!bf16) {
        be->copy(buf, src, n * sizeof *src, COH_COPY_D2H);
        return;
    }
    float tmp[DEV_ROUND_FLOATS];
    for (size_t done = 0; done < n; done += DEV_ROUND_FLOATS) {
        size_t m = n - done < DEV_ROUND_FLOATS ? n - done : DEV_ROUND_FLOATS;
        be->copy(tmp, src + done, m * sizeof *src, COH_COPY_D2H);
        ckpt_round_bf16((uint16_t *)buf + done, tmp, m);
    }
}

static coh_status fill_from_device(void *ctx, size_t i, uint64_t at, void *buf, size_t n)
{
    const coh_st_tensor *t = &((const coh_st_tensor *)ctx)[i];
    int bf16 = t->dtype == COH_ST_BF16; /* 2 bytes per element of the f32 source, else 4 */
    ckpt_from_device(buf, (const float *)t->data + at / (bf16 ? 2 : 4), n / (bf16 ? 2 : 4), bf16);
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
    return st_save_stream(path, tensors, ntensors, meta, nmeta, fill_from_device,
                          (void *)tensors);
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

/* Floats a load stages on the host at a time (256 KiB). */
#define DEV_STAGE_FLOATS ((size_t)65536)

coh_status ckpt_src_read_runs(ckpt_src *s, ckpt_what w, const ckpt_runs *rs, float *base)
{
    float *tmp = malloc(DEV_STAGE_FLOATS * sizeof *tmp);
    if (!tmp)
        return coh_errf(COH_ERR_NOMEM, "out of memory staging a checkpoint read");
    const coh_backend *be = coh_backend_current();
    coh_status st = COH_OK;
    for (size_t i = 0; !st && i < rs->n; i++)
        for (size_t at = 0; !st && at < rs->r[i].len; at += DEV_STAGE_FLOATS) {
            size_t m = rs->r[i].len - at < DEV_STAGE_FLOATS ? rs->r[i].len - at : DEV_STAGE_FLOATS;
            if (!(st = ckpt_src_read(s, w, rs->r[i].whole + at, m, tmp)))
                be->copy(base + rs->r[i].src + at, tmp, m * sizeof *tmp, COH_COPY_H2D);
        }
    free(tmp);
    return st;
}
