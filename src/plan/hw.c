/* hw.c: the hardware the planner prices: GPU presets (datasheet peaks, a roofline for GEMMs),
 * an inventory file's GPUs and links, and calibration files measured on this machine (strict
 * parser, fuzzed: tests/fuzz/fuzz_calibration.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/json_writer.h"
#include "plan/plan_int.h"
#include "plan/planner_int.h"
#include "util/file.h"
#include "util/json.h"

/* ---- presets -------------------------------------------------------------------------------- */

/* Dense (non-sparse) tensor-core peaks and HBM bandwidth from NVIDIA's datasheets; NVLink one
 * way per GPU (half the quoted bidirectional figure). The other constants of the GPU model,
 * each named here with its source (docs/plan.md, "GPU presets and their sources"): */

/* Large-GEMM efficiency of peak, per GPU (the preset's gemm_eff below): the best rate a bf16
 * matmul reaches over a search of large shapes, over the datasheet peak, as published in
 * "Machine Learning Engineering" (S. Bekman), "Maximum Achievable Matmul FLOPS comparison
 * table": A100 SXM 271.2 of 312 TFLOP/s (0.869, torch 2.6 with CUDA 12.6), H100 SXM 794.5 of 989
 * (0.803, torch 2.7 with CUDA 12.6); V100 SXM2, which that table lacks: 83 of 125 TFLOP/s
 * (0.664) with cuBLAS in mixed precision (Markidis et al., "NVIDIA Tensor Core
 * Programmability, Performance & Precision", IPDPSW 2018). Smaller and skinnier shapes lose more
 * by tile and wave quantization (cost.c, from NVIDIA's Matrix Multiplication Background guide);
 * a calibration file from cohort bench gemm --device cuda replaces it with a measurement. */
/* Elementwise kernels (LayerNorm, GELU, bias-dropout-add) stream at this share of HBM
 * bandwidth. Measured: cohort's y += x on an H100 SXM5 streams 0.82 of its 3350 GB/s
 * (bench/gpu/h100_gemm_2026-11-26.txt); published: a pure read kernel at 88% on an A100 80 GB
 * (NVIDIA developer forum thread "Trouble to Reach Peak Bandwidth of A100"), an upper bound for
 * kernels that also write and reduce; docs/plan.md. */
#define GPU_ELEMENTWISE_SHARE 0.80
/* Host time to launch one kernel, paid per op when kernels are short: "usually between 5-20
 * microseconds" (Holistic Trace Analysis documentation, "CUDA Kernel Launch Statistics");
 * the low end, since a stack that keeps the queue full hides the rest. */
#define GPU_OP_OVERHEAD_S 5e-6
/* Latency of one ring step over NVLink: NCCL's own tuning model, hwLat[NVLINK][RING][SIMPLE]
 * = 3.4 us (src/graph/tuning.cc as NCCL shipped it in 2020, before 2021's published runs). */
#define GPU_NVLINK_STEP_S 3.4e-6

static const struct preset {
    const char *name, *match, *source;
    double peak, mem_bw, nvlink, gemm_eff;
    uint64_t mib;
    coh_precision prec;
    int sms; /* the architecture whitepapers: A100 108 SMs (GA100 as shipped), H100 SXM5 132,
                V100 80 */
} PRESETS[] = {
    {"a100-80gb", "A100", "NVIDIA A100 datasheet: 312 TFLOP/s bf16 dense, 2039 GB/s HBM2e, NVLink 3 "
     "600 GB/s (300 each way)", 312e12, 2039e9, 300e9, 0.869, 81920, COH_PREC_BF16_MIXED, 108},
    {"a100-40gb", "A100", "NVIDIA A100 datasheet: 312 TFLOP/s bf16 dense, 1555 GB/s HBM2, NVLink 3 "
     "600 GB/s (300 each way)", 312e12, 1555e9, 300e9, 0.869, 40960, COH_PREC_BF16_MIXED, 108},
    {"h100-sxm", "H100", "NVIDIA H100 datasheet: 989 TFLOP/s bf16 dense, 3350 GB/s HBM3, NVLink 4 "
     "900 GB/s (450 each way)", 989e12, 3350e9, 450e9, 0.803, 81920, COH_PREC_BF16_MIXED, 132},
    {"v100-32gb", "V100", "NVIDIA V100 datasheet: 125 TFLOP/s fp16 tensor, 900 GB/s HBM2, NVLink 2 "
     "300 GB/s (150 each way)", 125e12, 900e9, 150e9, 0.664, 32768, COH_PREC_FP16_MIXED, 80},
};
#define NPRESETS (sizeof PRESETS / sizeof PRESETS[0])

