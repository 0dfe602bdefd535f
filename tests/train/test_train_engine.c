/* test_train_engine.c: arena layout, memory estimator, config errors, determinism, gradient
 * accumulation and the schedule of the training engine. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cohort/train.h"

static void test_presets_and_layout(void)
{
    coh_gpt_config c;
    CHECK_OK(coh_gpt_preset("gpt2", &c));
    CHECK_INT(coh_gpt_param_count(&c), 124439808); /* GPT-2 small, HF's count */
    CHECK_OK(coh_gpt_preset("gpt2-xl", &c));
    CHECK_INT(c.layers, 48);
    CHECK_FAILS(coh_gpt_preset("gpt3", &c), COH_ERR_INVALID, "unknown model preset 'gpt3'");
    coh_gpt_config bad = {2, 3, 8, 10, 4, 0, 0};
    CHECK_FAILS(coh_gpt_config_check(&bad), COH_ERR_INVALID, "invalid dim '8'");
    bad.heads = 0;
    CHECK_FAILS(coh_gpt_config_check(&bad), COH_ERR_INVALID, "invalid heads '0'");

    /* tensors tile the arena in order with no gap; layers are contiguous ranges */
    coh_gpt_config t = {3, 2, 8, 11, 5, 0, 0};
    size_t off = 0;
    int n = coh_gpt_tensor_count(&t);
    CHECK_INT(n, 4 + 12 * 3);
    for (int i = 0; i < n; i++) {
        coh_tensor_info ti;
        CHECK_OK(coh_gpt_tensor(&t, i, &ti));
        CHECK_INT(ti.offset, off);
        off += ti.numel;
        if (i == 4) {
            CHECK_STR(ti.name, "transformer.h.0.attn.c_attn.weight");
            CHECK_INT(ti.shape[0], 8); /* [in, out] as HF Conv1D */
            CHECK_INT(ti.shape[1], 24);
        }
    }
    CHECK_INT(off, coh_gpt_param_count(&t));
    size_t b, e, b2, e2;
    coh_gpt_layer_range(&t, 1, &b, &e);
    coh_gpt_layer_range(&t, 2, &b2, &e2);
    CHECK_INT(e, b2);
    coh_gpt_layer_range(&t, 3, &b, &e);
    CHECK_INT(e, coh_gpt_param_count(&t));
    CHECK_FAILS(coh_gpt_tensor(&t, n, &(coh_tensor_info){0}), COH_ERR_INVALID, "invalid tensor");
}

static void test_memory_estimate(void)
{
    coh_gpt_config c = {6, 6, 384, 50257, 256, 0, 0};
    coh_train_memory m;
    CHECK_OK(coh_train_memory_estimate(&c, 8, 256, &m));
    size_t P = coh_gpt_param_count(&c) * 4;
    CHECK_INT(m.params, P);
    CHECK_INT(m.adam_v, P);
    /* the head keeps one chunk of logits, far less than (B*T, V) */
    CHECK(m.logits < (size_t)8 * 256 * 50257 * 4 / 4);
    CHECK_INT(m.total, 4 * P + m.activations + m.act_grads + m.logits +
                           m.attention * (size_t)coh_get_threads());
    CHECK_INT(m.attention, 2 * 256 * 256 * 4);
    coh_train_memory m2;
    CHECK_OK(coh_train_memory_estimate(&c, 16, 256, &m2));
    CHECK(m2.activations > m.activations && m2.params == m.params);
    CHECK_FAILS(coh_train_memory_estimate(&c, 8, 257, &m), COH_ERR_INVALID,
                "invalid sequence length '257'");
    CHECK_FAILS(coh_train_memory_estimate(&c, 0, 16, &m), COH_ERR_INVALID, "invalid batch '0'");
}

struct feed { int V, B, T; unsigned s; };
static coh_status next_batch(void *p, int32_t *in, int32_t *tg)
{
    struct feed *f = p;
    for (int i = 0; i < f->B * f->T; i++) {
        f->s = f->s * 1103515245u + 12345u;
        in[i] = (int32_t)((f->s >> 16) % (unsigned)f->V);
        tg[i] = (in[i] * 3 + 1) % f->V; /* learnable */
    }
    return COH_OK;
}

