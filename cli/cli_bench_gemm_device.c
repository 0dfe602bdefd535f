/* cli_bench_gemm_device.c: `cohort bench gemm --device NAME`: a device's products, measured
 * through the engine's backend table at square sizes and at the shapes of transformer layers
 * (tensor-parallel shards included), each printed beside the planner's price for it; on a GPU
 * the measured efficiency, stream bandwidth and op overhead become a calibration file. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_bench.h"
#include "cohort/backend.h"
#include "cohort/planner.h"

/* A layer's products for hidden size h over tp shards, at `tok` tokens (micro-batch x sequence):
 * the forward's four linear layers and the weight gradient of the first MLP layer (its K is the
 * token count). Shapes from Megatron PTD-P's Table 1 rows and GPT-2 124M's bench run. */
typedef struct layer_case {
    const char *model;
    int h, tp, tok;
} layer_case;

static const layer_case LAYERS[] = {
    {"gpt2-124m", 768, 1, 16384},  {"3.6b", 3072, 2, 2048},  {"18.4b", 6144, 8, 2048},
    {"175b", 12288, 8, 2048},      {"530b", 20480, 8, 2048},
};
#define NLAYERS (int)(sizeof LAYERS / sizeof LAYERS[0])
#define PRODUCTS 5
#define MAX_SHAPES 64

typedef struct shape {
    char label[40];
    coh_gemm_timing t;
} shape;

static int add(shape *s, int n, const char *label, int M, int N, int K)
{
    snprintf(s[n].label, sizeof s[n].label, "%s", label);
    s[n].t = (coh_gemm_timing){M, N, K, 0};
    return n + 1;
}

static int shapes_for(int quick, int gpu, shape *s)
{
    int n = 0;
    char label[40];
    /* squares 4n x n x n, as the CPU's rate table measures them: the large ones give the
     * efficiency, the curve goes into the file */
    int top = gpu ? (quick ? 4096 : 8192) : (quick ? 256 : 1024);
    for (int d = gpu ? 128 : 64; d <= top; d *= 2) {
        snprintf(label, sizeof label, "square %d", d);
        n = add(s, n, label, 4 * d, d, d);
    }
    for (int i = 0; i < NLAYERS; i++) {
        const layer_case *c = &LAYERS[i];
        int h = c->h, t = c->tp, tok = gpu ? c->tok : 256;
        if (!gpu && h > 3072)
            break; /* the CPU prices its own engine (plan --measure): a few shapes suffice */
        const char *name[PRODUCTS] = {"qkv", "proj", "fc1", "fc2", "fc1 dW"};
        int dims[PRODUCTS][3] = {{tok, 3 * h / t, h}, {tok, h, h / t}, {tok, 4 * h / t, h},
                                 {tok, h, 4 * h / t}, {h, 4 * h / t, tok}};
        for (int p = 0; p < PRODUCTS; p++) {
            snprintf(label, sizeof label, "%s t%d %s", c->model, t, name[p]);
            n = add(s, n, label, dims[p][0], dims[p][1], dims[p][2]);
        }
    }
    /* GPT-2's vocabulary as it is, and padded to a multiple of 128 as llm.c and Megatron pad
     * it: an odd row length costs cuBLAS its fastest kernels */
    n = add(s, n, "gpt2-124m lm head", gpu ? 16384 : 256, 50257, 768);
    n = add(s, n, "lm head v50304", gpu ? 16384 : 256, 50304, 768);
    return n;
}

static double tflops(const coh_gemm_timing *t)
{
    return 2.0 * t->M * t->N * t->K / t->seconds / 1e12;
}

/* The GPU calibration file: the preset the device matched, with what was measured in its
 * place (cohort plan --calibration reads it: hw.c). */
static int write_file(const char *path, const char *machine, const coh_hw *preset,
                      const shape *s, int nsquares, double eff, double stream, double op_s)
{
    coh_rate_curve squares = {0};
    for (int i = 0; i < nsquares && squares.n < COH_RATE_POINTS; i++, squares.n++) {
        squares.work[squares.n] = (double)s[i].t.M * s[i].t.N * s[i].t.K;
        squares.flops[squares.n] = tflops(&s[i].t) * 1e12;
    }
    coh_status st = coh_gpu_calibration_write(path, machine, preset->name, eff, stream, op_s,
                                              &squares);
    return st ? cli_fail("bench gemm", st) : CLI_OK;
}