static void fill_preset(const struct preset *p, coh_hw *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", p->name);
    snprintf(out->source, sizeof out->source, "%s", p->source);
    out->gpu = 1;
    out->nrates = 1;
    coh_device_rates *r = &out->rates[0];
    r->gemm.n = 0; /* roofline */
    r->elementwise_bytes_per_s = p->mem_bw * GPU_ELEMENTWISE_SHARE;
    r->op_overhead_s = GPU_OP_OVERHEAD_S;
    out->peak_flops = p->peak;
    out->precision = p->prec;
    out->memory_bytes = p->mib << 20;
    out->gpus_per_node = 8;
    out->nodes = 0;
    out->intra.alpha_s = GPU_NVLINK_STEP_S;
    out->intra.bytes_per_s = p->nvlink;
    out->gemm_efficiency = p->gemm_eff;
    out->sms = p->sms;
    out->mem_bytes_per_s = p->mem_bw;
}

coh_status coh_hw_preset(const char *name, coh_hw *out)
{
    for (size_t i = 0; i < NPRESETS; i++)
        if (name && !strcmp(name, PRESETS[i].name)) {
            fill_preset(&PRESETS[i], out);
            return COH_OK;
        }
    return coh_errf(COH_ERR_INVALID, "unknown hardware preset '%s': valid are a100-80gb, "
                                     "a100-40gb, h100-sxm, v100-32gb", name ? name : "(null)");
}

coh_status coh_hw_preset_for_gpu(const char *gpu_name, uint64_t memory_bytes, coh_hw *out)
{
    const struct preset *best = NULL;
    for (size_t i = 0; i < NPRESETS; i++) {
        const struct preset *p = &PRESETS[i];
        if (!strstr(gpu_name, p->match))
            continue;
        /* among the variants, the one whose memory is closest */
        if (!best || llabs((long long)(p->mib << 20) - (long long)memory_bytes) <
                         llabs((long long)(best->mib << 20) - (long long)memory_bytes))
            best = p;
    }
    if (!best)
        return coh_errf(COH_ERR_NOT_FOUND, "no preset for the GPU '%s' (known: A100, H100, "
                                           "V100); give --hw NAME", gpu_name);
    fill_preset(best, out);
    out->memory_bytes = memory_bytes;
    return COH_OK;
}

/* ---- small JSON helpers with messages naming the file and key ---------------------------- */

static coh_status check_keys(const char *file, const char *where, const json_value *v,
                             const char *const *keys)
{
    if (!v || v->type != JSON_OBJECT)
        return coh_errf(COH_ERR_INVALID, "%s: %s is not an object", file, where);
    for (size_t i = 0; i < v->u.obj.count; i++) {
        int known = 0;
        for (const char *const *k = keys; *k; k++)
            known |= !strcmp(v->u.obj.keys[i], *k);
        if (!known)
            return coh_errf(COH_ERR_INVALID, "%s: %s: unknown key '%s'", file, where,
                            v->u.obj.keys[i]);
    }
    return COH_OK;
}

