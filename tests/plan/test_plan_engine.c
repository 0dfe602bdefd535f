/* test_plan_engine.c: `--engine cohort` predictions against what cohort's engine really takes:
 * the live heap after creating the model and optimizer (exact buffers), and the peak resident
 * memory of one full training step (forward, backward, AdamW), both within 10%. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cohort/train.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#ifdef UNDER_ASAN
/* From the AddressSanitizer runtime (sanitizer/allocator_interface.h, which gcc does not ship). */
size_t __sanitizer_get_current_allocated_bytes(void);
static size_t heap_live(void) { return __sanitizer_get_current_allocated_bytes(); }
#else
#include <malloc.h>
static size_t heap_live(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}
#endif

/* A /proc/self/status field in bytes (VmRSS, VmHWM). */
static size_t proc_status_bytes(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kib = 0, n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            kib = strtoull(line + n + 1, NULL, 10);
    if (f)
        fclose(f);
    return kib * 1024;
}

static const coh_gpt_config cfg = {4, 8, 512, 8192, 256}; /* layers, heads, dim, vocab, seq */
enum { B = 4, T = 256 };

static void test_engine_prediction(void)
{
    coh_set_threads(2);
    (void)coh_measure_sgemm_flops(64); /* BLAS buffers and the thread team exist before we look */
    coh_train_memory tm;
    CHECK_OK(coh_train_memory_estimate(&cfg, B, T, &tm));
    size_t persistent = tm.total - tm.attention * (size_t)coh_get_threads();

    size_t rss0 = proc_status_bytes("VmRSS"), heap0 = heap_live();
    coh_gpt *g = NULL;
    coh_adamw *o = NULL;
    CHECK_OK(coh_gpt_create(&cfg, B, T, &g));
    CHECK_OK(coh_adamw_create(&cfg, &o));
    if (!g || !o)
        return;
    size_t held = heap_live() - heap0;
    printf("  buffers: predicted %zu B, live heap %zu B (%+.3f%%)\n", persistent, held,
           100.0 * ((double)held - (double)persistent) / (double)persistent);
    CHECK_NEAR(held, persistent, 0.10);

    int32_t *tok = malloc(sizeof *tok * B * T), *tgt = malloc(sizeof *tgt * B * T);
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 7919) % cfg.vocab;
        tgt[i] = (i * 104729 + 1) % cfg.vocab;
    }
    coh_gpt_init_weights(g, 1);
    coh_gpt_zero_grad(g);
    float loss = 0;
    CHECK_OK(coh_gpt_step(g, tok, tgt, B, T, 1.0f, &loss));
    size_t n;
    float *p = coh_gpt_params(g, &n);
    coh_adamw_params ap = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
    coh_adamw_update(o, p, coh_gpt_grads(g, &n), &ap, 1);
    CHECK(loss > 0);
#ifndef UNDER_ASAN
    /* Resident peak of the step over the resident size before the model existed. */
    size_t peak = proc_status_bytes("VmHWM") - rss0;
    printf("  training step: predicted %zu B, peak resident growth %zu B (%+.2f%%)\n", tm.total,
           peak, 100.0 * ((double)peak - (double)tm.total) / (double)tm.total);
    CHECK_NEAR(peak, tm.total, 0.10);
#else
    (void)rss0;
    printf("  training step: resident peak not compared under AddressSanitizer (shadow memory)\n");
#endif
    free(tok);
    free(tgt);
    coh_adamw_destroy(o);
    coh_gpt_destroy(g);
}

int main(void)
{
    RUN(test_engine_prediction);
    return CHECK_REPORT();
}
