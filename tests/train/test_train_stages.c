/* test_train_stages.c: the engine's pipeline-stage entry points against the whole model: a model
 * run as stages (layer ranges, micro-batches in slots, forwards before backwards) computes the
 * same loss and gradients as one coh_gpt_step per micro-batch, bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cohort/train.h"

enum { B = 2, T = 8, MB = 3 };
static const coh_gpt_config CFG = {4, 2, 16, 37, 8, 0, 0};

static void batch(int k, int32_t *tok, int32_t *tgt)
{
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 7 + 3 * k + 1) % CFG.vocab;
        tgt[i] = (i * 5 + 11 * k + 2) % CFG.vocab;
    }
}

/* Three micro-batches through stages [0,1) [1,3) [3,4), each in its own slot, against
 * coh_gpt_step on each in turn. In the naive order (each micro-batch forward then backward) the
 * gradient sums run in the same order: bit for bit. In GPipe's order (all forwards, then the
 * backwards in reverse) the head's part of the tied embedding's gradient, which the fused head
 * adds during the forward, is summed in another order: equal within float rounding. */
static void run_stages(int gpipe, float *max_rel)
{
    coh_gpt *whole, *st;
    CHECK_OK(coh_gpt_create(&CFG, B, T, &whole));
    CHECK_OK(coh_gpt_create(&CFG, B, T, &st));
    coh_gpt_init_weights(whole, 7);
    coh_gpt_init_weights(st, 7);
    CHECK_OK(coh_gpt_set_slots(st, MB));
    coh_gpt_zero_grad(whole);
    coh_gpt_zero_grad(st);
    static int32_t tok[MB][B * T], tgt[MB][B * T];
    static float x1[MB][B * T * 16], x2[MB][B * T * 16], d2[B * T * 16], d1[B * T * 16];
    float lw[MB], ls[MB];
    const float scale = 1.0f / MB;
    for (int i = 0; i < 2 * MB; i++) {
        int fwd = gpipe ? i < MB : i % 2 == 0;
        int k = gpipe ? (fwd ? i : 2 * MB - 1 - i) : i / 2;
        if (fwd) {
            batch(k, tok[k], tgt[k]);
            CHECK_OK(coh_gpt_stage_forward(st, k, 0, 1, tok[k], NULL, NULL, B, T, scale, x1[k],
                                           NULL));
            CHECK_OK(coh_gpt_stage_forward(st, k, 1, 3, NULL, x1[k], NULL, B, T, scale, x2[k],
                                           NULL));
            CHECK_OK(coh_gpt_stage_forward(st, k, 3, 4, NULL, x2[k], tgt[k], B, T, scale, NULL,
                                           &ls[k]));
            continue;
        }
        CHECK_OK(coh_gpt_stage_backward(st, k, 3, 4, NULL, B, T, d2));
        CHECK_OK(coh_gpt_stage_backward(st, k, 1, 3, d2, B, T, d1));
        CHECK_OK(coh_gpt_stage_backward(st, k, 0, 1, d1, B, T, NULL));
        CHECK_OK(coh_gpt_step(whole, tok[k], tgt[k], B, T, scale, &lw[k]));
    }
    for (int k = 0; k < MB; k++)
        CHECK(lw[k] == ls[k]);
    size_t n;
    float *gw = coh_gpt_grads(whole, &n), *gs = coh_gpt_grads(st, NULL);
    float big = 0.0f, diff = 0.0f;
    for (size_t i = 0; i < n; i++) {
        big = fabsf(gw[i]) > big ? fabsf(gw[i]) : big;
        diff = fabsf(gw[i] - gs[i]) > diff ? fabsf(gw[i] - gs[i]) : diff;
    }
    CHECK(big > 0.0f); /* gradients were computed at all */
    *max_rel = diff / big;
    coh_gpt_destroy(whole);
    coh_gpt_destroy(st);
}

static void test_stages_equal_whole(void)
{
    float rel;
    run_stages(0, &rel);
    CHECK(rel == 0.0f);
    run_stages(1, &rel);
    printf("gpipe order: largest gradient difference %.2e of the largest gradient\n", rel);
    CHECK(rel < 1e-6f);
}