/* A number in [lo, hi] (finite); missing: dflt, or an error when required. */
static coh_status get_num(const char *file, const char *where, const json_value *obj,
                          const char *key, int required, double lo, double hi, double dflt,
                          double *out)
{
    const json_value *v = json_get(obj, key);
    if (!v) {
        if (required)
            return coh_errf(COH_ERR_INVALID, "%s: %s: missing '%s'", file, where, key);
        *out = dflt;
        return COH_OK;
    }
    if (v->type != JSON_NUMBER || !isfinite(v->u.num.value) || v->u.num.value < lo ||
        v->u.num.value > hi)
        return coh_errf(COH_ERR_INVALID, "%s: %s.%s: %s%s%g is not a number from %g to %g", file,
                        where, key, v->type == JSON_NUMBER ? "" : json_type_name(v->type),
                        v->type == JSON_NUMBER ? "" : " ",
                        v->type == JSON_NUMBER ? v->u.num.value : 0.0, lo, hi);
    *out = v->u.num.value;
    return COH_OK;
}

static const char *const LINK_KEYS[] = {"gbytes_per_s", "latency_us", NULL};

static coh_status parse_link(const char *file, const char *where, const json_value *v,
                             coh_link *out)
{
    JSON_TRY(check_keys(file, where, v, LINK_KEYS));
    double gb = 0, us = 0;
    JSON_TRY(get_num(file, where, v, "gbytes_per_s", 1, 1e-6, 1e6, 0, &gb));
    JSON_TRY(get_num(file, where, v, "latency_us", 1, 0, 1e7, 0, &us));
    out->bytes_per_s = gb * 1e9;
    out->alpha_s = us * 1e-6;
    return COH_OK;
}

/* ---- inventory ------------------------------------------------------------------------------ */

static coh_status inventory_hw(const coh_inventory *inv, const char *path, int nodes,
                               coh_hw *out)
{
    if (inv->ngpus == 0)
        return coh_errf(COH_ERR_INVALID, "inventory '%s' lists no GPUs: the planner prices GPUs "
                                         "from an inventory (this machine: --calibration)", path);
    /* A configuration must fit on every device, and synchronous training steps at the pace of
     * the slowest: memory is the smallest listed, the rates the slowest GPU's. */
    coh_inventory_memory mem;
    JSON_TRY(plan_inventory_scan(inv, path, &mem));
    for (int i = 0; i < inv->ngpus; i++) {
        const coh_gpu *g = &inv->gpus[i];
        coh_hw gpu; /* its memory picks among a preset's variants */
        if (coh_hw_preset_for_gpu(g->name, g->memory_total_mib << 20, &gpu)) {
            char why[256]; /* a GPU without a preset is bad input in the file, as a bad key is */
            snprintf(why, sizeof why, "%s", coh_last_error());
            return coh_errf(COH_ERR_INVALID, "inventory '%s': gpus[%d]: %s", path, i, why);
        }
        if (i == 0 || gpu.peak_flops < out->peak_flops ||
            (gpu.peak_flops == out->peak_flops && gpu.mem_bytes_per_s < out->mem_bytes_per_s))
            *out = gpu;
    }
    out->memory_bytes = mem.smallest_mib << 20;
    coh_plan_inventory_note(&mem, path, 1, out->note, sizeof out->note);
    out->gpus_per_node = inv->ngpus;
    out->nodes = nodes;
    snprintf(out->source + strlen(out->source), sizeof out->source - strlen(out->source),
             "; inventory %s", path);
    /* "links" was checked with the rest of the file; a link not given keeps the preset's. */
    if (inv->intra_node.gbytes_per_s > 0) {
        out->intra.bytes_per_s = inv->intra_node.gbytes_per_s * 1e9;
        out->intra.alpha_s = inv->intra_node.latency_us * 1e-6;
    }
    if (inv->inter_node.gbytes_per_s > 0) {
        out->inter.bytes_per_s = inv->inter_node.gbytes_per_s * 1e9;
        out->inter.alpha_s = inv->inter_node.latency_us * 1e-6;
    }
    if (nodes > 1 && out->inter.bytes_per_s <= 0)
        return coh_errf(COH_ERR_INVALID, "inventory '%s' has no \"links\": {\"inter_node\": "
                        "{\"gbytes_per_s\": ..., \"latency_us\": ...}}: a plan over %d nodes "
                        "needs the link between them", path, nodes);
    return COH_OK;
}

/* The device layer's parser reads the file (src/device/inventory.c), as for `cohort devices`:
 * one schema, one set of checks and the same messages for every command. */
