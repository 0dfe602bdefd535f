/* test_train_export.c: `cohort export`'s library side (coh_ckpt_export): the file it streams
 * from a committed checkpoint is byte-identical to the plain file coh_gpt_save_arena_dtype
 * writes of the same weights, in fp32 and in bf16 (an embedding over the 1 MiB stream buffer,
 * so chunks are crossed); bf16 widened back to fp32 and rounded again gives the bf16 file; and
 * bad input is refused, naming it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_files.h"
#include "cohort/train_ckpt.h"
#include "train/ckpt/gpt_ckpt_int.h"

static char dir[4096];

static char *at(const char *name)
{
    static char buf[4][4200];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* 1 when both files exist and hold the same bytes. */
static int same_bytes(const char *a, const char *b)
{
    size_t na, nb;
    char *x = test_slurp(a, &na), *y = test_slurp(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

static const coh_gpt_config cfg = {.layers = 1, .heads = 2, .dim = 64, .vocab = 20000, .seq = 16};

/* Weights with every rounding case bf16 meets: ties, NaN, infinities, denormals, signs. */
static float *weights(size_t *n)
{
    *n = coh_gpt_param_count(&cfg);
    float *p = malloc(*n * sizeof *p);
    uint32_t s = 12345;
    for (size_t i = 0; i < *n; i++) {
        s = s * 1664525u + 1013904223u;
        uint32_t w = s;
        if (i % 97 == 0)
            w = (w & 0xffff0000u) | 0x8000u; /* a tie */
        memcpy(&p[i], &w, 4);
        if (isnan(p[i]) || isinf(p[i]))
            p[i] = (float)(s >> 8) * 1e-7f;
    }
    p[1] = NAN;
    p[2] = INFINITY;
    p[3] = -1e-40f;
    return p;
}

static void byte_identical(void)
{
    size_t n;
    float *p = weights(&n);
    CHECK(cfg.vocab * cfg.dim * 4 > (1 << 20)); /* the embedding spans several stream chunks */
    CHECK_OK(coh_gpt_save_arena_dtype(&cfg, p, at("plain32"), "byte", 7, COH_ST_F32));
    CHECK_OK(coh_gpt_save_arena_dtype(&cfg, p, at("plain16"), "byte", 7, COH_ST_BF16));
    CHECK_OK(gpt_save_commit(&cfg, p, at("ck"), "byte", (ckpt_tag){7, 0}, 0));
    CHECK(!same_bytes(at("ck"), at("plain32"))); /* the commit names its state file */
    CHECK_OK(coh_ckpt_export(at("ck"), at("e32"), COH_ST_F32));
    CHECK_OK(coh_ckpt_export(at("ck"), at("e16"), COH_ST_BF16));
    CHECK(same_bytes(at("e32"), at("plain32")));
    CHECK(same_bytes(at("e16"), at("plain16")));
    /* bf16 -> fp32 is exact, so rounding it again gives the same bf16 file */
    CHECK_OK(coh_ckpt_export(at("plain16"), at("w32"), COH_ST_F32));
    CHECK_OK(coh_ckpt_export(at("w32"), at("r16"), COH_ST_BF16));
    CHECK(same_bytes(at("r16"), at("plain16")));
    CHECK(!same_bytes(at("w32"), at("plain32")));
    free(p);
}

static void refused(void)
{
    CHECK_FAILS(coh_ckpt_export(at("missing"), at("x"), COH_ST_F32), COH_ERR_NOT_FOUND, "missing");
    CHECK_FAILS(coh_ckpt_export(at("ck"), at("x"), COH_ST_I64), COH_ERR_INVALID, "'I64'");
    /* a file without the model's tensors */
    float v[4] = {1, 2, 3, 4};
    coh_st_tensor t = {"transformer.wte.weight", COH_ST_F32, 2, {2, 2}, v, 0};
    CHECK_OK(coh_st_save(at("partial"), &t, 1, NULL, 0));
    CHECK_FAILS(coh_ckpt_export(at("partial"), at("x"), COH_ST_F32), COH_ERR_INVALID, "partial");
    FILE *f = fopen(at("x"), "rb");
    CHECK(!f); /* nothing written on failure */
    if (f)
        fclose(f);
}

int main(void)
{
    if (test_tmpdir(dir, sizeof dir, "cohort-export"))
        return 1;
    RUN(byte_identical);
    RUN(refused);
    test_rmtree(dir);
    return CHECK_REPORT();
}