/* A stage's errors name the bad value before anything runs. */
static void test_stage_errors(void)
{
    coh_gpt *g;
    CHECK_OK(coh_gpt_create(&CFG, B, T, &g));
    int32_t tok[B * T] = {0};
    float x[B * T * 16] = {0}, loss;
    CHECK_FAILS(coh_gpt_stage_forward(g, 0, 0, 2, tok, NULL, NULL, B, T, 1.0f, x, NULL),
                COH_ERR_INVALID, "a stage needs coh_gpt_set_slots");
    CHECK_OK(coh_gpt_set_slots(g, 2));
    CHECK_FAILS(coh_gpt_set_slots(g, 3), COH_ERR_INVALID, "already set");
    CHECK_FAILS(coh_gpt_stage_forward(g, 2, 0, 2, tok, NULL, NULL, B, T, 1.0f, x, NULL),
                COH_ERR_INVALID, "invalid slot '2'");
    CHECK_FAILS(coh_gpt_stage_forward(g, 0, 3, 2, NULL, x, NULL, B, T, 1.0f, x, NULL),
                COH_ERR_INVALID, "invalid layer range 3..1");
    CHECK_FAILS(coh_gpt_stage_forward(g, 0, 0, 5, tok, NULL, tok, B, T, 1.0f, NULL, &loss),
                COH_ERR_INVALID, "invalid layer range 0..4");
    CHECK_FAILS(coh_gpt_stage_forward(g, 0, 1, 2, NULL, NULL, NULL, B, T, 1.0f, x, NULL),
                COH_ERR_INVALID, "needs its input activation");
    CHECK_FAILS(coh_gpt_stage_forward(g, 0, 2, 4, NULL, x, NULL, B, T, 1.0f, NULL, &loss),
                COH_ERR_INVALID, "targets are required");
    CHECK_FAILS(coh_gpt_stage_backward(g, 0, 0, 2, NULL, B, T, NULL), COH_ERR_INVALID,
                "needs its output's gradient");
    tok[3] = CFG.vocab;
    CHECK_FAILS(coh_gpt_stage_forward(g, 0, 0, 2, tok, NULL, NULL, B, T, 1.0f, x, NULL),
                COH_ERR_INVALID, "invalid token id '37' at 3");
    CHECK_FAILS(coh_gpt_set_slots(g, 0), COH_ERR_INVALID, "invalid slot count");
    coh_gpt_destroy(g);
}

/* A stage's model sized for blocks 1..2 alone (coh_gpt_create_stage, coh_gpt_set_stage_slots)
 * computes what the whole model's slots do for them, bit for bit, and refuses the ranges its
 * slots were not sized for. */