coh_status coh_hw_from_inventory(const char *path, int nodes, coh_hw *out)
{
    memset(out, 0, sizeof *out); /* defined on every error */
    coh_inventory *inv;
    coh_status st = coh_inventory_load(path, &inv);
    if (st != COH_OK)
        return st;
    st = inventory_hw(inv, path, nodes < 1 ? 1 : nodes, out);
    coh_inventory_destroy(inv);
    return st;
}

/* The best measured GEMM rate of any row, scaled from its threads to every core. */
double plan_cpu_peak(const coh_hw *hw)
{
    double best = 0;
    for (int r = 0; r < hw->nrates; r++)
        for (int i = 0; i < hw->rates[r].gemm.n; i++)
            best = fmax(best, hw->rates[r].gemm.flops[i] * hw->cores / hw->rates[r].threads);
    return best;
}

/* ---- calibration ---------------------------------------------------------------------------- */

static const char *const CAL_KEYS[] = {"cohort_calibration", "device", "machine", "cores",
                                       "memory_bytes", "peak_gflops", "rates", "link",
                                       "inter_node", NULL};
/* A GPU's file (`cohort bench gemm --device cuda --out`): its preset, and what was measured in
 * place of the preset's constants. */
static const char *const GPU_CAL_KEYS[] = {"cohort_calibration", "device", "machine", "gpu",
                                           NULL};
static const char *const GPU_KEYS[] = {"preset", "gemm_efficiency", "elementwise_gbytes_per_s",
                                       "op_overhead_us", "gemm", NULL};
static const char *const RATE_KEYS[] = {"threads", "gemm", "elementwise_gbytes_per_s",
                                        "op_overhead_us", NULL};

static coh_status parse_curve(const char *file, const char *where, const json_value *a,
                              coh_rate_curve *c)
{
    if (!a || a->type != JSON_ARRAY || a->u.arr.count < 1 || a->u.arr.count > COH_RATE_POINTS)
        return coh_errf(COH_ERR_INVALID, "%s: %s.gemm: need an array of 1 to %d [work, "
                        "flops_per_s] points", file, where, COH_RATE_POINTS);
    c->n = 0;
    for (size_t i = 0; i < a->u.arr.count; i++) {
        const json_value *p = a->u.arr.items[i];
        if (p->type != JSON_ARRAY || p->u.arr.count != 2 ||
            p->u.arr.items[0]->type != JSON_NUMBER || p->u.arr.items[1]->type != JSON_NUMBER)
            return coh_errf(COH_ERR_INVALID, "%s: %s.gemm[%zu]: not a [work, flops_per_s] pair",
                            file, where, i);
        double w = p->u.arr.items[0]->u.num.value, f = p->u.arr.items[1]->u.num.value;
        if (!isfinite(w) || !isfinite(f) || w < 1 || w > 1e18 || f < 1e3 || f > 1e18)
            return coh_errf(COH_ERR_INVALID, "%s: %s.gemm[%zu]: [%g, %g]: work from 1 to 1e18 "
                            "and FLOP/s from 1e3 to 1e18", file, where, i, w, f);
        if (i > 0 && w <= c->work[i - 1])
            return coh_errf(COH_ERR_INVALID, "%s: %s.gemm[%zu]: work %g not above the previous "
                            "point's %g (sort the points)", file, where, i, w, c->work[i - 1]);
        c->work[i] = w;
        c->flops[i] = f;
        c->n++;
    }
    return COH_OK;
}

