/* cli_estimate_out.c: prints `cohort estimate` results: the per-device table, the fit verdict
 * and remedies, the accelerate and DeepSpeed views, and --json. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_config.h"
#include "cli_estimate.h"
#include "cohort/json_writer.h"
#include "cohort/size.h"

static const char *cmd = "estimate";
static const char *const arch_names[] = {"gpt2", "llama", "counts"};

/* Binary units by default (GiB, MiB), decimal ones (GB, MB) with --si, as papers use. */
const char *est_fmt(uint64_t bytes, int si, char *buf, size_t cap)
{
    return si ? coh_size_format_si(bytes, buf, cap) : coh_size_format(bytes, buf, cap);
}

/* 124439808 -> "124,439,808". */
static const char *grouped(int64_t n, char *buf, size_t cap)
{
    char digits[32];
    snprintf(digits, sizeof digits, "%lld", (long long)n);
    size_t len = strlen(digits), o = 0;
    for (size_t i = 0; i < len && o + 2 < cap; i++) {
        if (i && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

static void print_model(const est_request *r, const coh_estimate *e)
{
    const coh_model_desc *m = &r->model;
    char a[32], b[32];
    if (m->arch == COH_ARCH_COUNTS)
        printf("model        %s\n", m->name);
    else
        printf("model        %s: %lld layers, hidden %lld, %lld heads (%lld key/value), mlp %lld, "
               "vocab %lld, context %lld, %s embeddings\n",
               m->name, (long long)m->layers, (long long)m->dim, (long long)m->heads,
               (long long)m->kv_heads, (long long)m->ffn, (long long)m->vocab,
               (long long)m->positions, m->tied ? "tied" : "untied");
    printf("parameters   %s", grouped(e->counts.total, a, sizeof a));
    if (e->counts.largest_layer)
        printf(" (largest layer %s)", grouped(e->counts.largest_layer, b, sizeof b));
    printf("\n");
}

static void print_strategy(const est_request *r, const coh_estimate *e)
{
    const coh_parallel_config *s = &r->par;
    printf("strategy     dp %d x tp %d x pp %d, ZeRO %d, %s", s->dp, s->tp, s->pp,
           coh_strategy_zero_stage(s->strategy), coh_precision_name(s->precision));
    if (s->offload)
        printf(", offload %s", coh_offload_name(s->offload));
    if (!r->precision_given)
        printf(" (what cohort train runs; --precision bf16-mixed for mixed precision)");
    printf("\n");
    if (!e->activations_known) {
        printf("activations  unknown: a bare parameter count has no shape (give --model, "
               "--config or dimensions)\n");
        return;
    }
    printf("activations  micro batch %lld x seq %lld, recompute %s%s%s", (long long)s->micro_batch,
           (long long)e->seq, coh_recompute_name(s->recompute),
           s->sequence_parallel ? ", sequence parallel" : "", s->dropout ? "" : ", no dropout");
    if (s->pp > 1) {
        printf(", %s, %lld microbatches", coh_schedule_name(s->schedule), (long long)e->microbatches);
        if (s->schedule == COH_SCHED_INTERLEAVED)
            printf(", %d virtual stages", s->virtual_stages);
    }
    printf("\n");
}

static void print_breakdown(const est_request *r, const coh_estimate *e)
{
    const coh_device_mem *d = &e->per_device;
    char b[32], c[32];
    printf("\nper device");
    if (r->par.pp > 1)
        printf(" (pipeline stage %d of %d, the largest)", e->worst_stage, r->par.pp);
    printf(": %s parameters, %lld layers\n", grouped(d->local_params, c, sizeof c),
           (long long)d->layers);
    const struct {
        const char *name;
        uint64_t v;
    } rows[] = {{"parameters", d->params_bytes}, {"gradients", d->grads_bytes},
                {"optimizer state", d->optimizer_bytes}, {"activations", d->activations_bytes},
                {"temporary", d->temp_bytes}, {"total", d->total_bytes}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        printf("  %-16s %14s\n", rows[i].name, est_fmt(rows[i].v, r->si, b, sizeof b));
    if (d->host_bytes)
        printf("  %-16s %14s (offloaded, per device)\n", "host memory", est_fmt(d->host_bytes, r->si, b, sizeof b));
}

static int print_fit(const est_request *r, const coh_estimate *e)
{
    if (!r->device_bytes)
        return CLI_OK;
    char b[32], c[32];
    uint64_t need = e->per_device.total_bytes;
    printf("\ndevice memory %s (%s): ", est_fmt(r->device_bytes, r->si, b, sizeof b), r->device_from);
    if (need <= r->device_bytes) {
        printf("fits, %.1f%% used\n", 100.0 * (double)need / (double)r->device_bytes);
        return CLI_OK;
    }
    printf("does not fit: %s short\n", est_fmt(need - r->device_bytes, r->si, c, sizeof c));
    coh_remedy rem[8];
    int n;
    coh_status st = coh_plan_remedies(&r->model, &r->par, r->device_bytes, 0, rem, 8, &n);
    if (st != COH_OK)
        return cli_fail(cmd, st);
    if (n == 0)
        printf("no single change fits; combine them, or use devices with more memory\n");
    else
        printf("changes that fit, cheapest first (the order of docs/estimate.md section 5):\n");
    for (int i = 0; i < n; i++) {
        printf("  %-48s %12s per device\n", rem[i].what, est_fmt(rem[i].total_bytes, r->si, b, sizeof b));
        printf("    cohort train: %s\n", rem[i].runnable ? "runs this today" : rem[i].missing);
    }
    return CLI_OK;
}

static void json_device(coh_jw *w, const coh_device_mem *d)
{
    coh_jw_key(w, "per_device");
    coh_jw_object_begin(w);
    const struct { const char *k; uint64_t v; } rows[] = {
        {"params_bytes", d->params_bytes}, {"grads_bytes", d->grads_bytes},
        {"optimizer_bytes", d->optimizer_bytes}, {"activations_bytes", d->activations_bytes},
        {"temp_bytes", d->temp_bytes}, {"total_bytes", d->total_bytes},
        {"host_bytes", d->host_bytes}, {"local_parameters", (uint64_t)d->local_params},
        {"layers", (uint64_t)d->layers}, {"microbatches_in_flight", (uint64_t)d->in_flight}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        coh_jw_field_uint(w, rows[i].k, rows[i].v);
    }
    coh_jw_object_end(w);
}

static void json_model(coh_jw *w, const coh_model_desc *m)
{
    coh_jw_key(w, "model");
    coh_jw_object_begin(w);
    coh_jw_key(w, "name"); coh_jw_string(w, m->name);
    coh_jw_key(w, "arch"); coh_jw_string(w, arch_names[m->arch]);
    if (m->arch != COH_ARCH_COUNTS) {
        const struct { const char *k; int64_t v; } ints[] = {
            {"layers", m->layers}, {"dim", m->dim}, {"heads", m->heads},
            {"kv_heads", m->kv_heads}, {"head_dim", m->head_dim}, {"ffn", m->ffn},
            {"vocab", m->vocab}, {"positions", m->positions}};
        for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
            coh_jw_field_int(w, ints[i].k, ints[i].v);
        }
        coh_jw_key(w, "tied"); coh_jw_bool(w, m->tied);
    }
    coh_jw_object_end(w);
}

static void json_fit(coh_jw *w, const est_request *r, const coh_estimate *e)
{
    coh_jw_key(w, "fits");
    if (!r->device_bytes) {
        coh_jw_null(w);
        return;
    }
    int fits = e->per_device.total_bytes <= r->device_bytes;
    coh_jw_bool(w, fits);
    coh_jw_key(w, "remedies");
    coh_jw_array_begin(w);
    coh_remedy rem[8];
    int n = 0;
    if (!fits)
        coh_plan_remedies(&r->model, &r->par, r->device_bytes, 0, rem, 8, &n);
    for (int i = 0; i < n; i++) {
        coh_jw_object_begin(w);
        coh_jw_key(w, "change"); coh_jw_string(w, rem[i].what);
        coh_jw_key(w, "total_bytes"); coh_jw_uint(w, rem[i].total_bytes);
        coh_jw_key(w, "cohort_train_runs"); coh_jw_bool(w, rem[i].runnable);
        if (!rem[i].runnable) {
            coh_jw_key(w, "missing"); coh_jw_string(w, rem[i].missing);
        }
        coh_jw_object_end(w);
    }
    coh_jw_array_end(w);
}

static void print_json(const est_request *r, const coh_estimate *e)
{
    coh_jw w;
    coh_jw_init(&w, stdout, 1);
    coh_jw_object_begin(&w);
    json_model(&w, &r->model);
    coh_jw_key(&w, "parameters"); coh_jw_int(&w, e->counts.total);
    coh_jw_key(&w, "largest_layer_parameters"); coh_jw_int(&w, e->counts.largest_layer);
    coh_jw_key(&w, "largest_module_parameters"); coh_jw_int(&w, e->counts.largest_module);
    cli_config_json(&w, &r->par, e->seq, e->microbatches);
    coh_jw_key(&w, "activations_known"); coh_jw_bool(&w, e->activations_known);
    coh_jw_key(&w, "worst_stage"); coh_jw_int(&w, e->worst_stage);
    json_device(&w, &e->per_device);
    if (r->device_bytes) {
        coh_jw_field_uint(&w, "device_memory_bytes", r->device_bytes);
    }
    json_fit(&w, r, e);
    coh_jw_object_end(&w);
    coh_jw_finish(&w);
}

int est_print(const est_request *r)
{
    coh_estimate e;
    coh_status st = coh_estimate_memory(&r->model, &r->par, &e);
    if (st != COH_OK)
        return cli_fail(cmd, st);
    if (r->view != VIEW_COHORT)
        return est_print_views(r, &e);
    if (r->json) {
        print_json(r, &e);
        return CLI_OK;
    }
    print_model(r, &e);
    print_strategy(r, &e);
    print_breakdown(r, &e);
    return print_fit(r, &e);
}