static void test_stage_slots(void)
{
    coh_gpt *whole, *mid;
    CHECK_OK(coh_gpt_create(&CFG, B, T, &whole));
    CHECK_OK(coh_gpt_create_stage(&CFG, B, T, &mid));
    coh_gpt_init_weights(whole, 7);
    coh_gpt_init_weights(mid, 7);
    CHECK_OK(coh_gpt_set_slots(whole, MB));
    int lo = 1, hi = 3;
    CHECK_FAILS(coh_gpt_set_slots(mid, MB), COH_ERR_INVALID, "coh_gpt_set_stage_slots");
    CHECK_FAILS(coh_gpt_set_stage_slots(mid, MB, 1, &lo, &(int){5}, 0, 0), COH_ERR_INVALID,
                "invalid layer range 1..4");
    CHECK_OK(coh_gpt_set_stage_slots(mid, MB, 1, &lo, &hi, 0, 0));
    CHECK_FAILS(coh_gpt_set_stage_slots(mid, MB, 1, &lo, &hi, 0, 0), COH_ERR_INVALID, "once");
    coh_gpt_zero_grad(whole);
    coh_gpt_zero_grad(mid);
    static float x[B * T * 16], yw[B * T * 16], ym[B * T * 16], dw[B * T * 16], dm[B * T * 16];
    for (int k = 0; k < MB; k++) {
        for (int i = 0; i < B * T * 16; i++)
            x[i] = (float)((i * 13 + k * 7) % 29) / 29.0f - 0.5f;
        CHECK_OK(coh_gpt_stage_forward(whole, k, lo, hi, NULL, x, NULL, B, T, 0.5f, yw, NULL));
        CHECK_OK(coh_gpt_stage_forward(mid, k, lo, hi, NULL, x, NULL, B, T, 0.5f, ym, NULL));
        CHECK(!memcmp(yw, ym, sizeof yw));
    }
    for (int k = MB - 1; k >= 0; k--) {
        CHECK_OK(coh_gpt_stage_backward(whole, k, lo, hi, x, B, T, dw));
        CHECK_OK(coh_gpt_stage_backward(mid, k, lo, hi, x, B, T, dm));
        CHECK(!memcmp(dw, dm, sizeof dw));
    }
    size_t n;
    const float *gw = coh_gpt_grads(whole, &n), *gm = coh_gpt_grads(mid, NULL);
    CHECK(!memcmp(gw, gm, n * sizeof(float)));
    int32_t tok[B * T] = {0};
    float loss;
    CHECK_FAILS(coh_gpt_stage_forward(mid, 0, 0, 1, tok, NULL, NULL, B, T, 1.0f, x, NULL),
                COH_ERR_INVALID, "slot 0 keeps no activations");
    CHECK_FAILS(coh_gpt_stage_forward(mid, 0, 3, 4, NULL, x, tok, B, T, 1.0f, NULL, &loss),
                COH_ERR_INVALID, "slot 0 keeps no activations");
    CHECK_FAILS(coh_gpt_step(mid, tok, tok, B, T, 1.0f, &loss), COH_ERR_INVALID,
                "keeps no activations");
    coh_gpt_destroy(mid);
    /* a chunk of block 0 without the embeddings (another stage holds them): its input lands
     * where the embeddings' output would */
    int zero = 0, one = 1;
    CHECK_OK(coh_gpt_create_stage(&CFG, B, T, &mid));
    coh_gpt_init_weights(mid, 7);
    CHECK_OK(coh_gpt_set_stage_slots(mid, 1, 1, &zero, &one, 0, 0));
    CHECK_OK(coh_gpt_chunk_forward(whole, 0, 0, 1, 0, NULL, x, NULL, B, T, 0.5f, yw, NULL));
    CHECK_OK(coh_gpt_chunk_forward(mid, 0, 0, 1, 0, NULL, x, NULL, B, T, 0.5f, ym, NULL));
    CHECK(!memcmp(yw, ym, sizeof yw));
    CHECK_OK(coh_gpt_chunk_backward(whole, 0, 0, 1, 0, x, B, T, dw));
    CHECK_OK(coh_gpt_chunk_backward(mid, 0, 0, 1, 0, x, B, T, dm));
    CHECK(!memcmp(dw, dm, sizeof dw));
    CHECK_FAILS(coh_gpt_chunk_forward(mid, 0, 0, 1, COH_GPT_EMBEDDINGS, tok, NULL, NULL, B, T,
                                      0.5f, ym, NULL),
                COH_ERR_INVALID, "keeps no activations");
    coh_gpt_destroy(whole);
    coh_gpt_destroy(mid);
    /* slots keeping only block outputs cannot run without recomputation */
    CHECK_OK(coh_gpt_create_stage(&CFG, B, T, &mid));
    CHECK_OK(coh_gpt_set_recompute(mid, 1));
    CHECK_OK(coh_gpt_set_stage_slots(mid, 1, 1, &lo, &hi, 0, 0));
    CHECK_FAILS(coh_gpt_set_recompute(mid, 0), COH_ERR_INVALID, "cannot be turned off");
    coh_gpt_destroy(mid);
}

int main(void)
{
    RUN(test_stages_equal_whole);
    RUN(test_stage_errors);
    RUN(test_stage_slots);
    return CHECK_REPORT();
}