static coh_status parse_rates(const char *file, const json_value *a, coh_hw *out)
{
    if (!a || a->type != JSON_ARRAY || a->u.arr.count < 1 || a->u.arr.count > COH_HW_MAX_RATES)
        return coh_errf(COH_ERR_INVALID, "%s: rates: need an array of 1 to %d rows", file,
                        COH_HW_MAX_RATES);
    for (size_t i = 0; i < a->u.arr.count; i++) {
        char where[32];
        snprintf(where, sizeof where, "rates[%zu]", i);
        const json_value *r = a->u.arr.items[i];
        JSON_TRY(check_keys(file, where, r, RATE_KEYS));
        coh_device_rates *d = &out->rates[i];
        double threads = 0, ew = 0, oh = 0;
        JSON_TRY(get_num(file, where, r, "threads", 1, 1, 4096, 0, &threads));
        if (threads != floor(threads))
            return coh_errf(COH_ERR_INVALID, "%s: %s.threads: %g is not an integer", file,
                            where, threads);
        if (i > 0 && (int)threads <= out->rates[i - 1].threads)
            return coh_errf(COH_ERR_INVALID, "%s: %s.threads: %g not above the previous row's "
                            "%d (one row per thread count, ascending)", file, where, threads,
                            out->rates[i - 1].threads);
        d->threads = (int)threads;
        JSON_TRY(parse_curve(file, where, json_get(r, "gemm"), &d->gemm));
        JSON_TRY(get_num(file, where, r, "elementwise_gbytes_per_s", 1, 1e-3, 1e6, 0, &ew));
        JSON_TRY(get_num(file, where, r, "op_overhead_us", 0, 0, 1e6, 0, &oh));
        d->elementwise_bytes_per_s = ew * 1e9;
        d->op_overhead_s = oh * 1e-6;
        out->nrates = (int)i + 1;
    }
    return COH_OK;
}

static coh_status parse_gpu_calibration(const json_value *root, const char *file, coh_hw *out)
{
    JSON_TRY(check_keys(file, "(top level)", root, GPU_CAL_KEYS));
    double version = 0, eff = 0, ew = 0, oh = 0;
    JSON_TRY(get_num(file, "(top level)", root, "cohort_calibration", 1, 1, 1, 0, &version));
    const json_value *m = json_get(root, "machine"), *g = json_get(root, "gpu");
    if (!m || m->type != JSON_STRING)
        return coh_errf(COH_ERR_INVALID, "%s: machine: missing or not a string", file);
    if (!g)
        return coh_errf(COH_ERR_INVALID, "%s: (top level): missing 'gpu'", file);
    JSON_TRY(check_keys(file, "gpu", g, GPU_KEYS));
    const json_value *p = json_get(g, "preset");
    if (!p || p->type != JSON_STRING)
        return coh_errf(COH_ERR_INVALID, "%s: gpu.preset: missing or not a string", file);
    coh_status st = coh_hw_preset(p->u.str.chars, out);
    if (st)
        return coh_err_prefix(st, "%s: gpu.preset", file);
    JSON_TRY(get_num(file, "gpu", g, "gemm_efficiency", 1, 0.01, 1.0, 0, &eff));
    JSON_TRY(get_num(file, "gpu", g, "elementwise_gbytes_per_s", 1, 1, 1e5, 0, &ew));
    JSON_TRY(get_num(file, "gpu", g, "op_overhead_us", 1, 0, 1e4, 0, &oh));
    coh_rate_curve curve; /* the squares it was measured on, kept for the record */
    JSON_TRY(parse_curve(file, "gpu", json_get(g, "gemm"), &curve));
    snprintf(out->name, sizeof out->name, "%s", m->u.str.chars);
    snprintf(out->source, sizeof out->source, "calibration %s (measured GEMM efficiency, "
             "stream and op overhead over the %s preset)", file, p->u.str.chars);
    out->gemm_efficiency = eff;
    out->rates[0].elementwise_bytes_per_s = ew * 1e9;
    out->rates[0].op_overhead_s = oh * 1e-6;
    return COH_OK;
}

