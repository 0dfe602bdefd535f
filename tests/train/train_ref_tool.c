/* train_ref_tool.c: drives the engine for the PyTorch comparison test: writes the initial
 * weights, the tensor table, the batch, then the loss and gradients, or AdamW step losses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/train.h"

static int write_f32(const char *dir, const char *name, const float *x, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(x, sizeof *x, n, f) != n) {
        fprintf(stderr, "cannot write '%s'\n", path);
        if (f)
            fclose(f);
        return 1;
    }
    return fclose(f) != 0;
}

static int write_manifest(const char *dir, const coh_gpt_config *c, int B, int T)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    fprintf(f, "config %d %d %d %d %d %d %d\n", c->layers, c->heads, c->dim, c->vocab, c->seq, B,
            T);
    for (int i = 0; i < coh_gpt_tensor_count(c); i++) {
        coh_tensor_info t;
        coh_gpt_tensor(c, i, &t);
        fprintf(f, "%s %zu %zu %zu %d\n", t.name, t.offset, t.shape[0], t.ndim == 2 ? t.shape[1] : 0,
                t.decay);
    }
    return fclose(f) != 0;
}

/* usage: train_ref_tool DIR grads|adamw STEPS */
int main(int argc, char **argv)
{
    if (argc != 4)
        return fprintf(stderr, "usage: %s DIR grads|adamw STEPS\n", argv[0]), 2;
    const char *dir = argv[1];
    int steps = atoi(argv[3]), B = 3, T = 16;
    coh_gpt_config c = {2, 4, 32, 67, 24, 0, 0};
    coh_gpt *g;
    coh_adamw *opt;
    if (coh_gpt_create(&c, B, T, &g) || coh_adamw_create(&c, &opt))
        return fprintf(stderr, "create: %s\n", coh_last_error()), 1;
    coh_gpt_init_weights(g, 1234);
    size_t n;
    float *p = coh_gpt_params(g, &n), *gr = coh_gpt_grads(g, NULL);
    int32_t tok[3 * 17];
    unsigned s = 99;
    for (int i = 0; i < 3 * 17; i++) {
        s = s * 1103515245u + 12345u;
        tok[i] = (int32_t)((s >> 16) % (unsigned)c.vocab);
    }
    int32_t in[3 * 16], tg[3 * 16];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            in[b * T + t] = tok[b * 17 + t];
            tg[b * T + t] = tok[b * 17 + t + 1];
        }
    float fin[3 * 16], ftg[3 * 16];
    for (int i = 0; i < B * T; i++)
        fin[i] = (float)in[i], ftg[i] = (float)tg[i];
    int rc = write_manifest(dir, &c, B, T) || write_f32(dir, "params.f32", p, n) ||
             write_f32(dir, "inputs.f32", fin, (size_t)B * T) ||
             write_f32(dir, "targets.f32", ftg, (size_t)B * T);
    float *losses = calloc((size_t)steps + 1, sizeof *losses);
    coh_adamw_params ap = {0, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int k = 0; k < (strcmp(argv[2], "grads") ? steps : 1) && !rc; k++) {
        coh_gpt_zero_grad(g);
        if (coh_gpt_step(g, in, tg, B, T, 1.0f, &losses[k]))
            return fprintf(stderr, "step: %s\n", coh_last_error()), 1;
        if (!strcmp(argv[2], "grads"))
            break;
        coh_clip_grad_norm(gr, n, 1.0);
        ap.lr = coh_lr_schedule(k, 5, steps, 3e-3f, 0.1f);
        coh_adamw_update(opt, p, gr, &ap, k + 1);
    }
    if (!rc && !strcmp(argv[2], "grads"))
        rc = write_f32(dir, "grads.f32", gr, n) || write_f32(dir, "loss.f32", losses, 1);
    else if (!rc)
        rc = write_f32(dir, "losses.f32", losses, (size_t)steps);
    free(losses);
    coh_adamw_destroy(opt);
    coh_gpt_destroy(g);
    return rc;
}