static void run(int accum, int B, float *losses, int steps, float *final_param)
{
    coh_trainer_config c;
    coh_trainer_config_defaults(&c);
    c.model = (coh_gpt_config){2, 2, 16, 29, 8, 0, 0};
    c.batch = B;
    c.seq = 8;
    c.accum = accum;
    c.steps = steps;
    c.warmup = 2;
    c.lr = 1e-2f;
    coh_trainer *t;
    CHECK_OK(coh_trainer_create(&c, &t));
    if (!t)
        return;
    struct feed f = {29, B, 8, 5};
    for (int k = 0; k < steps; k++) {
        coh_step_stats st;
        CHECK_OK(coh_trainer_step(t, next_batch, &f, &st));
        losses[k] = st.loss;
        CHECK_INT(st.step, k + 1);
    }
    size_t n;
    float *p = coh_gpt_params(coh_trainer_model(t), &n);
    *final_param = p[n / 2];
    coh_trainer_destroy(t);
}

static void test_deterministic(void)
{
    float a[8], b[8], pa, pb;
    run(1, 4, a, 8, &pa);
    run(1, 4, b, 8, &pb);
    CHECK(!memcmp(a, b, sizeof a)); /* bit-identical */
    CHECK(memcmp(&pa, &pb, sizeof pa) == 0);
    CHECK(a[7] < a[0] - 0.3f); /* and it learns */
}

static void test_accumulation(void)
{
    /* two micro-batches of 2 rows = one batch of 4 rows (same data order) */
    float a[6], b[6], pa, pb;
    run(1, 4, a, 6, &pa);
    run(2, 2, b, 6, &pb);
    for (int k = 0; k < 6; k++)
        CHECK_NEAR(a[k], b[k], 1e-5);
    CHECK_NEAR(pa, pb, 1e-4);
}

static void test_schedule(void)
{
    CHECK_NEAR(coh_lr_schedule(0, 10, 100, 1.0f, 0.1f), 0.1, 1e-6);
    CHECK_NEAR(coh_lr_schedule(9, 10, 100, 1.0f, 0.1f), 1.0, 1e-6);
    CHECK_NEAR(coh_lr_schedule(55, 10, 100, 1.0f, 0.1f), 0.55, 1e-6); /* cosine midpoint */
    CHECK_NEAR(coh_lr_schedule(100, 10, 100, 1.0f, 0.1f), 0.1, 1e-6);
    float g[3] = {3, 4, 0};
    CHECK_NEAR(coh_clip_grad_norm(g, 3, 1.0), 5.0, 1e-12);
    CHECK_NEAR(sqrt(g[0] * g[0] + g[1] * g[1]), 1.0, 1e-5);
}

struct hook_log { int n, layers[16]; };
static void on_ready(void *ctx, int layer, size_t b, size_t e)
{
    struct hook_log *h = ctx;
    if (h->n < 16)
        h->layers[h->n++] = layer;
}

static void test_grad_hook(void)
{
    coh_gpt_config c = {3, 2, 8, 11, 4, 0, 0};
    coh_gpt *g;
    CHECK_OK(coh_gpt_create(&c, 1, 4, &g));
    if (!g)
        return;
    struct hook_log h = {0};
    coh_gpt_set_grad_hook(g, on_ready, &h);
    int32_t in[4] = {1, 2, 3, 4}, tg[4] = {2, 3, 4, 5};
    float loss;
    CHECK_OK(coh_gpt_step(g, in, tg, 1, 4, 1.0f, &loss));
    CHECK_INT(h.n, 5); /* final LN, layers 2, 1, 0, embeddings: the order DDP buckets need */
    CHECK_INT(h.layers[0], 3);
    CHECK_INT(h.layers[1], 2);
    CHECK_INT(h.layers[3], 0);
    CHECK_INT(h.layers[4], -1);
    int32_t badtok[4] = {1, 2, 11, 4};
    CHECK_FAILS(coh_gpt_step(g, badtok, tg, 1, 4, 1.0f, &loss), COH_ERR_INVALID,
                "invalid token id '11'");
    CHECK_FAILS(coh_gpt_step(g, in, tg, 2, 4, 1.0f, &loss), COH_ERR_INVALID, "invalid batch '2'");
    coh_gpt_destroy(g);
}

int main(void)
{
    coh_set_threads(2);
    RUN(test_presets_and_layout);
    RUN(test_memory_estimate);
    RUN(test_deterministic);
    RUN(test_accumulation);
    RUN(test_schedule);
    RUN(test_grad_hook);
    return CHECK_REPORT();
}