static coh_status parse_calibration(const json_value *root, const char *file, coh_hw *out)
{
    memset(out, 0, sizeof *out);
    const json_value *device = json_get(root, "device");
    if (device && (device->type != JSON_STRING || (strcmp(device->u.str.chars, "cpu") &&
                                                   strcmp(device->u.str.chars, "cuda"))))
        return coh_errf(COH_ERR_INVALID, "%s: device: %s%s%s: valid are \"cpu\" and \"cuda\"",
                        file, device->type == JSON_STRING ? "'" : "",
                        device->type == JSON_STRING ? device->u.str.chars
                                                    : json_type_name(device->type),
                        device->type == JSON_STRING ? "'" : "");
    if (device && !strcmp(device->u.str.chars, "cuda"))
        return parse_gpu_calibration(root, file, out);
    JSON_TRY(check_keys(file, "(top level)", root, CAL_KEYS));
    double version = 0, cores = 0, mem = 0, peak = 0;
    JSON_TRY(get_num(file, "(top level)", root, "cohort_calibration", 1, 1, 1, 0, &version));
    JSON_TRY(get_num(file, "(top level)", root, "cores", 1, 1, 4096, 0, &cores));
    if (cores != floor(cores))
        return coh_errf(COH_ERR_INVALID, "%s: cores: %g is not an integer", file, cores);
    JSON_TRY(get_num(file, "(top level)", root, "memory_bytes", 0, 0, 1e18, 0, &mem));
    JSON_TRY(get_num(file, "(top level)", root, "peak_gflops", 0, 0, 1e9, 0, &peak));
    const json_value *m = json_get(root, "machine");
    if (m && m->type != JSON_STRING)
        return coh_errf(COH_ERR_INVALID, "%s: machine: not a string", file);
    snprintf(out->name, sizeof out->name, "%s", m ? m->u.str.chars : "this machine");
    snprintf(out->source, sizeof out->source, "calibration %s", file);
    out->gpu = 0;
    out->cores = (int)cores;
    out->memory_bytes = (uint64_t)mem;
    out->precision = COH_PREC_FP32;
    out->gpus_per_node = (int)cores;
    out->nodes = 1;
    JSON_TRY(parse_rates(file, json_get(root, "rates"), out));
    out->peak_flops = peak > 0 ? peak * 1e9 : plan_cpu_peak(out);
    const json_value *link = json_get(root, "link");
    if (link)
        JSON_TRY(parse_link(file, "link", link, &out->intra));
    else
        out->intra = (coh_link){5e-6, 2e9};
    out->inter = (coh_link){0, 0};
    /* the link to another node like this one (`cohort bench link --calibration`); without it
     * a plan over several nodes needs --link-inter */
    const json_value *inter = json_get(root, "inter_node");
    if (inter)
        JSON_TRY(parse_link(file, "inter_node", inter, &out->inter));
    return COH_OK;
}

coh_status coh_calibration_parse(const char *text, size_t len, const char *name, coh_hw *out)
{
    memset(out, 0, sizeof *out);
    json_doc *doc;
    coh_status st = json_parse(text, len, &doc);
    if (st != COH_OK)
        return coh_err_prefix(st == COH_ERR_NOMEM ? st : COH_ERR_INVALID, "calibration %s", name);
    st = parse_calibration(json_root(doc), name, out);
    json_free(doc);
    return st;
}

coh_status coh_calibration_load(const char *path, coh_hw *out)
{
    memset(out, 0, sizeof *out);
    char *buf;
    size_t len;
    coh_status st = util_read_file(path, (size_t)16 << 20, &buf, &len);
    if (st == COH_ERR_INVALID)
        return coh_errf(COH_ERR_INVALID, "calibration file '%s' is over 16 MiB", path);
    if (st)
        return coh_errf(st, "cannot read calibration file '%s'", path);
    st = coh_calibration_parse(buf, len, path, out);
    free(buf);
    return st;
}

/* A measured figure as the file keeps it: 6 significant digits (more than any measurement
 * here holds), so that a file read and written again is the same file although the units
 * convert (µs to s and back need not give the same double). */
static void put_num(coh_jw *w, double v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.6g", v);
    coh_jw_double(w, strtod(buf, NULL));
}

static void put_field(coh_jw *w, const char *key, double v)
{
    coh_jw_key(w, key);
    put_num(w, v);
}

/* The file's rate curve, [[work, flops], ...]. */
static void write_curve(coh_jw *w, const coh_rate_curve *c)
{
    coh_jw_array_begin(w);
    for (int k = 0; k < c->n; k++) {
        coh_jw_array_begin(w);
        put_num(w, c->work[k]);
        put_num(w, c->flops[k]);
        coh_jw_array_end(w);
    }
    coh_jw_array_end(w);
}

