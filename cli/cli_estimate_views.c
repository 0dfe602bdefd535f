/* cli_estimate_views.c: `cohort estimate --view accelerate|deepspeed`: the figures Hugging Face
 * accelerate's estimate-memory and DeepSpeed's ZeRO estimators print, with correct units. */
#include <stdio.h>

#include "cli.h"
#include "cli_estimate.h"
#include "cohort/json_writer.h"

/* DeepSpeed's default safety factor on host memory. */
#define DS_BUFFER_FACTOR 1.5

typedef struct ds_row {
    int stage, offload_optimizer, offload_params, zero_init;
    uint64_t cpu, gpu;
} ds_row;

/* The rows DeepSpeed prints, in its order: ZeRO-2 offload then none; ZeRO-3 offload of both,
 * of the optimizer, of nothing, each with and without zero.Init. */
static int ds_rows(const est_request *r, const coh_estimate *e, ds_row *rows)
{
    int nodes = r->par.nodes ? r->par.nodes : 1;
    int gpn = r->par.gpus_per_node ? r->par.gpus_per_node : 1;
    double total = (double)e->counts.total, largest = (double)e->counts.largest_module;
    int n = 0;
    for (int off = 1; off >= 0; off--, n++) {
        rows[n] = (ds_row){2, off, 0, 0, 0, 0};
        coh_ds_zero2_mem(total, gpn, nodes, off, DS_BUFFER_FACTOR, &rows[n].cpu, &rows[n].gpu);
    }
    if (largest <= 0)
        return n;
    static const int combos[3][2] = {{1, 1}, {1, 0}, {0, 0}};
    for (int c = 0; c < 3; c++)
        for (int init = 1; init >= 0; init--, n++) {
            rows[n] = (ds_row){3, combos[c][0], combos[c][1], init, 0, 0};
            coh_ds_zero3_mem(total, largest, gpn, nodes, combos[c][0], combos[c][1], init,
                             DS_BUFFER_FACTOR, &rows[n].cpu, &rows[n].gpu);
        }
    return n;
}

static double in_unit(uint64_t bytes, int si)
{
    return (double)bytes / (si ? 1e9 : 1073741824.0);
}

static void ds_text(const est_request *r, const coh_estimate *e, const ds_row *rows, int n)
{
    int nodes = r->par.nodes ? r->par.nodes : 1;
    int gpn = r->par.gpus_per_node ? r->par.gpus_per_node : 1;
    const char *u = r->si ? "GB" : "GiB";
    printf("Estimated memory needed for params, optim states and gradients (DeepSpeed's "
           "formulas, additional_buffer_factor %.1f) for a:\n",
           DS_BUFFER_FACTOR);
    printf("HW: Setup with %d %s, %d %s per node.\n", nodes, nodes > 1 ? "nodes" : "node", gpn,
           gpn > 1 ? "GPUs" : "GPU");
    printf("SW: Model with %lldM total params", (long long)(e->counts.total / 1000000));
    if (e->counts.largest_module)
        printf(", %lldM largest layer params", (long long)(e->counts.largest_module / 1000000));
    printf(".\n");
    for (int i = 0; i < n; i++) {
        if (i == 0 || rows[i].stage != rows[i - 1].stage)
            printf("ZeRO-%d\n    per CPU   |   per GPU  | options\n", rows[i].stage);
        printf(" %8.2f %-3s | %6.2f %-3s | ", in_unit(rows[i].cpu, r->si), u,
               in_unit(rows[i].gpu, r->si), u);
        if (rows[i].stage == 3)
            printf("offload_param=%-4s, offload_optimizer=%-4s, zero_init=%d\n",
                   rows[i].offload_params ? "cpu" : "none",
                   rows[i].offload_optimizer ? "cpu" : "none", rows[i].zero_init);
        else
            printf("offload_optimizer=%s\n", rows[i].offload_optimizer ? "cpu" : "none");
    }
    if (!e->counts.largest_module)
        printf("ZeRO-3 needs the largest layer: give --largest-layer N with --params.\n");
}

