/* export.c: a checkpoint's weights as the plain Hugging Face GPT-2 file, streamed tensor by
 * tensor through one bounded buffer (cohort export). */
#include <stdlib.h>
#include <string.h>

#include "cohort/train_ckpt.h"
#include "train/ckpt/ckpt_int.h"
#include "train/ckpt/gpt_ckpt_int.h"
#include "train/backend/backend.h"

typedef struct export_src {
    const coh_st_tensor **src; /* the checkpoint's tensor for each written one */
    coh_st_dtype dtype;        /* written */
} export_src;

static coh_status fill(void *ctx, size_t i, uint64_t at, void *buf, size_t n)
{
    const export_src *e = ctx;
    const coh_st_tensor *s = e->src[i];
    const char *from = s->data;
    if (s->dtype == e->dtype)
        memcpy(buf, from + at, n);
    else if (e->dtype == COH_ST_BF16) /* the save's own rounding: byte-identical files */
        coh_backend_current()->to_bf16(buf, (const float *)from + at / 2, n / 2);
    else /* bf16 to f32: the upper halves */
        for (size_t k = 0; k < n / 4; k++) {
            uint32_t w = (uint32_t)((const uint16_t *)from)[at / 4 + k] << 16;
            memcpy((char *)buf + 4 * k, &w, 4);
        }
    return COH_OK;
}

/* The written tensors (HF order and names of the whole model) and their sources in f. */
static coh_status list(const coh_st_file *f, const char *path, const coh_gpt_config *c,
                       coh_st_dtype dtype, coh_st_tensor *t, coh_tensor_info *info,
                       const coh_st_tensor **src)
{
    for (int i = 0; i < coh_gpt_tensor_count(c); i++) {
        coh_gpt_tensor(c, i, &info[i]);
        const coh_st_tensor *s = coh_st_find(f, info[i].name);
        t[i] = (coh_st_tensor){.name = info[i].name, .dtype = dtype, .ndim = info[i].ndim};
        t[i].shape[0] = (int64_t)info[i].shape[0];
        t[i].shape[1] = (int64_t)info[i].shape[1];
        if (!s || s->ndim != t[i].ndim || s->shape[0] != t[i].shape[0] ||
            (s->ndim == 2 && s->shape[1] != t[i].shape[1]))
            return coh_errf(COH_ERR_INVALID, "checkpoint '%s': no tensor '%s' of the model's "
                            "shape", path, info[i].name);
        if (s->dtype != COH_ST_F32 && s->dtype != COH_ST_BF16)
            return coh_errf(COH_ERR_INVALID, "checkpoint '%s': tensor '%s' in %s: export reads "
                            "F32 or BF16", path, info[i].name, coh_st_dtype_name(s->dtype));
        src[i] = s;
    }
    return COH_OK;
}

coh_status coh_ckpt_export(const char *ckpt, const char *out, coh_st_dtype dtype)
{
    if (dtype != COH_ST_F32 && dtype != COH_ST_BF16)
        return coh_errf(COH_ERR_INVALID, "export dtype '%s': valid are F32 and BF16",
                        coh_st_dtype_name(dtype));
    coh_st_file *f;
    coh_status st = coh_st_open(ckpt, &f);
    if (st)
        return st;
    coh_gpt_config c;
    char tok[64];
    const char *sstep = coh_st_meta_get(f, "step");
    if ((st = gpt_config_from_file(f, ckpt, 0, &c, tok, sizeof tok))) {
        coh_st_close(f);
        return st;
    }
    int n = coh_gpt_tensor_count(&c);
    coh_st_tensor *t = calloc((size_t)n, sizeof *t);
    coh_tensor_info *info = calloc((size_t)n, sizeof *info);
    const coh_st_tensor **src = calloc((size_t)n, sizeof *src);
    st = t && info && src ? list(f, ckpt, &c, dtype, t, info, src)
                          : coh_errf(COH_ERR_NOMEM, "out of memory exporting '%s'", ckpt);
    if (!st) {
        gpt_meta_text m;
        size_t nm = gpt_weights_meta(&c, tok, sstep ? atol(sstep) : 0, 0, &m);
        export_src e = {src, dtype};
        st = st_save_stream(out, t, (size_t)n, m.meta, nm, fill, &e);
    }
    free(t);
    free(info);
    free(src);
    coh_st_close(f);
    return st;
}