/* A link, {"latency_us": ..., "gbytes_per_s": ...}, under key. */
static void write_link(coh_jw *w, const char *key, const coh_link *l)
{
    coh_jw_key(w, key);
    coh_jw_object_begin(w);
    put_field(w, "latency_us", l->alpha_s * 1e6);
    put_field(w, "gbytes_per_s", l->bytes_per_s / 1e9);
    coh_jw_object_end(w);
}

/* Ends a calibration file written with w: COH_ERR_IO naming it when it could not be written. */
static coh_status close_calibration(coh_jw *w, FILE *f, const char *path)
{
    coh_jw_finish(w);
    int bad = ferror(f);
    if (fclose(f) || bad)
        return coh_errf(COH_ERR_IO, "cannot write calibration file '%s'", path);
    return COH_OK;
}

coh_status coh_calibration_write(const coh_hw *hw, const char *path)
{
    if (hw->gpu || hw->nrates < 1)
        return coh_errf(COH_ERR_INVALID, "only measured CPU rates are written to a calibration "
                                         "file");
    FILE *f = fopen(path, "w");
    if (!f)
        return coh_errf(COH_ERR_IO, "cannot write calibration file '%s'", path);
    coh_jw w;
    coh_jw_init(&w, f, 1);
    coh_jw_object_begin(&w);
    coh_jw_field_int(&w, "cohort_calibration", 1);
    coh_jw_field_string(&w, "machine", hw->name);
    coh_jw_field_int(&w, "cores", hw->cores);
    coh_jw_field_uint(&w, "memory_bytes", hw->memory_bytes);
    put_field(&w, "peak_gflops", hw->peak_flops / 1e9);
    coh_jw_key(&w, "rates");
    coh_jw_array_begin(&w);
    for (int i = 0; i < hw->nrates; i++) {
        const coh_device_rates *r = &hw->rates[i];
        coh_jw_object_begin(&w);
        coh_jw_field_int(&w, "threads", r->threads);
        put_field(&w, "elementwise_gbytes_per_s", r->elementwise_bytes_per_s / 1e9);
        put_field(&w, "op_overhead_us", r->op_overhead_s * 1e6);
        coh_jw_key(&w, "gemm");
        write_curve(&w, &r->gemm);
        coh_jw_object_end(&w);
    }
    coh_jw_array_end(&w);
    write_link(&w, "link", &hw->intra);
    if (hw->inter.bytes_per_s > 0)
        write_link(&w, "inter_node", &hw->inter);
    coh_jw_object_end(&w);
    return close_calibration(&w, f, path);
}

coh_status coh_gpu_calibration_write(const char *path, const char *machine, const char *preset,
                                     double gemm_efficiency, double elementwise_bytes_per_s,
                                     double op_overhead_s, const coh_rate_curve *squares)
{
    coh_hw check;
    if (coh_hw_preset(preset, &check))
        return coh_err_prefix(COH_ERR_INVALID, "a GPU calibration file's preset");
    FILE *f = fopen(path, "w");
    if (!f)
        return coh_errf(COH_ERR_IO, "cannot write calibration file '%s'", path);
    coh_jw w;
    coh_jw_init(&w, f, 1);
    coh_jw_object_begin(&w);
    coh_jw_field_int(&w, "cohort_calibration", 1);
    coh_jw_field_string(&w, "device", "cuda");
    coh_jw_field_string(&w, "machine", machine);
    coh_jw_key(&w, "gpu");
    coh_jw_object_begin(&w);
    coh_jw_field_string(&w, "preset", preset);
    put_field(&w, "gemm_efficiency", gemm_efficiency);
    put_field(&w, "elementwise_gbytes_per_s", elementwise_bytes_per_s / 1e9);
    put_field(&w, "op_overhead_us", op_overhead_s * 1e6);
    coh_jw_key(&w, "gemm");
    write_curve(&w, squares);
    coh_jw_object_end(&w);
    coh_jw_object_end(&w);
    return close_calibration(&w, f, path);
}
