/* export.c: a checkpoint's weights as the plain Hugging Face GPT-2 file, streamed tensor by
 * tensor through one bounded buffer (cohort export), from either layout. */
#include <stdlib.h>
#include <string.h>

#include "cohort/train_ckpt.h"
#include "train/ckpt/ckpt_int.h"
#include "train/ckpt/dev_io.h"
#include "train/ckpt/gpt_ckpt_int.h"
#include "train/ckpt/shard.h"

/* Floats read from the pieces at a time, for a bf16 export's rounding. */
#define EXPORT_CHUNK 16384

typedef struct export_src {
    ckpt_src *src;       /* the checkpoint's weights, whole-arena ranges */
    const size_t *off;   /* each written tensor's offset in the whole arena */
    coh_st_dtype dtype;  /* written */
    float tmp[EXPORT_CHUNK];
} export_src;

static coh_status fill(void *ctx, size_t i, uint64_t at, void *buf, size_t n)
{
    export_src *e = ctx;
    if (e->dtype == COH_ST_F32) /* widened from bf16 pieces as read */
        return ckpt_src_read(e->src, CKPT_W, e->off[i] + at / 4, n / 4, buf);
    coh_status st = COH_OK;
    for (size_t k = 0; !st && k < n / 2; k += EXPORT_CHUNK) { /* the save's own rounding */
        size_t m = n / 2 - k < EXPORT_CHUNK ? n / 2 - k : EXPORT_CHUNK;
        if (!(st = ckpt_src_read(e->src, CKPT_W, e->off[i] + at / 2 + k, m, e->tmp)))
            ckpt_round_bf16((uint16_t *)buf + k, e->tmp, m); /* host memory: the host rounds */
    }
    return st;
}

/* The written tensors (HF order and names of the whole model) and their arena offsets. */
static void list(const coh_gpt_config *c, coh_st_dtype dtype, coh_st_tensor *t,
                 coh_tensor_info *info, size_t *off)
{
    for (int i = 0; i < coh_gpt_tensor_count(c); i++) {
        coh_gpt_tensor(c, i, &info[i]);
        t[i] = (coh_st_tensor){.name = info[i].name, .dtype = dtype, .ndim = info[i].ndim};
        t[i].shape[0] = (int64_t)info[i].shape[0];
        t[i].shape[1] = (int64_t)info[i].shape[1];
        off[i] = info[i].offset;
    }
}

static coh_status export_open(const coh_st_file *f, const char *ckpt, const char *out,
                              coh_st_dtype dtype)
{
    coh_gpt_config c;
    char tok[64];
    const char *sstep = coh_st_meta_get(f, "step");
    coh_status st = gpt_config_from_file(f, ckpt, 0, &c, tok, sizeof tok);
    if (st)
        return st;
    int n = coh_gpt_tensor_count(&c);
    coh_st_tensor *t = calloc((size_t)n, sizeof *t);
    coh_tensor_info *info = calloc((size_t)n, sizeof *info);
    size_t *off = calloc((size_t)n, sizeof *off);
    export_src *e = malloc(sizeof *e);
    st = t && info && off && e ? ckpt_src_open(f, ckpt, NULL, 0, &e->src)
                               : coh_errf(COH_ERR_NOMEM, "out of memory exporting '%s'", ckpt);
    if (!st) {
        list(&c, dtype, t, info, off);
        gpt_meta_text m;
        size_t nm = gpt_weights_meta(&c, tok, sstep ? atol(sstep) : 0, NULL, &m);
        e->off = off;
        e->dtype = dtype;
        st = st_save_stream(out, t, (size_t)n, m.meta, nm, fill, e);
        ckpt_src_close(e->src);
    }
    free(e);
    free(t);
    free(info);
    free(off);
    return st;
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
    st = export_open(f, ckpt, out, dtype);
    coh_st_close(f);
    return st;
}