static void ds_json(const ds_row *rows, int n)
{
    coh_jw w;
    coh_jw_init(&w, stdout, 1);
    coh_jw_object_begin(&w);
    coh_jw_key(&w, "deepspeed");
    coh_jw_array_begin(&w);
    for (int i = 0; i < n; i++) {
        coh_jw_object_begin(&w);
        coh_jw_field_int(&w, "stage", rows[i].stage);
        coh_jw_field_bool(&w, "offload_optimizer", rows[i].offload_optimizer);
        if (rows[i].stage == 3) {
            coh_jw_field_bool(&w, "offload_param", rows[i].offload_params);
            coh_jw_field_bool(&w, "zero_init", rows[i].zero_init);
        }
        coh_jw_field_uint(&w, "cpu_bytes", rows[i].cpu);
        coh_jw_field_uint(&w, "gpu_bytes", rows[i].gpu);
        coh_jw_object_end(&w);
    }
    coh_jw_array_end(&w);
    coh_jw_object_end(&w);
    coh_jw_finish(&w);
}

static void accel_text(const est_request *r, const coh_accel_row *rows)
{
    printf("Memory usage for loading '%s' (accelerate estimate-memory's formulas)\n", r->model.name);
    printf("  %-8s | %14s | %14s | %18s\n", "dtype", "largest layer", "total size",
           "training using Adam");
    int known = r->model.arch != COH_ARCH_COUNTS || r->model.count_largest > 0;
    for (int i = 0; i < 4; i++) {
        char a[32], b[32], c[32];
        printf("  %-8s | %14s | %14s | %18s\n", rows[i].dtype,
               known ? est_fmt(rows[i].largest_layer_bytes, r->si, a, sizeof a) : "unknown",
               est_fmt(rows[i].total_bytes, r->si, b, sizeof b),
               rows[i].training_bytes ? est_fmt(rows[i].training_bytes, r->si, c, sizeof c) : "n/a");
    }
}

static void accel_json(const est_request *r, const coh_accel_row *rows)
{
    int known = r->model.arch != COH_ARCH_COUNTS || r->model.count_largest > 0;
    coh_jw w;
    coh_jw_init(&w, stdout, 1);
    coh_jw_object_begin(&w);
    coh_jw_key(&w, "accelerate");
    coh_jw_array_begin(&w);
    for (int i = 0; i < 4; i++) {
        coh_jw_object_begin(&w);
        coh_jw_field_string(&w, "dtype", rows[i].dtype);
        coh_jw_key(&w, "largest_layer_bytes"); /* null: --params without --largest-layer */
        if (known)
            coh_jw_uint(&w, rows[i].largest_layer_bytes);
        else
            coh_jw_null(&w);
        coh_jw_field_uint(&w, "total_bytes", rows[i].total_bytes);
        coh_jw_key(&w, "training_bytes");
        if (rows[i].training_bytes)
            coh_jw_uint(&w, rows[i].training_bytes);
        else
            coh_jw_null(&w);
        coh_jw_object_end(&w);
    }
    coh_jw_array_end(&w);
    coh_jw_object_end(&w);
    coh_jw_finish(&w);
}

int est_print_views(const est_request *r, const coh_estimate *e)
{
    if (r->view == VIEW_ACCELERATE) {
        coh_accel_row rows[4];
        coh_accel_rows(e->counts.total, e->counts.largest_layer, rows);
        if (r->json)
            accel_json(r, rows);
        else
            accel_text(r, rows);
        return CLI_OK;
    }
    ds_row rows[8];
    int n = ds_rows(r, e, rows);
    if (r->json)
        ds_json(rows, n);
    else
        ds_text(r, e, rows, n);
    return CLI_OK;
}