int bench_gemm_device(const char *device, const char *out, int quick)
{
    const coh_backend *be;
    coh_status st = coh_backend_find(device, &be);
    if (st)
        return cli_fail("bench gemm", st);
    const char *desc = coh_backend_device_desc(be);
    char machine[96] = "";
    snprintf(machine, sizeof machine, "%.*s", (int)strcspn(desc, "("), desc);
    while (*machine && machine[strlen(machine) - 1] == ' ')
        machine[strlen(machine) - 1] = 0;
    coh_hw preset;
    int gpu = *machine && coh_hw_preset_for_gpu(machine, 0, &preset) == COH_OK;
    if (out && !gpu)
        return cli_usage_error("bench gemm", "--out with --device %s: a calibration file from "
                               "--device needs a GPU the planner has a preset for (for this "
                               "machine's CPU leave --device out)", device);
    shape s[MAX_SHAPES];
    int n = shapes_for(quick, gpu, s), nsquares = 0;
    while (nsquares < n && !strncmp(s[nsquares].label, "square", 6))
        nsquares++;
    coh_gemm_timing t[MAX_SHAPES];
    for (int i = 0; i < n; i++)
        t[i] = s[i].t;
    double min_s = quick ? 0.05 : 0.25, stream = 0, op_s = 0;
    int bf16 = gpu;
    if ((st = coh_backend_time_gemms(device, bf16, t, n, min_s)) ||
        (st = coh_backend_time_stream(device, gpu ? (size_t)1 << 28 : (size_t)1 << 22, min_s,
                                      &stream, &op_s)))
        return cli_fail("bench gemm", st);
    for (int i = 0; i < n; i++)
        s[i].t = t[i];

    /* the large-GEMM efficiency: the best square at or above 2048 (quantization-free sizes) */
    double best = 0;
    for (int i = 0; i < nsquares; i++)
        if (s[i].t.N >= 2048 || i == nsquares - 1)
            best = fmax(best, tflops(&s[i].t) * 1e12);
    double eff = gpu ? best / preset.peak_flops : 0;
    coh_hw cal = preset;
    if (gpu) {
        cal.gemm_efficiency = eff;
        cal.rates[0].elementwise_bytes_per_s = stream;
        cal.rates[0].op_overhead_s = op_s;
    }
    printf("# cohort bench gemm --device %s: %s\n", device, *desc ? desc : "this machine's CPU");
    printf("# %s products through the backend table; medians of 5 rounds\n",
           bf16 ? "bf16 (fp32 accumulation)" : "fp32");
    if (gpu)
        printf("# planner: preset %s (%.0f TFLOP/s peak, efficiency %.2f, tile and wave "
               "quantization over %d SMs); calibrated: efficiency %.3f measured here\n",
               preset.name, preset.peak_flops / 1e12, preset.gemm_efficiency, preset.sms, eff);
    printf("%-24s %6s %6s %6s %10s %10s", "# shape", "M", "N", "K", "ms", "TFLOP/s");
    if (gpu)
        printf(" %9s %9s %9s", "preset", "pre/meas", "cal/meas");
    printf("\n");
    double worst = 1, worst_hi = 1;
    for (int i = 0; i < n; i++) {
        const coh_gemm_timing *x = &s[i].t;
        printf("%-24s %6d %6d %6d %10.4f %10.4g", s[i].label, x->M, x->N, x->K, x->seconds * 1e3,
               tflops(x));
        if (gpu) {
            double p = coh_plan_gemm_seconds(&preset, 1, x->M, x->N, x->K),
                   c = coh_plan_gemm_seconds(&cal, 1, x->M, x->N, x->K);
            printf(" %9.1f %9.3f %9.3f", 2.0 * x->M * x->N * x->K / p / 1e12, x->seconds / p,
                   x->seconds / c);
            /* the ratio of measured to calibrated time, over shapes the efficiency did not come
             * from: how well the shape model (quantization, memory bound) predicts them */
            if (i >= nsquares) {
                worst = fmin(worst, x->seconds / c);
                worst_hi = fmax(worst_hi, x->seconds / c);
            }
        }
        printf("\n");
    }
    printf("# elementwise stream %.1f GB/s (y += x, 12 bytes a value); one small op %.2f us\n",
           stream / 1e9, op_s * 1e6);
    if (gpu)
        printf("# layer shapes: measured / calibrated price from %.3f to %.3f (1: the planner's "
               "shape model exact; above 1: it is optimistic)\n", worst, worst_hi);
    if (out) {
        int rc = write_file(out, machine, &preset, s, nsquares, eff, stream, op_s);
        if (rc != CLI_OK)
            return rc;
        printf("# wrote %s\n", out);
    }
    return CLI_OK;
}
